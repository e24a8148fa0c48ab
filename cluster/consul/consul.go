// Package consul wires protoactor-go's Consul provider into a sluice
// node, for clusters whose members register with a Consul agent instead
// of listing static peers.
//
// It is a module of its own (github.com/sluicehq/sluice/cluster/consul), so
// that sluice's module never depends on Consul's client:
//
//	p, err := consul.New(consul.Config{Address: "127.0.0.1:8500"})
//	n, err := cluster.Start(ctx, cluster.Config{Name: "n1", Host: "10.0.0.5", Port: 7001, Provider: p})
//
// Each node registers as a service named after Config.ClusterName, with
// its member id ("name.random") as service id, its Host and Port as
// address, and a TTL check it refreshes; Consul's view is the membership.
// Nothing listens besides the node's own port. A member whose TTL expires
// leaves the others' view and is blocked there.
// Secure the agent's API (ACL token, TLS) through Config.Consul.
//
// Untested against a server: CI builds and vets this module, but no Consul
// agent runs there. It gives membership only: it is not a
// cluster.LeasedProvider, so a paused or cut-off node is not fenced (it is
// not told that its TTL expired), and there is no cluster.Leadership for
// it (see docs/deployment.md; use static peers or cluster/etcd where
// fencing matters).
package consul

import (
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/consul"
	"github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/cluster"
)

// Config configures the provider.
type Config struct {
	// Address of the Consul agent's HTTP API. Default: Consul's default
	// (CONSUL_HTTP_ADDR, else 127.0.0.1:8500).
	Address string
	// Consul is the client's whole configuration (token, TLS, ...);
	// Address overrides its Address when both are set.
	Consul *api.Config
	// TTL is how long a silent member stays registered. Default 3 s.
	TTL time.Duration
	// RefreshTTL is how often a node refreshes its TTL. Default 1 s.
	RefreshTTL time.Duration
}

// New returns a cluster.Provider backed by Consul.
func New(cfg Config) (cluster.Provider, error) {
	cc := cfg.Consul
	if cc == nil {
		cc = api.DefaultConfig()
	}
	if cfg.Address != "" {
		cc.Address = cfg.Address
	}
	var opts []consul.Option
	if cfg.TTL > 0 {
		opts = append(opts, consul.WithTTL(cfg.TTL))
	}
	if cfg.RefreshTTL > 0 {
		opts = append(opts, consul.WithRefreshTTL(cfg.RefreshTTL))
	}
	return consul.NewWithConfig(cc, opts...)
}

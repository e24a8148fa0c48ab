// Package etcd wires protoactor-go's etcd provider into a sluice node, for
// clusters whose members register in etcd instead of listing static peers.
//
// It is a module of its own (github.com/sluicehq/sluice/cluster/etcd), so
// that sluice's module never depends on etcd's client:
//
//	p, err := etcd.New(etcd.Config{Endpoints: []string{"127.0.0.1:2379"}})
//	n, err := cluster.Start(ctx, cluster.Config{Name: "n1", Host: "10.0.0.5", Port: 7001, Provider: p})
//
// Each node writes a key under BaseKey/ClusterName with its member id,
// Host and Port, kept alive by a lease; the watched keys are the
// membership. A member whose lease expires leaves and, as with static
// peers, can only rejoin after a restart. Nothing listens besides the
// node's own port. Secure etcd through Config.Client (TLS, user and
// password).
package etcd

import (
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicehq/sluice/cluster"
)

// Config configures the provider.
type Config struct {
	// Endpoints of the etcd cluster. Default 127.0.0.1:2379.
	Endpoints []string
	// BaseKey is the prefix of the members' keys. Default "/sluice".
	BaseKey string
	// Client is etcd's client configuration (TLS, credentials, ...);
	// Endpoints overrides its Endpoints when both are set.
	Client *clientv3.Config
}

// New returns a cluster.Provider backed by etcd.
func New(cfg Config) (cluster.Provider, error) {
	cc := clientv3.Config{DialTimeout: 5 * time.Second}
	if cfg.Client != nil {
		cc = *cfg.Client
	}
	if len(cfg.Endpoints) > 0 {
		cc.Endpoints = cfg.Endpoints
	}
	if len(cc.Endpoints) == 0 {
		cc.Endpoints = []string{"127.0.0.1:2379"}
	}
	if cfg.BaseKey == "" {
		cfg.BaseKey = "/sluice"
	}
	return etcd.NewWithConfig(cfg.BaseKey, cc)
}

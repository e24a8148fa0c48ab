// Package k8s wires protoactor-go's Kubernetes provider into a sluice
// node, for clusters whose members are the pods of a Kubernetes
// namespace.
//
// It is a module of its own (github.com/sluicehq/sluice/cluster/k8s), so
// that sluice's module never depends on client-go:
//
//	p, err := k8s.New(k8s.Config{}) // in a pod: the in-cluster configuration
//	n, err := cluster.Start(ctx, cluster.Config{Name: podName, Host: podIP, Port: 7001, Provider: p})
//
// Each node labels its own pod with the cluster's name, its port and its
// member id, and watches the pods with the cluster's label: they are the
// membership. The pod's service account needs get, list, watch and patch
// on pods in its namespace. Node names must have at most 40 characters,
// so that the member id ("name.random") is a valid label value. Nothing
// listens besides the node's own port (bind Host to the pod's IP).
//
// Untested against a server: CI builds and vets this module, but no
// Kubernetes API runs there. It gives membership only: it is not a
// cluster.LeasedProvider, so a paused or cut-off node is not fenced, and
// there is no cluster.Leadership for it (see docs/deployment.md; use
// static peers or cluster/etcd where fencing matters).
package k8s

import (
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/k8s"
	"k8s.io/client-go/rest"

	"github.com/sluicehq/sluice/cluster"
)

// Config configures the provider.
type Config struct {
	// Rest is the API server's configuration. Default: the in-cluster one
	// (the pod's service account).
	Rest *rest.Config
}

// New returns a cluster.Provider backed by the Kubernetes API.
func New(cfg Config) (cluster.Provider, error) {
	if cfg.Rest == nil {
		return k8s.New()
	}
	return k8s.NewWithConfig(cfg.Rest)
}

package graph

import (
	"github.com/sluicehq/sluice/internal/dist"
)

// Distributed execution: the runtime's side of package dist (which tells
// the whole story); package cluster implements dist.Distributor.

// Distributor places the instances of a distributed job (dist.Distributor).
type Distributor = dist.Distributor

// Task is a chain of operators fused into one actor per instance.
type Task = dist.Task

// Distribute runs the topology across processes with d (see Distributor).
// Package cluster sets it; applications call cluster.Run.
func Distribute(d Distributor) TopologyOption { return func(c *Config) { c.Dist = d } }

// Configure applies options to a topology after it was built: for a runner
// (package cluster) that adds its own options to the user's topology.
func (t *Topology) Configure(opts ...TopologyOption) {
	for _, o := range opts {
		o(&t.cfg)
	}
}

// RestartsOnFailure says whether the topology was given RestartOnFailure.
func (t *Topology) RestartsOnFailure() bool { return t.cfg.Restart != nil }

func (p *Plan) InstanceCount() int {
	n := 0
	for _, chain := range p.Chains {
		n += p.Par[chain[0]]
	}
	return n
}

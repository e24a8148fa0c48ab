package engine

import "github.com/sluicehq/sluice/internal/graph"

// What package cluster reaches through the engine of package graph: the
// topology under a user's, and the settings it adds to it.
type (
	Topology       = graph.Topology
	TopologyOption = graph.TopologyOption
)

var (
	Of               = graph.Of
	RestartOnFailure = graph.RestartOnFailure
	CheckpointStore  = graph.CheckpointStore
	Distribute       = graph.Distribute
)

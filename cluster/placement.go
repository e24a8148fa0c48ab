package cluster

import (
	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/engine"
)

// PlacementOf counts the operator instances of a distributed run by the
// address of the process that runs them (nil for a run in one process).
func PlacementOf(run *actors.Run) map[string]int { return engine.PlacementOf(run) }

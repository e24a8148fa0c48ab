package graph

import "github.com/sluicehq/sluice/internal/stage"

// The stage types the engine's API names (package stage implements them).
type (
	EmitMode                               = stage.EmitMode
	Windows                                = stage.Windows
	Either[L, R any]                       = stage.Either[L, R]
	ProcessContext[K comparable, S, O any] = stage.ProcessContext[K, S, O]
)

// When a per-key aggregation emits.
const (
	EmitUpdates = stage.EmitUpdates
	EmitAtEnd   = stage.EmitAtEnd
)

// Tumbling, Sliding and Sessions are the windows of package stage.
var (
	Tumbling = stage.Tumbling
	Sliding  = stage.Sliding
	Sessions = stage.Sessions
)

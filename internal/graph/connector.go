package graph

import "github.com/sluicehq/sluice/connector"

// The connector interfaces, by the names the engine uses.
type (
	SourceConnector[T any] = connector.Source[T]
	Reader[T any]          = connector.Reader[T]
	Waiter                 = connector.Waiter
	Checkpointer           = connector.Checkpointer
	TwoPhaseWriter         = connector.TwoPhaseWriter
	Aborter                = connector.Aborter
	Acker                  = connector.Acker
	RestorableSink[T any]  = connector.RestorableSink[T]
	SinkConnector[T any]   = connector.Sink[T]
	Writer[T any]          = connector.Writer[T]
)

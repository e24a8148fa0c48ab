package graph

import (
	"time"

	"github.com/sluicehq/sluice/supervision"
)

// OnRecordFailure sets what an operator does when its function panics on a
// record: it tries the record again, up to attempts times in all, and then
// hands it to the job's dead-letter store (with the operator, the error,
// the attempts and the time) and goes on with the next record. Without it, a
// panic fails the operator (and the job restarts or stops, see
// RestartOnFailure). It covers Map, Filter, FlatMap and the per-key
// aggregations (their key and fold functions).
func OnRecordFailure(attempts int) Option {
	return func(nd *Node) { nd.recordAttempts, nd.recordPolicy = attempts, true }
}

// DeadLetters sets where the job's dead letters go. Default: the system's
// store (see sluice deadletters).
func DeadLetters(s supervision.DeadLetterStore) TopologyOption {
	return func(c *Config) { c.DeadLetters = s }
}

// RestartPolicy is RestartOnFailure's configuration.
type RestartPolicy struct {
	Backoff supervision.Backoff
	Budget  int
	Within  time.Duration
}

// RestartOnFailure makes the job restart when an operator fails (a panic
// without OnRecordFailure, a sink error, a failed open): every operator
// instance stops, and after the backoff's delay the whole job starts again
// from its last completed checkpoint (from the beginning without
// checkpoints), as Flink restarts a job region. At most maxRestarts
// restarts within the window are allowed; the next failure stops the job
// with an error that gives the reason and the count.
func RestartOnFailure(backoff supervision.Backoff, maxRestarts int, within time.Duration) TopologyOption {
	return func(c *Config) { c.Restart = &RestartPolicy{Backoff: backoff, Budget: maxRestarts, Within: within} }
}

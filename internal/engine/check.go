package engine

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/graph"
	"github.com/sluicehq/sluice/mailbox"

	"github.com/sluicehq/sluice/actors"
)

// CheckAccounts checks the bookkeeping of a run's mailboxes in this process,
// for tests: every record posted to a mailbox was delivered, dropped (and
// counted) or is still queued, in memory or spilled; and once the run has
// ended nothing is queued any more. It returns one error per mailbox that
// is off, nil when all are right (or the run is not a topology's).
func CheckAccounts(run *actors.Run) []error {
	x, ok := run.Execution().(*execution)
	if !ok {
		return nil
	}
	ended := false
	select {
	case <-x.done:
		ended = true
	default:
	}
	x.instMu.RLock()
	defer x.instMu.RUnlock()
	var errs []error
	for id, insts := range x.instances {
		for _, in := range insts {
			mb := in.mb.Load()
			if mb == nil || !x.local(in.self) {
				continue
			}
			name := fmt.Sprintf("%s instance %d (gen %d)", x.plan.Tasks[id].Name(), in.idx, in.gen)
			errs = append(errs, accountErrors(name, mb.Stats(), ended)...)
		}
	}
	return errs
}

// accountErrors checks one mailbox's statistics (see CheckAccounts).
func accountErrors(name string, s mailbox.Stats, ended bool) []error {
	var errs []error
	if queued := int64(s.Depth) + s.SpillPending; s.Posted != s.Delivered+s.DroppedTotal()+queued {
		errs = append(errs, fmt.Errorf("%s: %d records posted, %d delivered + %d dropped + %d queued",
			name, s.Posted, s.Delivered, s.DroppedTotal(), queued))
	}
	if ended && (s.Depth != 0 || s.SpillPending != 0) {
		errs = append(errs, fmt.Errorf("%s: %d records queued and %d spilled after the job ended", name, s.Depth, s.SpillPending))
	}
	return errs
}

// PlanOf is the plan a topology's run executes, nil for another kind of run.
func PlanOf(run *actors.Run) *graph.Plan {
	if x, ok := run.Execution().(*execution); ok {
		return x.plan
	}
	return nil
}

package cluster

import (
	"context"
	"fmt"
)

// Leadership elects the coordinator of each job in a coordination service
// and fences its checkpoint commits there (package
// github.com/sluicehq/sluice/cluster/etcd's Provider.Leadership: one etcd
// election per job, on the node's lease). Set Config.Leadership to use
// it; without it, the copies of a job's log elect its coordinator among
// themselves (see Coordinator failover in the package doc).
//
// With a Leadership:
//
//   - Run campaigns for the job first and fails if another node leads it
//     (within RequestTimeout);
//   - every checkpoint of the job is replicated to the copies of its log
//     as without, and then committed through the term (Term.Commit): a
//     compare-and-swap on the term's fencing token that a stale leader
//     cannot pass, which also records the checkpoint as the job's latest
//     completed one in the service. A checkpoint is complete only once
//     committed; a fenced commit stops the job here;
//   - when a job's coordinator leaves, the copies of its log campaign; the
//     one the service elects takes the job over if its copy holds the
//     latest committed checkpoint (else it resigns for another copy), after
//     winning the log's next epoch from the copies as without (so that the
//     replicas refuse the old leader's appends too);
//   - a term that ends (its lease expired) stops the job here.
//
// The replicated checkpoint data stays on the nodes; the service holds the
// elections and a pointer per job.
type Leadership interface {
	// Campaign makes this node a candidate for leading job and returns its
	// term once it leads, or ctx's error.
	Campaign(ctx context.Context, job string) (Term, error)
}

// Term is one node's leadership of one job.
type Term interface {
	// Token is the term's fencing token; a later term of the job has a
	// greater one (etcd: the revision at which the candidate's key was
	// created).
	Token() uint64
	// Commit records checkpoint as the job's latest completed one if this
	// term still leads the job; else it fails with an error wrapping
	// ErrFenced.
	Commit(ctx context.Context, checkpoint uint64) error
	// Latest returns the job's latest committed checkpoint (0: none).
	Latest(ctx context.Context) (uint64, error)
	// Done is closed when the term ends: resigned, or its lease is gone.
	Done() <-chan struct{}
	// Resign ends the term: another candidate may lead.
	Resign(ctx context.Context) error
}

// The decisions of a node about one job it may lead in a Leadership, as
// a pure state machine: lead.Step(event) returns the next state and the
// actions the node performs (campaign, resign, claim the log's epoch,
// take the job over, abandon it); the node feeds the actions' outcomes
// back as events. Transcripts in testdata/leadership.

// leadPhase is where a node stands with a job.
type leadPhase uint8

const (
	leadIdle        leadPhase = iota
	leadCampaigning           // waiting to be elected
	leadClaiming              // elected: winning the log's epoch from the copies
	leadLeading               // running the job in a term
	leadOver                  // the term ended (the job stopped here, or ended)
)

func (p leadPhase) String() string {
	return [...]string{"idle", "campaigning", "claiming", "leading", "over"}[p]
}

// lead is a node's state for one job.
type lead struct {
	Phase leadPhase
	// Starting: the campaign is Run's (the job starts here), not a
	// takeover.
	Starting bool
	Token    uint64 // the term's, once elected
	// Committed is the newest checkpoint this term committed (or found
	// committed when elected).
	Committed uint64
}

// Events.
type (
	// leadRun: Run starts the job here.
	leadRun struct{}
	// leadLost: the job's coordinator left; this node holds a copy of
	// its log.
	leadLost struct{}
	// leadElected: the campaign won. The facts are read after winning:
	// the job's latest committed checkpoint, the newest one this node's
	// copy holds, and the job's last run record as the copy has it.
	leadElected struct {
		Token                uint64
		Pointer, Held        uint64
		Running              bool // the run record says the job runs
		CoordinatorLive      bool // its coordinator is a member now
		CoordinatorIsThisOne bool
	}
	// leadClaimed: the log's epoch was won (OK) or not.
	leadClaimed struct{ OK bool }
	// leadCommitted: a checkpoint commit's outcome (Fenced: the term no
	// longer leads; otherwise Err is another failure, such as the
	// service being unreachable).
	leadCommitted struct {
		Checkpoint uint64
		Fenced     bool
		Err        string
	}
	// leadTermEnded: the term's Done closed.
	leadTermEnded struct{}
	// leadJobEnded: the job's run here ended (ran to its end, failed,
	// drained, stopped).
	leadJobEnded struct{}
	// leadAbandoned: the node is stopping the job here (fenced, its lease
	// ran out): no more commits, though the run has not ended yet.
	leadAbandoned struct{}
)

// Actions.
type (
	leadCampaign   struct{}
	leadResign     struct{ Why string }
	leadClaim      struct{ Token uint64 }
	leadTakeOver   struct{ Token uint64 }
	leadStartRun   struct{ Token uint64 }
	leadAbandon    struct{ Why string }
	leadFailCommit struct{ Checkpoint uint64 }
)

// Step returns the state after ev and the actions to perform. It does not
// change l.
func (l lead) Step(ev any) (lead, []any) {
	switch e := ev.(type) {
	case leadRun:
		if l.Phase == leadIdle || l.Phase == leadOver {
			return lead{Phase: leadCampaigning, Starting: true}, []any{leadCampaign{}}
		}
	case leadLost:
		if l.Phase == leadIdle || l.Phase == leadOver {
			return lead{Phase: leadCampaigning}, []any{leadCampaign{}}
		}
	case leadElected:
		if l.Phase != leadCampaigning {
			return l, []any{leadResign{Why: "elected while " + l.Phase.String()}}
		}
		l.Token = e.Token
		if l.Starting {
			l.Phase, l.Committed = leadLeading, e.Pointer
			return l, []any{leadStartRun{Token: e.Token}}
		}
		switch {
		case !e.Running:
			return lead{Phase: leadIdle}, []any{leadResign{Why: "the job's run is over"}}
		case e.CoordinatorIsThisOne:
			return lead{Phase: leadIdle}, []any{leadResign{Why: "this node coordinates the job already"}}
		case e.CoordinatorLive:
			return lead{Phase: leadIdle}, []any{leadResign{Why: "the job's coordinator is a member again"}}
		case e.Held < e.Pointer:
			return lead{Phase: leadIdle}, []any{leadResign{Why: fmt.Sprintf("this copy holds checkpoint %d, checkpoint %d was committed: a newer copy must take over", e.Held, e.Pointer)}}
		}
		l.Phase, l.Committed = leadClaiming, e.Pointer
		return l, []any{leadClaim{Token: e.Token}}
	case leadClaimed:
		if l.Phase != leadClaiming {
			return l, nil
		}
		if !e.OK {
			return lead{Phase: leadIdle}, []any{leadResign{Why: "the copies did not grant the log's next epoch"}}
		}
		l.Phase = leadLeading
		return l, []any{leadTakeOver{Token: l.Token}}
	case leadCommitted:
		if l.Phase != leadLeading {
			return l, nil
		}
		switch {
		case e.Fenced:
			l.Phase = leadOver
			return l, []any{leadFailCommit{Checkpoint: e.Checkpoint}, leadAbandon{Why: fmt.Sprintf("checkpoint %d's commit was fenced: another node leads the job", e.Checkpoint)}}
		case e.Err != "":
			return l, []any{leadFailCommit{Checkpoint: e.Checkpoint}} // the next checkpoint tries again
		}
		l.Committed = max(l.Committed, e.Checkpoint)
		return l, nil
	case leadTermEnded:
		switch l.Phase {
		case leadLeading, leadClaiming:
			l.Phase = leadOver
			return l, []any{leadAbandon{Why: "the term ended (its lease is gone): another node may lead the job"}}
		case leadCampaigning:
			return lead{Phase: leadIdle}, nil
		}
	case leadAbandoned:
		if l.Phase == leadLeading || l.Phase == leadClaiming {
			l.Phase = leadOver
		}
		return l, nil
	case leadJobEnded:
		if l.Phase == leadLeading {
			return lead{Phase: leadIdle}, []any{leadResign{Why: "the job's run ended here"}}
		}
		if l.Phase == leadOver {
			return lead{Phase: leadIdle}, []any{leadResign{Why: "the job stopped here"}}
		}
	}
	return l, nil
}

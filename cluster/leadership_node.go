package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// The node's side of a Leadership (see leadership.go): it keeps a lead
// machine and the term per job, performs the machine's actions and feeds
// their outcomes back.

type leaderships struct {
	mu   sync.Mutex
	jobs map[string]*jobLead
}

type jobLead struct {
	st   lead
	term Term
	// cancelCommit ends the commit in progress (the job is abandoned: its
	// actor, waiting in Complete, must be free to stop)
	cancelCommit context.CancelFunc
}

// leadStep steps job's machine (and sets or clears its term: term is
// kept with the state it is given in) and returns the actions.
func (n *Node) leadStep(job string, ev any, term Term) (Term, []any) {
	r := &n.leads
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jobs == nil {
		r.jobs = map[string]*jobLead{}
	}
	j := r.jobs[job]
	if j == nil {
		j = &jobLead{}
		r.jobs[job] = j
	}
	var acts []any
	j.st, acts = j.st.Step(ev)
	if term != nil {
		j.term = term
	}
	t := j.term
	if j.st.Phase == leadIdle {
		j.term = nil
	}
	return t, acts
}

// leadDo performs the actions that need no answer: resign, abandon.
func (n *Node) leadDo(job string, term Term, acts []any) {
	for _, a := range acts {
		switch a := a.(type) {
		case leadResign:
			n.log.Info("leadership: resign", "job", job, "why", a.Why)
			if term != nil {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(n.life), n.cfg.RequestTimeout)
				if err := term.Resign(ctx); err != nil {
					n.log.Warn("leadership: resign", "job", job, "err", err)
				}
				cancel()
			}
		case leadAbandon:
			n.abandon(job, fmt.Errorf("cluster: job %q: %w: %s", job, ErrFenced, a.Why))
		}
	}
}

// campaignForRun makes this node the job's leader before Run starts it;
// it fails when another node leads the job (within RequestTimeout).
func (n *Node) campaignForRun(ctx context.Context, job string) error {
	_, acts := n.leadStep(job, leadRun{}, nil)
	if len(acts) == 0 {
		return fmt.Errorf("cluster: run %q: this node leads or campaigns for the job already", job)
	}
	cctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	term, err := n.cfg.Leadership.Campaign(cctx, job)
	if err != nil {
		n.leadStep(job, leadTermEnded{}, nil)
		return fmt.Errorf("cluster: run %q: not elected its leader within %v (another node leads it?): %w", job, n.cfg.RequestTimeout, err)
	}
	pctx, pcancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer pcancel()
	pointer, err := term.Latest(pctx)
	if err != nil {
		_ = term.Resign(pctx)
		n.leadStep(job, leadTermEnded{}, nil)
		return fmt.Errorf("cluster: run %q: read its committed checkpoint: %w", job, err)
	}
	_, acts = n.leadStep(job, leadElected{Token: term.Token(), Pointer: pointer}, term)
	n.leadDo(job, term, acts)
	n.watchTerm(job, term)
	return nil
}

// watchTerm stops the job here when its term ends.
func (n *Node) watchTerm(job string, term Term) {
	n.lifeMu.Lock()
	defer n.lifeMu.Unlock()
	if n.life.Err() != nil {
		return
	}
	n.lifeWG.Add(1)
	go func() {
		defer n.lifeWG.Done()
		select {
		case <-term.Done():
		case <-n.life.Done():
			return
		}
		n.leads.mu.Lock()
		j := n.leads.jobs[job]
		current := j != nil && j.term == term
		n.leads.mu.Unlock()
		if current {
			t, acts := n.leadStep(job, leadTermEnded{}, nil)
			n.leadDo(job, t, acts)
		}
	}()
}

// commitCheckpoint commits a replicated checkpoint of job through its term
// (no term: nothing to do). A fenced commit stops the job here.
func (n *Node) commitCheckpoint(ctx context.Context, job string, id uint64) error {
	// Bounded: the job actor waits (etcd without a leader holds the
	// transaction until it has one); a commit that times out fails this
	// checkpoint only. abandon cancels it (cancelCommit).
	cctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	var term Term
	n.leads.mu.Lock()
	if j := n.leads.jobs[job]; j != nil && j.st.Phase == leadLeading {
		term, j.cancelCommit = j.term, cancel
	}
	n.leads.mu.Unlock()
	if term == nil {
		if n.cfg.Leadership != nil {
			return fmt.Errorf("cluster: job %q checkpoint %d: %w: this node does not lead the job", job, id, ErrFenced)
		}
		return nil
	}
	err := term.Commit(cctx, id)
	ev := leadCommitted{Checkpoint: id, Fenced: errors.Is(err, ErrFenced)}
	if err != nil {
		ev.Err = err.Error()
	}
	t, acts := n.leadStep(job, ev, nil)
	n.leadDo(job, t, acts)
	if err != nil {
		return fmt.Errorf("cluster: job %q checkpoint %d: commit through its leadership: %w", job, id, err)
	}
	return nil
}

// cancelCommit ends job's commit in progress, if any, and refuses the
// next ones (abandon calls it: the job must stop within the time its lease
// leaves, and its actor may be waiting in a commit).
func (n *Node) cancelCommit(job string) {
	if n.cfg.Leadership == nil {
		return
	}
	n.leadStep(job, leadAbandoned{}, nil)
	n.leads.mu.Lock()
	defer n.leads.mu.Unlock()
	if j := n.leads.jobs[job]; j != nil && j.cancelCommit != nil {
		j.cancelCommit()
	}
}

// leadEnded tells job's machine that its run here ended.
func (n *Node) leadEnded(job string) {
	if n.cfg.Leadership == nil {
		return
	}
	t, acts := n.leadStep(job, leadJobEnded{}, nil)
	n.leadDo(job, t, acts)
}

// standLeadership is stand with a Leadership: this copy campaigns for the
// job; once elected it takes the job over if the machine says so, after
// winning the log's next epoch from the copies. It retries while the job
// is orphaned, up to 30 FailureTimeouts.
func (n *Node) standLeadership(job string) {
	log := "checkpoints/" + job
	ft := n.cfg.FailureTimeout
	deadline := time.Now().Add(30 * ft)
	for time.Now().Before(deadline) && n.life.Err() == nil {
		_, run, err := n.lastRecord(log)
		if err != nil || run == nil || !run.Running || n.isMemberID(run.CoordinatorID) {
			return // over, or coordinated by a member
		}
		_, acts := n.leadStep(job, leadLost{}, nil)
		if len(acts) == 0 {
			return // leading or campaigning already
		}
		ctx, cancel := context.WithDeadline(n.life, deadline)
		term, err := n.cfg.Leadership.Campaign(ctx, job)
		cancel()
		if err != nil {
			n.leadStep(job, leadTermEnded{}, nil)
			if n.life.Err() == nil {
				n.log.Warn("leadership: campaign", "job", job, "err", err)
			}
			return
		}
		pctx, pcancel := context.WithTimeout(n.life, n.cfg.RequestTimeout)
		pointer, perr := term.Latest(pctx)
		pcancel()
		cp, run, err := n.lastRecord(log)
		facts := leadElected{Token: term.Token(), Pointer: pointer}
		if err == nil && run != nil {
			facts.Running = run.Running
			facts.CoordinatorIsThisOne = run.CoordinatorID == n.ID()
			facts.CoordinatorLive = !facts.CoordinatorIsThisOne && n.isMemberID(run.CoordinatorID)
		}
		if cp != nil {
			facts.Held = cp.ID
		}
		if perr != nil {
			facts.Running = false // cannot tell: let another try
			n.log.Warn("leadership: read the committed checkpoint", "job", job, "err", perr)
		}
		t, acts := n.leadStep(job, facts, term)
		n.log.Info("leadership: elected", "job", job, "term", term.Token(), "committed", pointer, "held", facts.Held, "running", facts.Running)
		for _, a := range acts {
			if _, ok := a.(leadClaim); !ok {
				continue
			}
			epoch, ok, _ := n.claim(run, log)
			t2, next := n.leadStep(job, leadClaimed{OK: ok}, nil)
			for _, b := range next {
				if _, ok := b.(leadTakeOver); ok {
					n.watchTerm(job, t2)
					from := Member{Name: run.Coordinator, ID: run.CoordinatorID}
					if n.takeOver(job, run, from, epoch) {
						return
					}
					// could not run it here: resign for another copy
					t3, end := n.leadStep(job, leadJobEnded{}, nil)
					n.leadDo(job, t3, end)
				}
			}
			n.leadDo(job, t2, next)
		}
		n.leadDo(job, t, acts)
		// Resigned: another copy may be elected; try again later while
		// the job is orphaned.
		t4 := time.NewTimer(ft/2 + rand.N(ft))
		select {
		case <-t4.C:
		case <-n.life.Done():
			t4.Stop()
			return
		}
	}
}

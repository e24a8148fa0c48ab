package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/desired"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/operators"
)

// desiredState drives the pure machine of package internal/desired: it
// feeds it the documents read and the outcomes of the changes, and carries
// out its actions. Everything runs on the watcher's goroutine, one
// document at a time.
type desiredState struct {
	feedMu sync.Mutex // one document at a time
	mu     sync.Mutex // guards the fields below
	m      desired.Machine
	source string
	last   []Event // the document's events: acks, rejections
}

// DesiredStatus is the desired state's status: the newest version read,
// the newest applied and rejected (with the reason), and by job the
// version in force.
type DesiredStatus struct {
	Source   string            `json:"source,omitempty"`
	Desired  uint64            `json:"desired_version"`
	Good     uint64            `json:"good_version"`
	Rejected uint64            `json:"rejected_version,omitempty"`
	Reason   string            `json:"reason,omitempty"`
	Applied  map[string]uint64 `json:"applied_versions"`
	Events   []Event           `json:"events,omitempty"`
}

// DesiredStatus reports the desired state.
func (s *Server) DesiredStatus() DesiredStatus {
	s.ds.mu.Lock()
	defer s.ds.mu.Unlock()
	m := s.ds.m
	st := DesiredStatus{Source: s.ds.source, Desired: m.Desired, Good: m.Good, Rejected: m.Rejected, Reason: m.Reason,
		Applied: map[string]uint64{}, Events: slices.Clone(s.ds.last)}
	for j, v := range m.Applied {
		st.Applied[j] = v
	}
	return st
}

func (d *desiredState) versions(job string) (desiredV, applied uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m.Desired, d.m.Applied[job]
}

// ApplyDocument applies one desired-state document (JSON) read from source
// as one change: every setting it asks for, or none (see the package
// documentation). It returns the error of a rejection, nil when the
// version was applied or was already.
func (s *Server) ApplyDocument(ctx context.Context, source string, data []byte) error {
	doc, err := desired.Parse(source, data)
	// The view is read in the document's turn: read before it, a document
	// applied meanwhile is not in it, and this one is validated (and its
	// rollback computed) against settings the jobs no longer have.
	s.ds.feedMu.Lock()
	defer s.ds.feedMu.Unlock()
	return s.feedLocked(ctx, source, desired.Read{Doc: doc, Err: err, View: s.view()})
}

// view is what validation sees of the jobs here.
func (s *Server) view() desired.View {
	s.mu.Lock()
	runs := map[string]*job{}
	for name, j := range s.jobs {
		runs[name] = j
	}
	s.mu.Unlock()
	v := desired.View{Jobs: map[string]desired.JobView{}}
	for name, j := range runs {
		select {
		case <-j.run.Done():
			continue // an ended job runs nothing to change
		default:
		}
		infos, err := engine.Inputs(j.run)
		if err != nil {
			continue
		}
		jv := desired.JobView{Operators: map[string]desired.OperatorView{}}
		for _, info := range infos {
			ov := desired.OperatorView{Source: info.Source, Live: info.Live, Why: info.Why, Spill: info.Spill, Paused: info.Paused}
			if !info.Source {
				ov.Input = desired.Input(inputOf(info.Config))
			}
			jv.Operators[info.Operator] = ov
			for _, f := range info.Fused {
				jv.Operators[f] = desired.OperatorView{Head: info.Operator, Spill: info.Spill}
			}
		}
		jv.LatencyTarget = operators.ShedStatsOf(j.run).Target
		v.Jobs[name] = jv
	}
	return v
}

// feed steps the machine with ev and carries out its actions until it has
// none left; it returns the reason of a rejection.
func (s *Server) feed(ctx context.Context, source string, ev desired.Event) error {
	s.ds.feedMu.Lock()
	defer s.ds.feedMu.Unlock()
	return s.feedLocked(ctx, source, ev)
}

// feedLocked is feed, with feedMu held.
func (s *Server) feedLocked(ctx context.Context, source string, ev desired.Event) error {
	var rejected error
	var named []string // the jobs the document names: a rejection goes in their histories
	if r, ok := ev.(desired.Read); ok {
		for j := range r.Doc.Jobs {
			named = append(named, j)
		}
		slices.Sort(named)
	}
	if len(named) == 0 {
		named = []string{""}
	}
	queue := []desired.Event{ev}
	for len(queue) > 0 {
		s.ds.mu.Lock()
		s.ds.source = source
		var acts []desired.Action
		s.ds.m, acts = s.ds.m.Step(queue[0])
		s.ds.mu.Unlock()
		queue = queue[1:]
		for _, a := range acts {
			switch a := a.(type) {
			case desired.Apply:
				queue = append(queue, s.applyChanges(ctx, source, a.Version, a.Changes, "set-input"))
			case desired.Rollback:
				queue = append(queue, s.applyChanges(ctx, source, a.Version, a.Changes, "rollback"))
			case desired.Ack:
				for _, j := range a.Jobs {
					s.noteDesired(ctx, Event{Who: "desired " + source, Job: j, What: "desired", Version: a.Version,
						Detail: fmt.Sprintf("version %d in force", a.Version)}, nil)
				}
				rejected = nil
			case desired.Nack:
				rejected = errors.New(a.Reason)
				for _, j := range named {
					s.noteDesired(ctx, Event{Who: "desired " + source, Job: j, What: "desired", Version: a.Version,
						Detail: fmt.Sprintf("version %d rejected whole; the last good version stays in force", a.Version)}, rejected)
				}
			case desired.Ignore:
			}
		}
	}
	return rejected
}

// noteDesired records a document's outcome: in the job's history when it
// names one, and in the desired state's own events.
func (s *Server) noteDesired(ctx context.Context, ev Event, err error) {
	ev = s.record(ctx, ev, err)
	s.ds.mu.Lock()
	s.ds.last = append(s.ds.last, ev)
	if n := len(s.ds.last) - 32; n > 0 {
		s.ds.last = slices.Delete(s.ds.last, 0, n)
	}
	s.ds.mu.Unlock()
}

// applyChanges carries out the changes of a version (or of its rollback)
// in order and returns the event that reports how it went.
func (s *Server) applyChanges(ctx context.Context, source string, version uint64, changes []desired.Change, what string) desired.Event {
	var errs []error
	for i, c := range changes {
		ev := Event{Who: "desired " + source, Job: c.Job, Target: c.Operator, Version: version, What: what}
		var err error
		if c.LatencyTarget != nil {
			le := ev
			le.What = "latency-target"
			if what == "rollback" {
				le.What = "rollback"
			}
			err = s.setLatencyTarget(ctx, le, *c.LatencyTarget)
		}
		if err == nil && c.Paused != nil {
			pe := ev
			if what == "set-input" {
				pe.What = "" // pause or resume
			} else {
				pe.Detail = fmt.Sprintf("paused %t", *c.Paused)
			}
			err = s.pause(ctx, pe, *c.Paused)
		}
		if err == nil && c.Input != nil {
			err = s.setInput(ctx, ev, Input(*c.Input))
		}
		if err != nil {
			if what == "rollback" {
				errs = append(errs, fmt.Errorf("%s: %w", c, err))
				continue
			}
			return desired.Failed{Version: version, Index: i, Err: err.Error()}
		}
	}
	if what == "rollback" {
		rb := desired.RolledBack{Version: version}
		if err := errors.Join(errs...); err != nil {
			rb.Err = err.Error()
		}
		return rb
	}
	return desired.Done{Version: version}
}

// WatchFile applies the desired-state document at path now and whenever
// its content changes, looking every interval (default 200 ms, so that an
// edit is applied within a second) on the Server's clock, until stop is
// called; stop waits for a document being applied. A file that cannot be
// read or parsed is rejected like a bad document, and read again when it
// changes.
func (s *Server) WatchFile(path string, interval time.Duration) (stop func()) {
	if interval <= 0 {
		interval = 200 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu      sync.Mutex
		stopped bool
		timer   func() bool
		wg      sync.WaitGroup
		last    []byte
		lastErr string
	)
	var tick func()
	tick = func() {
		defer wg.Done()
		data, err := readLimited(path)
		switch {
		case err != nil:
			if err.Error() != lastErr {
				lastErr = err.Error()
				last = nil
				_ = s.feed(ctx, path, desired.Read{Err: fmt.Errorf("%w %s: %w", desired.ErrDocument, path, err)})
			}
		case !bytes.Equal(data, last):
			last, lastErr = data, ""
			_ = s.ApplyDocument(ctx, path, data)
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			wg.Add(1)
			timer = s.opts.Clock.AfterFunc(interval, tick)
		}
	}
	wg.Add(1)
	go tick() // owned: stop waits for it and for every tick after it
	return func() {
		mu.Lock()
		stopped = true
		if timer != nil && timer() {
			wg.Done() // the tick that will not run
		}
		mu.Unlock()
		cancel()
		wg.Wait()
	}
}

// readLimited reads a file of at most desired.MaxDocument bytes.
func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, desired.MaxDocument+1))
	if err != nil {
		return nil, err
	}
	return data, nil
}

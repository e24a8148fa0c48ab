package mailbox

import "testing"

// runRecorder is an actor that notes the mailbox's run number at each
// message.
type runRecorder struct {
	mb   *Mailbox
	runs []uint64
}

func (r *runRecorder) InvokeSystemMessage(any)  {}
func (r *runRecorder) InvokeUserMessage(any)    { r.runs = append(r.runs, r.mb.Run()) }
func (r *runRecorder) EscalateFailure(any, any) {}

// queuedDispatcher holds what is scheduled until the test runs it.
type queuedDispatcher struct {
	throughput int
	fns        []func()
}

func (d *queuedDispatcher) Schedule(f func()) { d.fns = append(d.fns, f) }
func (d *queuedDispatcher) Throughput() int   { return d.throughput }

func (d *queuedDispatcher) runAll() {
	for len(d.fns) > 0 {
		f := d.fns[0]
		d.fns = d.fns[1:]
		f()
	}
}

// Run numbers the mailbox's runs: the messages one run hands the actor
// (from being scheduled until the queue is empty or the throughput budget
// is spent) share a number, and the next run, after the actor waited for
// work or yielded, has another.
func TestRunNumbers(t *testing.T) {
	cfg := Block(100)
	cfg.Throughput = 3
	mb, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := &runRecorder{mb: mb}
	d := &queuedDispatcher{throughput: 3}
	mb.RegisterHandlers(rec, d)
	for i := range 5 { // a backlog: a run of 3 (the budget), then one of 2
		mb.PostUserMessage(i)
	}
	d.runAll()
	mb.PostUserMessage(5) // after the queue emptied: a run of its own
	d.runAll()
	r := rec.runs
	if len(r) != 6 {
		t.Fatalf("%d messages handled, want 6", len(r))
	}
	if r[0] != r[1] || r[1] != r[2] || r[3] != r[4] {
		t.Errorf("runs %v: messages of one run have different numbers", r)
	}
	if r[2] == r[3] || r[4] == r[5] || r[0] == r[5] {
		t.Errorf("runs %v: a yield or a wait for work kept the run's number", r)
	}
}

package mailbox_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/mailbox/mailboxtest"
)

func spillConfig(st *mailbox.SpillStore, queue string, capacity, commitEvery int) mailbox.Config {
	return mailbox.Spill(capacity, mailbox.SpillOptions{Store: st, Queue: queue, Codec: codec(), CommitEvery: commitEvery})
}

// queueOf returns the named queue's entry in Queues().
func queueOf(t *testing.T, st *mailbox.SpillStore, name string) mailbox.QueueInfo {
	t.Helper()
	qs, err := st.Queues()
	if err != nil {
		t.Fatalf("Queues() = %v", err)
	}
	for _, q := range qs {
		if q.Name == name {
			return q
		}
	}
	t.Fatalf("Queues() = %+v: no queue %q", qs, name)
	return mailbox.QueueInfo{}
}

// drained checks that a spill mailbox holds nothing, in memory or on disk,
// and that a mailbox opening its queue with Keep would recover nothing.
func drained(t *testing.T, r *rig, st *mailbox.SpillStore, cfg mailbox.Config) {
	t.Helper()
	s := r.mb.Stats()
	if err := checkInvariant(s); err != nil {
		t.Fatal(err)
	}
	if s.Depth != 0 || s.SpillPending != 0 || s.SpillBytes != 0 || r.mb.UserMessageCount() != 0 {
		t.Fatalf("after processing: Stats %+v, UserMessageCount %d; want Depth, SpillPending and SpillBytes 0", s, r.mb.UserMessageCount())
	}
	if q := queueOf(t, st, cfg.Spill.Queue); q.Messages != 0 || q.Bytes != 0 {
		t.Fatalf("queue on disk after processing = %+v, want empty", q)
	}
	keep := cfg
	opts := *cfg.Spill
	opts.Keep = true
	keep.Spill = &opts
	again, err := mailbox.New(keep) // never started: only reads the queue
	if err != nil {
		t.Fatal(err)
	}
	if s := again.Stats(); s.Posted != 0 || s.SpillPending != 0 {
		t.Fatalf("a mailbox reopening the queue with Keep recovers %+v, want nothing: processed messages were left on disk", s)
	}
}

// TestSpillFIFOAcrossMemoryAndDisk sends 12,000 messages (records and
// batches of up to the capacity) to a held actor with a mailbox of 4
// records, then 4,000 more while it catches up. Everything arrives in order,
// memory never holds more than 4 records, and the spill ends empty.
func TestSpillFIFOAcrossMemoryAndDisk(t *testing.T) {
	const capacity, held, running = 4, 12_000, 4_000
	rng := rand.New(rand.NewPCG(testSeed(t), 0))
	st := openStore(t)
	cfg := spillConfig(st, "fifo", capacity, 100)
	r := newRig(t, cfg, held+running)

	// The messages: records, and batches of up to the capacity.
	var msgs []any
	records := 0
	for len(msgs) < held+running {
		if rng.IntN(4) == 0 {
			b := &batch{}
			for range 1 + rng.IntN(capacity) {
				b.Seqs = append(b.Seqs, records)
				records++
			}
			msgs = append(msgs, b)
			continue
		}
		msgs = append(msgs, rec{Seq: records})
		records++
	}

	release := r.hold()
	r.put(msgs[:held]...)
	if err := r.mb.Sync(); err != nil {
		t.Fatal(err)
	}
	s := r.mb.Stats()
	q := queueOf(t, st, "fifo")
	if s.Depth > capacity || s.SpillPending != s.Posted-1-int64(s.Depth) || q.Bytes != s.SpillBytes || r.mb.UserMessageCount() != held || q.Messages < held-capacity {
		t.Fatalf("held: Stats %+v, queue %+v, UserMessageCount %d; want Depth <= %d, the rest of the %d messages on disk, SpillBytes = bytes on disk",
			s, q, r.mb.UserMessageCount(), capacity, held)
	}
	if err := checkInvariant(s); err != nil {
		t.Fatal(err)
	}

	release()
	done := make(chan struct{})
	go func() { // a producer spilling while the actor reads the spill back
		defer close(done)
		for _, m := range msgs[held:] {
			if err := r.mb.TryPut(m); err != nil {
				t.Errorf("TryPut(%s) = %v", show(m), err)
				return
			}
		}
	}()
	for next := 0; next < records; {
		var got []int
		switch m := r.next().(type) {
		case rec:
			got = []int{m.Seq}
		case *batch:
			got = m.Seqs
		default:
			t.Fatalf("unexpected message %s", show(m))
		}
		for _, g := range got {
			if g != next {
				t.Fatalf("received seq %d, want %d", g, next)
			}
			next++
		}
	}
	<-done
	r.fence()
	r.expectNothingMore()
	s = r.mb.Stats()
	if s.HighWater > capacity || s.Delivered != int64(records)+1 || s.DroppedTotal() != 0 || s.Spilled < int64(records/2) {
		t.Fatalf("Stats = %+v, want HighWater <= %d, all %d records delivered, none dropped, most spilled", s, capacity, records)
	}
	drained(t, r, st, cfg)
}

// TestSpillDeletesProcessedMessagesWhileSpilling commits a group of new
// messages in the same transaction that deletes processed ones (the actor
// is stalled on a spilled message): every processed message is deleted, so
// none is delivered again after a restart.
func TestSpillDeletesProcessedMessagesWhileSpilling(t *testing.T) {
	st := openStore(t)
	cfg := spillConfig(st, "deletes", 1, 4)
	r := newRig(t, cfg, 16)
	release := r.hold()
	stalled := r.stall(1)
	r.put(rec{Seq: 0})                                     // memory
	r.put(rec{Seq: 1}, rec{Seq: 2}, rec{Seq: 3}, stall{1}) // one group of 4, committed
	if q := queueOf(t, st, "deletes"); q.Messages != 4 {
		t.Fatalf("queue = %+v, want 4 messages committed", q)
	}
	release()
	r.expect(recs(0, 0, 1, 2, 3)...)
	waitClosed(t, stalled.entered, "actor reaching the stall")
	// 1, 2, 3 are processed, the stall is being processed. 4 goes to
	// memory, 5-8 are the next group. Messages are stored and deleted by
	// group: the first group stays until its last message, the stall, is
	// processed (a crash now would redeliver 1-3: at-least-once).
	r.put(rec{Seq: 4}, rec{Seq: 5}, rec{Seq: 6}, rec{Seq: 7}, rec{Seq: 8})
	if q := queueOf(t, st, "deletes"); q.Messages != 8 || q.Groups != 2 {
		t.Fatalf("queue after the second group = %+v, want both groups of 4", q)
	}
	stalled.open()
	r.expect(recs(0, 4, 5, 6, 7, 8)...)
	r.fence()
	drained(t, r, st, cfg)
}

// TestSpillBatchesStayWithinCapacity: records come back from the spill only
// as far as they fit in memory.
func TestSpillBatchesStayWithinCapacity(t *testing.T) {
	st := openStore(t)
	cfg := spillConfig(st, "batches", 4, 0)
	r := newRig(t, cfg, 16)
	release := r.hold()
	r.put(recs(0, 0, 1, 2, 3)...)         // memory
	r.put(rec{Seq: 4}, rec{Seq: 5})       // spilled
	r.put(&batch{Seqs: []int{6, 7, 8}})   // spilled; when 2 records are queued it does not fit
	r.put(&batch{Seqs: seqRange(10, 16)}) // larger than the capacity: comes in alone
	release()
	r.expect(append(recs(0, 0, 1, 2, 3, 4, 5), &batch{Seqs: []int{6, 7, 8}}, &batch{Seqs: seqRange(10, 16)})...)
	r.fence()
	if s := r.mb.Stats(); s.HighWater != 6 {
		t.Fatalf("HighWater = %d, want 6: the capacity of 4 except for the batch of 6 records", s.HighWater)
	}
	drained(t, r, st, cfg)

	// Without the oversized batch the capacity holds.
	r2 := newRig(t, spillConfig(st, "batches2", 4, 0), 16)
	release = r2.hold()
	r2.put(recs(0, 0, 1, 2, 3, 4, 5)...)
	r2.put(&batch{Seqs: []int{6, 7, 8}}, &batch{Seqs: []int{9, 10, 11, 12}})
	release()
	r2.expect(append(recs(0, 0, 1, 2, 3, 4, 5), &batch{Seqs: []int{6, 7, 8}}, &batch{Seqs: []int{9, 10, 11, 12}})...)
	if s := r2.mb.Stats(); s.HighWater != 4 {
		t.Fatalf("HighWater = %d, want 4", s.HighWater)
	}
}

// spillEntrySize is the size of a spilled message as SpillBytes and
// MaxBytes count it: a flags byte, the record count and the encoding.
func spillEntrySize(t *testing.T, msg any) int64 {
	t.Helper()
	data, err := codec().Encode(msg)
	if err != nil {
		t.Fatal(err)
	}
	return int64(1 + 1 + 1 + len(data)) // flags, a one-byte record count and a one-byte length
}

func TestSpillMaxBytes(t *testing.T) {
	st := openStore(t)
	size := spillEntrySize(t, rec{Seq: 10}) // seqs 10-99 encode to the same size
	cfg := spillConfig(st, "max", 2, 0)
	cfg.Spill.MaxBytes = 3 * size
	events := make(chan mailbox.Episode, 8)
	cfg.OnOverflow = func(e mailbox.Episode) { events <- e }
	r := newRig(t, cfg, 16)
	release := r.hold()
	r.put(rec{Seq: 10}, rec{Seq: 11})               // memory
	r.put(rec{Seq: 12}, rec{Seq: 13}, rec{Seq: 14}) // spilled: MaxBytes reached
	r.putDropped(rec{Seq: 15}, rec{Seq: 16})
	r.put(mark{Seq: 17}) // control: spilled beyond MaxBytes, in order
	r.putDropped(rec{Seq: 18})
	s := r.mb.Stats()
	wantStats(t, s, 1+2+3+2+1, 1, 2, map[mailbox.Reason]int64{mailbox.ReasonSpillFull: 3})
	if s.Spilled != 3 || s.SpillPending != 3 || s.SpillBytes != 3*size+spillEntrySize(t, mark{Seq: 17}) {
		t.Fatalf("Stats = %+v, want 3 records spilled, SpillBytes %d", s, 3*size+spillEntrySize(t, mark{Seq: 17}))
	}
	if err := r.mb.Sync(); err != nil {
		t.Fatal(err)
	}
	if q := queueOf(t, st, "max"); q.Messages != 4 || q.Bytes != s.SpillBytes {
		t.Fatalf("queue = %+v, want 4 messages, %d bytes", q, s.SpillBytes)
	}
	release()
	r.expect(append(recs(0, 10, 11, 12, 13, 14), mark{Seq: 17})...)
	r.fence()
	start, end := nextEpisode(t, events), nextEpisode(t, events)
	if start.Dropped[mailbox.ReasonSpillFull] != 0 || start.Spilled != 1 || end.Dropped[mailbox.ReasonSpillFull] != 3 || end.Spilled != 3 {
		t.Fatalf("episode %+v, %+v; want a start at the first spill and an end with 3 spilled, 3 dropped", start, end)
	}
	drained(t, r, st, cfg)
	r.put(rec{Seq: 19}) // room again
	r.expect(rec{Seq: 19})
}

func TestSpillUnencodableMessageIsDroppedAndReported(t *testing.T) {
	st := openStore(t)
	cfg := spillConfig(st, "unencodable", 1, 0)
	errs := make(chan error, 4)
	cfg.OnError = func(err error) { errs <- err }
	events := make(chan mailbox.Episode, 4)
	cfg.OnOverflow = func(e mailbox.Episode) { events <- e }
	r := newRig(t, cfg, 16)
	r.put("fits in memory") // not encoded while nothing is spilled
	r.expect("fits in memory")
	release := r.hold()
	r.put(rec{Seq: 0}, rec{Seq: 1}) // memory, spill
	r.putDropped("not registered")
	err := wait(t, errs, "OnError")
	if !strings.Contains(err.Error(), "string is not registered") || !strings.Contains(err.Error(), `"unencodable"`) {
		t.Fatalf("OnError(%q): want it to name the queue and the unregistered type", err)
	}
	wantStats(t, r.mb.Stats(), 5, 2, 1, map[mailbox.Reason]int64{mailbox.ReasonUnspillable: 1})
	release()
	r.expect(recs(0, 0, 1)...)
	r.fence()
	start, end := nextEpisode(t, events), nextEpisode(t, events)
	if start.Spilled != 1 || end.Spilled != 1 || end.Dropped[mailbox.ReasonUnspillable] != 1 || end.Dropped[mailbox.ReasonSpillFull] != 0 {
		t.Fatalf("episode %+v, %+v; want 1 spilled and 1 unspillable drop, nothing counted as spill-full", start, end)
	}
	drained(t, r, st, cfg)
}

// TestSpillFailedCommitIsCounted: when a group cannot be written, its
// records are counted as dropped and reported, and the counts stay exact.
func TestSpillFailedCommitIsCounted(t *testing.T) {
	st := openStore(t)
	cfg := spillConfig(st, "failed", 1, 1000)
	errs := make(chan error, 4)
	cfg.OnError = func(err error) { errs <- err }
	r := newRig(t, cfg, 16)
	release := r.hold()
	r.put(recs(0, 0, 1, 2, 3)...) // 0 in memory, 1-3 pending
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	err := r.mb.Sync()
	if err == nil || !strings.Contains(err.Error(), st.Path()) {
		t.Fatalf("Sync on a closed store = %v, want an error naming %s", err, st.Path())
	}
	wait(t, errs, "OnError")
	wantStats(t, r.mb.Stats(), 5, 1, 1, map[mailbox.Reason]int64{mailbox.ReasonUnspillable: 3})
	release()
	r.expect(rec{Seq: 0})
	r.fence()
	r.expectNothingMore()
	wantStats(t, r.mb.Stats(), 5, 2, 0, map[mailbox.Reason]int64{mailbox.ReasonUnspillable: 3})
}

// TestSpillUnreadableQueueIsGivenUp: committed messages that cannot be read
// back are counted as dropped and reported; the actor goes on with what it
// can read, and does not spin on the queue.
func TestSpillUnreadableQueueIsGivenUp(t *testing.T) {
	st := openStore(t)
	cfg := spillConfig(st, "unreadable", 1, 2)
	errs := make(chan error, 4)
	cfg.OnError = func(err error) { errs <- err }
	r := newRig(t, cfg, 16)
	release := r.hold()
	r.put(recs(0, 0, 1, 2, 3)...) // 0 in memory, 1-2 committed, 3 pending
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	release()
	r.expect(rec{Seq: 0}, rec{Seq: 3})
	r.fence()
	if err := wait(t, errs, "OnError"); !strings.Contains(err.Error(), "given up") {
		t.Fatalf("OnError(%q), want it to say the messages were given up", err)
	}
	wantStats(t, r.mb.Stats(), 5, 3, 0, map[mailbox.Reason]int64{mailbox.ReasonUnspillable: 2})
	if r.mb.UserMessageCount() != 0 {
		t.Fatalf("UserMessageCount = %d, want 0", r.mb.UserMessageCount())
	}
}

// TestSpillKeep: a mailbox opened with Keep delivers the queue it finds, in
// order; without Keep the queue starts empty.
func TestSpillKeep(t *testing.T) {
	st := openStore(t)
	cfg := spillConfig(st, "kept", 2, 0)
	cfg.Spill.Keep = true
	// A mailbox that is never started stands for an actor that crashed.
	crashed, err := mailbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := crashed.TryPut(rec{Seq: i}); err != nil {
			t.Fatal(err)
		}
	}
	crashed.TryPut(mark{Seq: 10})
	if err := crashed.Sync(); err != nil {
		t.Fatal(err)
	}

	r := newRig(t, cfg, 16) // records 0 and 1 were only in memory
	r.expect(append(recs(0, 2, 3, 4, 5, 6, 7, 8, 9), mark{Seq: 10})...)
	r.fence()
	s := r.mb.Stats()
	if s.Posted != 8 || s.Delivered != 8 {
		t.Fatalf("Stats = %+v, want the 8 recovered records posted and delivered", s)
	}
	drained(t, r, st, cfg)

	crashed, err = mailbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	crashed.TryPut(rec{Seq: 0})
	crashed.TryPut(rec{Seq: 1})
	crashed.TryPut(rec{Seq: 2})
	crashed.Sync()
	fresh := cfg
	opts := *cfg.Spill
	opts.Keep = false
	fresh.Spill = &opts
	mb, err := mailbox.New(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if s := mb.Stats(); s.Posted != 0 || s.SpillPending != 0 {
		t.Fatalf("without Keep: Stats %+v, want an empty queue", s)
	}
	if q := queueOf(t, st, "kept"); q.Messages != 0 {
		t.Fatalf("without Keep the queue on disk = %+v, want it emptied", q)
	}
}

// The crash test: TestSpillSurvivesKill runs TestSpillChild in child
// processes of this test binary.
const (
	childModeEnv  = "SLUICE_MAILBOX_SPILL_CHILD" // "write" or "recover"
	childFileEnv  = "SLUICE_MAILBOX_SPILL_FILE"
	crashMessages = 100_000
	crashCapacity = 64
)

// seqMsg is the crash test's message.
type seqMsg struct{ Seq int }

func crashConfig(st *mailbox.SpillStore) mailbox.Config {
	return mailbox.Spill(crashCapacity, mailbox.SpillOptions{
		Store: st, Queue: "crash", Keep: true,
		Codec: mailbox.NewTypeCodec().Register("seq", seqMsg{}),
	})
}

// TestSpillChild is the child process of TestSpillSurvivesKill; it skips
// itself when run directly. In "write" mode it fills a Spill mailbox of a
// held actor, syncs it, prints READY and waits to be killed. In "recover"
// mode it lets an actor with the same mailbox run, and prints what it
// received.
func TestSpillChild(t *testing.T) {
	mode, file := os.Getenv(childModeEnv), os.Getenv(childFileEnv)
	if mode == "" {
		t.Skip("the child process of TestSpillSurvivesKill")
	}
	st, err := mailbox.OpenSpillStore(file)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	switch mode {
	case "write":
		r := newRig(t, crashConfig(st), 1)
		r.hold()
		for i := range crashMessages {
			if err := r.mb.TryPut(seqMsg{Seq: i}); err != nil {
				t.Fatalf("TryPut(%d) = %v", i, err)
			}
		}
		if err := r.mb.Sync(); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("READY total=%d spilled=%d\n", crashMessages, r.mb.Stats().Spilled)
		io.Copy(io.Discard, os.Stdin) // until killed
		t.Fatal("stdin closed: the parent went away without killing this process")
	case "recover":
		r := newRig(t, crashConfig(st), crashMessages)
		recovered := r.mb.Stats().Posted // nothing else is posted
		count, first, last, consecutive := 0, -1, -1, true
		for range recovered {
			m := r.next().(seqMsg)
			if count == 0 {
				first = m.Seq
			} else if m.Seq != last+1 {
				consecutive = false
			}
			last = m.Seq
			count++
		}
		r.fence()
		r.expectNothingMore()
		q := queueOf(t, st, "crash")
		fmt.Printf("RECOVERED count=%d first=%d last=%d consecutive=%v left=%d\n", count, first, last, consecutive, q.Messages)
	default:
		t.Fatalf("unknown mode %q", mode)
	}
}

// child is a running TestSpillChild.
type child struct {
	cmd    *exec.Cmd
	out    *lineWriter
	stderr *bytes.Buffer
}

func startChild(t *testing.T, mode, file string) *child {
	t.Helper()
	c := &child{out: &lineWriter{lines: make(chan string, 64)}, stderr: new(bytes.Buffer)}
	c.cmd = exec.Command(os.Args[0], "-test.run=^TestSpillChild$", "-test.count=1", "-test.timeout=5m")
	c.cmd.Env = append(os.Environ(), childModeEnv+"="+mode, childFileEnv+"="+file)
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.stderr
	if _, err := c.cmd.StdinPipe(); err != nil { // held open: the writer waits on it
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
	})
	return c
}

// line waits for the child's output line that starts with prefix.
func (c *child) line(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case l := <-c.out.lines:
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			c.cmd.Process.Kill()
			c.cmd.Wait()
			t.Fatalf("child %v: no %q line within 2m; stdout:\n%s\nstderr:\n%s", c.cmd.Args, prefix, c.out.all(), c.stderr)
		}
	}
}

// lineWriter is a child's stdout: complete lines go to a channel.
type lineWriter struct {
	mu    sync.Mutex
	buf   []byte
	text  strings.Builder
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text.Write(p)
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		select {
		case w.lines <- string(w.buf[:i]):
		default: // nobody waits for so many lines; all() keeps them
		}
		w.buf = w.buf[i+1:]
	}
}

func (w *lineWriter) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.text.String()
}

// TestSpillSurvivesKill kills a process holding 100,000 messages in a Spill
// mailbox with SIGKILL, and checks that a new process delivers every spilled
// message exactly once, in order: exactly the tail that was spilled (the
// messages that were only in memory are lost). A third process finds
// nothing to deliver.
func TestSpillSurvivesKill(t *testing.T) {
	if os.Getenv(childModeEnv) != "" {
		t.Skip("in a child process")
	}
	file := filepath.Join(t.TempDir(), "crash.db")

	w := startChild(t, "write", file)
	var total, spilled int
	ready := w.line(t, "READY ")
	if _, err := fmt.Sscanf(ready, "READY total=%d spilled=%d", &total, &spilled); err != nil {
		t.Fatalf("child said %q: %v", ready, err)
	}
	if total != crashMessages || spilled != crashMessages-crashCapacity {
		t.Fatalf("child said %q: want %d messages, all but the %d in memory spilled", ready, crashMessages, crashCapacity)
	}
	if err := w.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("writer ended with %v, want killed", err)
	}

	recoverOnce := func() (count, first, last, left int, consecutive bool) {
		t.Helper()
		c := startChild(t, "recover", file)
		l := c.line(t, "RECOVERED ")
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("recovering child: %v; stdout:\n%s\nstderr:\n%s", err, c.out.all(), c.stderr)
		}
		if _, err := fmt.Sscanf(l, "RECOVERED count=%d first=%d last=%d consecutive=%t left=%d", &count, &first, &last, &consecutive, &left); err != nil {
			t.Fatalf("child said %q: %v", l, err)
		}
		return
	}
	count, first, last, left, consecutive := recoverOnce()
	if count != spilled || first != total-spilled || last != total-1 || !consecutive || left != 0 {
		t.Fatalf("recovered %d messages %d..%d (consecutive %v, %d left on disk); want the %d spilled, %d..%d in order, none left",
			count, first, last, consecutive, left, spilled, total-spilled, total-1)
	}
	if count, _, _, left, _ = recoverOnce(); count != 0 || left != 0 {
		t.Fatalf("a second restart delivered %d messages (%d left on disk), want none", count, left)
	}
}

// badFiles writes store files that must be refused, in dir, and returns
// their paths with the error each must wrap (nil: only the path is named).
func badFiles(t *testing.T, dir string) map[string]error {
	t.Helper()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 64<<10)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}

	// A sluice store big enough to span many pages.
	full := filepath.Join(dir, "full.db")
	st, err := mailbox.OpenSpillStore(full)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := mailbox.New(mailbox.Spill(1, mailbox.SpillOptions{Store: st, Queue: "q", Codec: codec(), Keep: true}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20_000 {
		mb.TryPut(rec{Seq: i})
	}
	if err := mb.Sync(); err != nil {
		t.Fatal(err)
	}
	st.Close()
	data, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	used := usedSize(t, full) // the file may extend beyond its used pages

	foreign := filepath.Join(dir, "foreign.db")
	newer := filepath.Join(dir, "newer.db")
	for _, p := range []string{foreign, newer} {
		db, err := bolt.Open(p, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx *bolt.Tx) error {
			if p == foreign {
				b, err := tx.CreateBucket([]byte("orders"))
				if err != nil {
					return err
				}
				return b.Put([]byte("1"), []byte("an order"))
			}
			b, err := tx.CreateBucket([]byte("sluice"))
			if err != nil {
				return err
			}
			if err := b.Put([]byte("format"), []byte("sluice-store")); err != nil {
				return err
			}
			return b.Put([]byte("version"), []byte{store.Version + 1})
		})
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	notDir := write("plain-file", []byte("not a directory"))

	return map[string]error{
		write("random.db", random):                     mailbox.ErrCorruptFile,
		write("short.db", random[:100]):                mailbox.ErrCorruptFile,
		write("truncated-half.db", data[:len(data)/2]): mailbox.ErrCorruptFile,
		write("truncated-page.db", data[:4096]):        mailbox.ErrCorruptFile,
		write("truncated-meta.db", data[:3*4096]):      mailbox.ErrCorruptFile,
		write("truncated-used.db", data[:used-4096]):   mailbox.ErrCorruptFile,
		foreign:                               mailbox.ErrForeignFile,
		newer:                                 mailbox.ErrNewerFile,
		filepath.Join(notDir, "sub.db"):       nil,
		filepath.Join(dir, "missing", "x.db"): nil,
	}
}

// usedSize is the size of the pages a bbolt file uses, by its metadata.
func usedSize(t *testing.T, path string) int {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var size int64
	db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil })
	return int(size)
}

func fileDigest(t *testing.T, path string) string {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrInvalid) || (err != nil && strings.Contains(err.Error(), "not a directory")) {
		return "absent"
	}
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(data))
}

// TestOpenSpillStoreRefusesBadFiles: a damaged, foreign or newer file, or an
// impossible path, is refused with an error that names it, and no byte of
// the file changes.
func TestOpenSpillStoreRefusesBadFiles(t *testing.T) {
	for path, want := range badFiles(t, t.TempDir()) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			before := fileDigest(t, path)
			st, err := mailbox.OpenSpillStore(path)
			if err == nil {
				st.Close()
				t.Fatalf("OpenSpillStore(%s) succeeded, want an error", path)
			}
			if !strings.HasPrefix(err.Error(), "mailbox: spill: store "+path) {
				t.Errorf("error %q does not start with %q", err, "mailbox: spill: store "+path)
			}
			if want != nil && !errors.Is(err, want) {
				t.Errorf("error %q does not wrap %q", err, want)
			}
			if want == nil {
				for _, e := range []error{mailbox.ErrCorruptFile, mailbox.ErrForeignFile, mailbox.ErrNewerFile, mailbox.ErrLockedFile} {
					if errors.Is(err, e) {
						t.Errorf("error %q wraps %q, want an error of the path only", err, e)
					}
				}
			}
			if after := fileDigest(t, path); after != before {
				t.Errorf("the file changed: sha256 %s, was %s", after, before)
			}
		})
	}
}

func FuzzTypeCodecDecode(f *testing.F) {
	c := codec().Register("str", "")
	for _, m := range []any{rec{P: 1, Seq: 2}, &batch{P: 3, Seqs: []int{4, 5, 6}}, &batch{}, mark{P: -1, Seq: 1 << 40}, stall{ID: 9}, "text"} {
		data, err := c.Encode(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		f.Add(data[:len(data)-1])
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{5, 'b', 'a', 't', 'c', 'h', 0x82, 0xa1, 'P', 0x01, 0xa4, 'S', 'e', 'q', 's', 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := c.Decode(data)
		if err != nil {
			return
		}
		enc, err := c.Encode(v) // only registered types come out
		if err != nil {
			t.Fatalf("Decode(%x) = %#v, which does not encode: %v", data, v, err)
		}
		v2, err := c.Decode(enc)
		if err != nil {
			t.Fatalf("Decode(Encode(%#v)) = %v", v, err)
		}
		if enc2, err := c.Encode(v2); err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("%#v encodes to %x, decodes to %#v, which encodes to %x, %v", v, enc, v2, enc2, err)
		}
	})
}

// TestSpillWriteFailureIsCountedAndKeepsControl: when the disk fails under a
// spill (here: full), the group's records are counted as dropped
// (ReasonUnspillable) and the error, naming the queue and the store file,
// goes to OnError; the group's control message is not lost but delivered in
// its place; and once the disk is back the spill goes on.
func TestSpillWriteFailureIsCountedAndKeepsControl(t *testing.T) {
	st := openStore(t)
	faults := mailboxtest.NewFaultySpill()
	cfg := spillConfig(st, "enospc", 1, 1000)
	cfg.Spill.WrapIO = faults.Wrap
	errs := make(chan error, 4)
	cfg.OnError = func(err error) { errs <- err }
	r := newRig(t, cfg, 16)
	release := r.hold()
	r.put(rec{Seq: 0}, rec{Seq: 1}, mark{Seq: 100}, rec{Seq: 2}) // 0 in memory; 1, the mark and 2 pending in the spill
	faults.FailCommits(syscall.ENOSPC)
	err := r.mb.Sync()
	if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, mailboxtest.ErrInjected) ||
		!strings.Contains(err.Error(), st.Path()) || !strings.Contains(err.Error(), `"enospc"`) {
		t.Fatalf("Sync on a full disk = %v, want ENOSPC naming the queue and %s", err, st.Path())
	}
	if got := wait(t, errs, "OnError"); got.Error() != err.Error() {
		t.Fatalf("OnError(%v), want the commit's error %v", got, err)
	}
	wantStats(t, r.mb.Stats(), 4, 1, 1, map[mailbox.Reason]int64{mailbox.ReasonUnspillable: 2})

	faults.Heal()
	r.put(rec{Seq: 3}) // spilled after the mark, in order
	if err := r.mb.Sync(); err != nil {
		t.Fatalf("Sync after the disk healed = %v", err)
	}
	release()
	r.expect(rec{Seq: 0}, mark{Seq: 100}, rec{Seq: 3})
	r.fence()
	r.expectNothingMore()
	wantStats(t, r.mb.Stats(), 5, 3, 0, map[mailbox.Reason]int64{mailbox.ReasonUnspillable: 2})
	if c := faults.Counts(); c.FailedCommits != 1 || c.Commits < 2 {
		t.Fatalf("faults saw %+v, want one failed commit and a good one after it", c)
	}
	drained(t, r, st, cfg)
}

// TestSpillCorruptReadNamesTheStoreFile: a group that comes back damaged is
// an error naming the queue, the store file and the message, matching
// ErrSpillCorrupt; what cannot be read is counted as dropped and the actor
// goes on.
func TestSpillCorruptReadNamesTheStoreFile(t *testing.T) {
	st := openStore(t)
	faults := mailboxtest.NewFaultySpill()
	cfg := spillConfig(st, "damaged", 1, 2)
	cfg.Spill.WrapIO = faults.Wrap
	errs := make(chan error, 4)
	cfg.OnError = func(err error) { errs <- err }
	r := newRig(t, cfg, 16)
	release := r.hold()
	r.put(recs(0, 0, 1, 2, 3, 4)...) // 0 in memory; groups 1-2 and 3-4 committed
	faults.CorruptNextLoad()
	release()
	r.expect(rec{Seq: 0})
	err := wait(t, errs, "OnError")
	if !errors.Is(err, mailbox.ErrSpillCorrupt) || !strings.Contains(err.Error(), st.Path()) ||
		!strings.Contains(err.Error(), `"damaged"`) || !strings.Contains(err.Error(), "seq 1") {
		t.Fatalf("OnError(%v), want ErrSpillCorrupt naming the queue, %s and seq 1", err, st.Path())
	}
	r.fence()
	r.expectNothingMore()
	// Once a group does not parse, the queue's messages after it are given
	// up too (counted) rather than read out of order.
	wantStats(t, r.mb.Stats(), 6, 2, 0, map[mailbox.Reason]int64{mailbox.ReasonUnspillable: 4})
	if c := faults.Counts(); c.Corrupted != 1 {
		t.Fatalf("faults saw %+v, want one damaged load", c)
	}
}

// TestSpillRangePinnedUntilReleased: QueuedAndSpillRange commits the
// pending group and names the range of the spill that holds what is
// spilled; ReadRange reads it back; once processed, the range stays in the
// store until PinSpill lets it go, and is deleted then.
func TestSpillRangePinnedUntilReleased(t *testing.T) {
	st := openStore(t)
	cfg := spillConfig(st, "pinned", 1, 4)
	r := newRig(t, cfg, 16)
	release := r.hold()
	r.put(rec{Seq: 0})                                                                  // memory
	r.put(rec{Seq: 1}, rec{Seq: 2}, rec{Seq: 3}, rec{Seq: 4}, rec{Seq: 5}, rec{Seq: 6}) // a group of 4 committed, 2 pending
	queued, spilled, rg, err := r.mb.QueuedAndSpillRange()
	if err != nil {
		t.Fatal(err)
	}
	if len(spilled) != 6 || rg.Empty() || rg.To-rg.From != 5 {
		t.Fatalf("QueuedAndSpillRange: %d queued, %d spilled, range %+v; want 6 spilled in a range of 6", len(queued), len(spilled), rg)
	}
	if q := queueOf(t, st, "pinned"); q.Messages != 6 {
		t.Fatalf("queue = %+v, want the 6 spilled messages committed", q)
	}
	read := func() []any {
		t.Helper()
		data, err := st.ReadRange(rg)
		if err != nil {
			t.Fatalf("ReadRange(%+v): %v", rg, err)
		}
		var out []any
		for _, d := range data {
			m, err := codec().Decode(d)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
		return out
	}
	if got, want := read(), recs(0, 1, 2, 3, 4, 5, 6); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ReadRange = %v, want %v", got, want)
	}
	release()
	r.expect(recs(0, 0, 1, 2, 3, 4, 5, 6)...)
	r.fence()
	if q := queueOf(t, st, "pinned"); q.Messages != 6 {
		t.Fatalf("queue after processing = %+v: the pinned range must stay", q)
	}
	if got := read(); len(got) != 6 {
		t.Fatalf("ReadRange after processing = %v, want the 6 records", got)
	}
	r.mb.PinSpill(0)
	if q := queueOf(t, st, "pinned"); q.Messages != 0 {
		t.Fatalf("queue after PinSpill(0) = %+v, want the processed range deleted", q)
	}
	if _, err := st.ReadRange(rg); !errors.Is(err, mailbox.ErrSpillCorrupt) {
		t.Fatalf("ReadRange of a deleted range = %v, want ErrSpillCorrupt", err)
	}
	drained(t, r, st, cfg)
}

// TestSpillEachInRange: EachInRange gives a range's control messages in
// their place among the data messages (ReadRange leaves them out), and
// stops at fn's error, returned as it is.
func TestSpillEachInRange(t *testing.T) {
	st := openStore(t)
	cfg := spillConfig(st, "each", 1, 4)
	r := newRig(t, cfg, 16)
	release := r.hold()
	r.put(rec{Seq: 0}) // memory
	r.put(rec{Seq: 1}, rec{Seq: 2})
	r.put(mark{Seq: 3}) // control, spilled in order
	r.put(rec{Seq: 4}, rec{Seq: 5})
	_, spilled, rg, err := r.mb.QueuedAndSpillRange()
	if err != nil {
		t.Fatal(err)
	}
	if len(spilled) != 5 || rg.To-rg.From != 4 {
		t.Fatalf("%d spilled in range %+v, want 5 in a range of 5", len(spilled), rg)
	}
	var got []string
	if err := st.EachInRange(rg, func(data []byte, ctl bool) error {
		m, err := codec().Decode(data)
		if err != nil {
			return err
		}
		got = append(got, fmt.Sprintf("%v:%v", m, ctl))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint([]string{
		fmt.Sprintf("%v:false", rec{Seq: 1}), fmt.Sprintf("%v:false", rec{Seq: 2}), fmt.Sprintf("%v:true", mark{Seq: 3}),
		fmt.Sprintf("%v:false", rec{Seq: 4}), fmt.Sprintf("%v:false", rec{Seq: 5}),
	}); fmt.Sprint(got) != want {
		t.Fatalf("EachInRange gave %v, want %v", got, want)
	}
	if data, err := st.ReadRange(rg); err != nil || len(data) != 4 {
		t.Fatalf("ReadRange = %d messages, %v; want the 4 data messages", len(data), err)
	}
	stop := errors.New("stop")
	n := 0
	if err := st.EachInRange(rg, func([]byte, bool) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("EachInRange with a failing fn = %v after %d calls, want its error after 1", err, n)
	}
	release()
	r.expect(append(append(recs(0, 0, 1, 2), mark{Seq: 3}), recs(0, 4, 5)...)...)
	r.fence()
	r.mb.PinSpill(0)
	drained(t, r, st, cfg)
}

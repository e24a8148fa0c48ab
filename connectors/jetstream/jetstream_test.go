package jetstream_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/connectors/internal/servicetest"
	"github.com/sluicehq/sluice/connectors/jetstream"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/supervision"
)

// fixture is a fresh stream that captures SUBJECT.> and is deleted when the
// test ends.
type fixture struct {
	url     string
	nc      *nats.Conn
	js      natsjs.JetStream
	stream  string
	subject string // the stream's prefix: messages go to subject + ".x"
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	url := servicetest.NATS(t)
	sfx := servicetest.Suffix()
	f := &fixture{url: url, stream: "SLUICE_T_" + sfx, subject: "sluicet." + sfx}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	f.nc = nc
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	f.js = js
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: f.stream, Subjects: []string{f.subject + ".>"},
		Storage: natsjs.MemoryStorage, Duplicates: time.Minute}); err != nil {
		t.Fatalf("create stream %s: %v", f.stream, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, f.stream); err != nil {
			t.Errorf("delete stream %s: %v", f.stream, err)
		}
		nc.Close()
	})
	return f
}

// publish publishes the integers from..to-1 as JSON to subject.
func (f *fixture) publish(t *testing.T, subject string, from, to int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := from; i < to; i++ {
		if _, err := f.js.PublishAsync(subject, []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-f.js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("publish: no acknowledgement in 30 s")
	}
}

func (f *fixture) consumer(t *testing.T, name string) *natsjs.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := f.js.Consumer(ctx, f.stream, name)
	if err != nil {
		t.Fatalf("consumer %s: %v", name, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func (f *fixture) count(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := f.js.Stream(ctx, f.stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// readAll reads r to io.EOF with a buffer of n.
func readAll(t *testing.T, r operators.Reader[int], n int) []int {
	t.Helper()
	var got []int
	buf := make([]int, n)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		k, err := r.Read(buf)
		got = append(got, buf[:k]...)
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = r.(operators.Waiter).Wait(ctx)
			cancel()
		}
	}
	t.Fatalf("no end of the partition after 20 s (%d records)", len(got))
	return nil
}

// TestSourceResumesAtOffset: a partition reopened at the offset a reader
// reported continues with exactly the next message.
func TestSourceResumesAtOffset(t *testing.T) {
	f := newFixture(t)
	f.publish(t, f.subject+".x", 0, 100)
	src := jetstream.NewSource(jetstream.SourceConfig[int]{URL: f.url, Stream: f.stream, Bounded: true, Consumer: "resume"})
	ctx := context.Background()

	r, err := src.Open(ctx, 0, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if off := r.Offset(); off != 0 {
		t.Errorf("offset before the first read = %d, want 0", off)
	}
	buf := make([]int, 30)
	n, err := r.Read(buf)
	if err != nil || n != 30 {
		t.Fatalf("Read = %d, %v; want 30 records", n, err)
	}
	off := r.Offset()
	if off != 31 {
		t.Errorf("offset after 30 messages = %d, want 31 (the next stream sequence)", off)
	}
	// Read further than the offset handed out: a crash loses these.
	if _, err := r.Read(buf[:5]); err != nil {
		t.Fatal(err)
	}
	r.Close()

	r, err = src.Open(ctx, 0, 1, off)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := readAll(t, r, 16)
	if len(got) != 70 || got[0] != 30 || got[69] != 99 {
		t.Fatalf("after reopening at %d: %d records from %v to %v, want 70 from 30 to 99", off, len(got), first(got), last(got))
	}
	for i, v := range got {
		if v != 30+i {
			t.Fatalf("record %d = %d, want %d", i, v, 30+i)
		}
	}
	if r.Offset() != 101 {
		t.Errorf("offset at the end = %d, want 101", r.Offset())
	}
}

func first(xs []int) any {
	if len(xs) == 0 {
		return "none"
	}
	return xs[0]
}

func last(xs []int) any {
	if len(xs) == 0 {
		return "none"
	}
	return xs[len(xs)-1]
}

// TestSourceReadsNoMoreThanBuf: a Read asks the server for no more messages
// than its buffer holds (the consumer has delivered exactly what was read).
func TestSourceReadsNoMoreThanBuf(t *testing.T) {
	f := newFixture(t)
	f.publish(t, f.subject+".x", 0, 100)
	src := jetstream.NewSource(jetstream.SourceConfig[int]{URL: f.url, Stream: f.stream, Consumer: "window"})
	r, err := src.Open(context.Background(), 0, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]int, 7)
	n, err := r.Read(buf)
	if err != nil || n != 7 {
		t.Fatalf("Read = %d, %v; want 7", n, err)
	}
	info := f.consumer(t, "window")
	if info.Delivered.Stream != 7 || info.NumAckPending != 7 || info.NumPending != 93 {
		t.Fatalf("after reading 7: delivered up to %d, %d unacknowledged, %d pending; want 7, 7, 93",
			info.Delivered.Stream, info.NumAckPending, info.NumPending)
	}
}

// TestSourceAcksOnlyCoveredOffsets: the reader acknowledges nothing by
// itself; Ack(offset) acknowledges exactly the messages before offset.
func TestSourceAcksOnlyCoveredOffsets(t *testing.T) {
	f := newFixture(t)
	f.publish(t, f.subject+".x", 0, 40)
	src := jetstream.NewSource(jetstream.SourceConfig[int]{URL: f.url, Stream: f.stream, Consumer: "acks"})
	ctx := context.Background()
	r, err := src.Open(ctx, 0, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]int, 10)
	if n, err := r.Read(buf); n != 10 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	o1 := r.Offset() // a barrier here
	if n, err := r.Read(buf); n != 10 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	o2 := r.Offset() // the next barrier
	if info := f.consumer(t, "acks"); info.AckFloor.Stream != 0 || info.NumAckPending != 20 {
		t.Fatalf("before any checkpoint completed: ack floor %d, %d unacknowledged; want 0 and 20", info.AckFloor.Stream, info.NumAckPending)
	}
	if err := r.(operators.Acker).Ack(ctx, o1); err != nil {
		t.Fatal(err)
	}
	if info := f.consumer(t, "acks"); info.AckFloor.Stream != 10 || info.NumAckPending != 10 {
		t.Fatalf("after the checkpoint at offset %d completed: ack floor %d, %d unacknowledged; want 10 and 10", o1, info.AckFloor.Stream, info.NumAckPending)
	}
	if err := r.(operators.Acker).Ack(ctx, o2); err != nil {
		t.Fatal(err)
	}
	if info := f.consumer(t, "acks"); info.AckFloor.Stream != 20 || info.NumAckPending != 0 {
		t.Fatalf("after offset %d: ack floor %d, %d unacknowledged; want 20 and 0", o2, info.AckFloor.Stream, info.NumAckPending)
	}
	if st := src.Stats(); st.Acks != 2 || st.AckErrors != 0 || st.Read != 20 {
		t.Errorf("stats %+v: want 2 acks, 20 read", st)
	}
}

// failingStore is a checkpoint store whose Complete always fails: no
// checkpoint ever completes.
type failingStore struct{ persistence.CheckpointStore }

func (failingStore) Complete(context.Context, string, persistence.Checkpoint) error {
	return errors.New("store refuses")
}

// TestSourceAcksAfterCheckpointCompletion runs a checkpointed job over a
// stream twice: when no checkpoint can complete (the store fails), nothing
// is acknowledged even after every message was processed; when they
// complete, the ack floor follows them.
func TestSourceAcksAfterCheckpointCompletion(t *testing.T) {
	f := newFixture(t)
	const n = 3000
	f.publish(t, f.subject+".x", 0, n)
	for _, tc := range []struct {
		name  string
		store persistence.CheckpointStore
	}{
		{"failing-store", failingStore{persistence.NewMemoryCheckpointStore()}},
		{"working-store", persistence.NewMemoryCheckpointStore()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			consumer := "cp-" + tc.name
			src := jetstream.NewSource(jetstream.SourceConfig[int]{URL: f.url, Stream: f.stream, Consumer: consumer})
			top := operators.NewTopology("acks-"+tc.name, operators.Checkpoints(20*time.Millisecond), operators.CheckpointStore(tc.store), operators.BatchSize(64))
			in := operators.Source(top, "in", src)
			var mu sync.Mutex
			seen := 0
			done := make(chan struct{})
			operators.Sink(in, "count", operators.SinkFunc(func(int) error {
				mu.Lock()
				defer mu.Unlock()
				if seen++; seen == n {
					close(done)
				}
				return nil
			}))
			sys, err := actors.NewSystem(actors.Config{Name: "acks"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			defer sys.Stop(ctx)
			run, err := sys.Run(ctx, top)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-ctx.Done():
				t.Fatal("the job did not read the stream in 30 s")
			}
			// Wait (bounded) for checkpoints to complete after the last record.
			var info *natsjs.ConsumerInfo
			poll := time.NewTicker(20 * time.Millisecond)
			defer poll.Stop()
			for range 50 {
				<-poll.C
				info = f.consumer(t, consumer)
				if info.AckFloor.Stream == n || tc.name == "failing-store" && operators.CheckpointStatsOf(run).Failed >= 3 {
					break
				}
			}
			st := operators.CheckpointStatsOf(run)
			err = run.Drain(ctx)
			if tc.name == "failing-store" {
				// Neither can the final checkpoint: the drain says so.
				if err == nil || !strings.Contains(err.Error(), "final checkpoint") || !strings.Contains(err.Error(), "store refuses") {
					t.Fatalf("Drain() = %v, want the final checkpoint's failure", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if tc.name == "failing-store" {
				if st.Completed != 0 || st.Failed < 3 {
					t.Fatalf("checkpoints: %d completed, %d failed; want none completed, several failed", st.Completed, st.Failed)
				}
				if info.AckFloor.Stream != 0 || info.NumAckPending != n {
					t.Fatalf("no checkpoint completed, yet the ack floor is %d (%d unacknowledged of %d)", info.AckFloor.Stream, info.NumAckPending, n)
				}
				return
			}
			if info.AckFloor.Stream != n || info.NumAckPending != 0 {
				t.Fatalf("after %d completed checkpoints: ack floor %d, %d unacknowledged; want %d and 0", st.Completed, info.AckFloor.Stream, info.NumAckPending, n)
			}
			t.Logf("%d checkpoints completed, %d acknowledgements", st.Completed, src.Stats().Acks)
		})
	}
}

// TestSourceWaitsWithoutSpinning: on an idle stream Read returns nothing
// and Wait blocks until a message is published (or the reader closes).
func TestSourceWaitsWithoutSpinning(t *testing.T) {
	f := newFixture(t)
	src := jetstream.NewSource(jetstream.SourceConfig[int]{URL: f.url, Stream: f.stream, PollWait: 200 * time.Millisecond})
	r, err := src.Open(context.Background(), 0, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]int, 8)
	if n, err := r.Read(buf); n != 0 || err != nil {
		t.Fatalf("Read on an empty stream = %d, %v; want 0, nil", n, err)
	}
	waited := make(chan error, 1)
	go func() { waited <- r.(operators.Waiter).Wait(context.Background()) }()
	// Wait outlives its pulls: two expire with nothing, are renewed, and
	// Wait has not returned (an event to wait for, not a time window).
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for src.Stats().Expired < 2 {
		select {
		case err := <-waited:
			t.Fatalf("Wait returned %v on an idle stream after %d expired pulls", err, src.Stats().Expired)
		case <-deadline:
			t.Fatalf("no two pulls expired within 30 s (PollWait 200 ms)")
		case <-tick.C:
		}
	}
	select {
	case err := <-waited:
		t.Fatalf("Wait returned %v on an idle stream", err)
	default:
	}
	f.publish(t, f.subject+".x", 7, 8)
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after a publish")
	}
	if n, err := r.Read(buf); n != 1 || buf[0] != 7 || err != nil {
		t.Fatalf("Read after Wait = %d (%v), %v; want the record 7", n, buf[:n], err)
	}
	// Close ends a Wait in progress.
	go func() { waited <- r.(operators.Waiter).Wait(context.Background()) }()
	r.Close()
	select {
	case err := <-waited:
		if err == nil {
			t.Fatal("Wait on a closed reader returned nil")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end Wait")
	}
}

// TestSourcePartitions: with parallelism 2, each partition reads its own
// subject, and its offsets resume it.
func TestSourcePartitions(t *testing.T) {
	f := newFixture(t)
	f.publish(t, f.subject+".p0", 0, 10)
	f.publish(t, f.subject+".p1", 100, 110)
	f.publish(t, f.subject+".p0", 10, 20)
	subjects := []string{f.subject + ".p0", f.subject + ".p1"}
	src := jetstream.NewSource(jetstream.SourceConfig[int]{URL: f.url, Stream: f.stream, Subjects: subjects, Bounded: true, Consumer: "parts"})
	ctx := context.Background()
	r0, err := src.Open(ctx, 0, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]int, 15)
	if n, _ := r0.Read(buf); n != 15 || buf[14] != 14 {
		t.Fatalf("partition 0 read %v", buf[:n])
	}
	off := r0.Offset() // sequence 26: after 0..9 (1-10), 100..109 (11-20), 10..14 (21-25)
	r0.Close()
	if off != 26 {
		t.Errorf("partition 0 offset = %d, want 26", off)
	}
	r0, err = src.Open(ctx, 0, 2, off)
	if err != nil {
		t.Fatal(err)
	}
	defer r0.Close()
	if got := readAll(t, r0, 4); fmt.Sprint(got) != "[15 16 17 18 19]" {
		t.Fatalf("partition 0 resumed with %v", got)
	}
	r1, err := src.Open(ctx, 1, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	if got := readAll(t, r1, 4); len(got) != 10 || got[0] != 100 || got[9] != 109 {
		t.Fatalf("partition 1 read %v", got)
	}
	if _, err := src.Open(ctx, 0, 3, 0); err == nil || !strings.Contains(err.Error(), "one subject per partition") {
		t.Fatalf("3 partitions over 2 subjects: %v", err)
	}
}

// TestSinkDeduplicatesReplay: records published after a checkpoint and
// published again by a writer restored from it are dropped by the stream.
func TestSinkDeduplicatesReplay(t *testing.T) {
	f := newFixture(t)
	subj := f.subject + ".out"
	sink := jetstream.NewSink(jetstream.SinkConfig[int]{URL: f.url, Subject: subj, Name: "dedup-test/out"})
	ctx := context.Background()
	w, err := sink.Open(ctx, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write([]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}); err != nil {
		t.Fatal(err)
	}
	state, err := w.(operators.Checkpointer).Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	if seq := binary.BigEndian.Uint64(state); seq != 10 {
		t.Fatalf("checkpointed sequence %d, want 10", seq)
	}
	if err := w.Write([]int{10, 11, 12, 13, 14}); err != nil { // reach the stream, then "crash"
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w, err = sink.OpenAt(ctx, 0, 1, state)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write([]int{10, 11, 12, 13, 14, 15, 16, 17}); err != nil { // the replay, and new records
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := f.count(t); n != 18 {
		t.Fatalf("the stream holds %d messages, want 18", n)
	}
	if st := sink.Stats(); st.Published != 18 || st.Duplicates != 5 || st.Failures != 0 {
		t.Fatalf("stats %+v: want 18 published, 5 duplicates", st)
	}
	// The ids are NAME/PART/SEQ.
	ctx2, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, _ := f.js.Stream(ctx2, f.stream)
	m, err := s.GetMsg(ctx2, 18)
	if err != nil {
		t.Fatal(err)
	}
	if id := m.Header.Get("Nats-Msg-Id"); id != "dedup-test/out/0/17" || string(m.Data) != "17" {
		t.Fatalf("last message: id %q, data %q", id, m.Data)
	}
}

// TestUnreachable: errors name the servers, never the credentials.
func TestUnreachable(t *testing.T) {
	url := "nats://sluiceuser:s3cr3tpw@127.0.0.1:1"
	src := jetstream.NewSource(jetstream.SourceConfig[int]{URL: url, Stream: "NOPE", Options: []nats.Option{nats.Timeout(time.Second)}})
	_, err := src.Open(context.Background(), 0, 1, 0)
	if err == nil {
		t.Fatal("Open succeeded against a closed port")
	}
	if msg := err.Error(); !strings.Contains(msg, "127.0.0.1:1") || !strings.Contains(msg, `"NOPE"`) || strings.Contains(msg, "s3cr3tpw") {
		t.Fatalf("error %q: want the stream and host, without the password", msg)
	}
	sink := jetstream.NewSink(jetstream.SinkConfig[int]{URL: url, Subject: "x", Name: "n"})
	_, err = sink.Open(context.Background(), 0, 1)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || strings.Contains(err.Error(), "s3cr3tpw") {
		t.Fatalf("sink error %v: want the host, without the password", err)
	}
	if err := jetstream.NewSink(jetstream.SinkConfig[int]{}).Err(); err == nil || !strings.Contains(err.Error(), "Name") {
		t.Fatalf("a sink without a name: %v", err)
	}
}

// TestStreamToStreamExactlyOnce: a checkpointed job copies a stream's
// subject to another subject; an operator fails once midway and the job
// restarts from its last checkpoint. The records published between that
// checkpoint and the failure are published again with the same ids, and the
// stream drops them: the output holds every record once.
func TestStreamToStreamExactlyOnce(t *testing.T) {
	f := newFixture(t)
	const n = 3000
	f.publish(t, f.subject+".in", 0, n)
	var failed atomic.Bool
	top := operators.NewTopology("copy", operators.Checkpoints(20*time.Millisecond), operators.BatchSize(32), operators.Capacity(128),
		operators.CheckpointStore(persistence.NewMemoryCheckpointStore()),
		operators.RestartOnFailure(supervision.Backoff{Initial: time.Millisecond, Max: time.Millisecond}, 3, time.Minute))
	in := operators.Source(top, "in", jetstream.NewSource(jetstream.SourceConfig[int]{URL: f.url, Stream: f.stream,
		Subjects: []string{f.subject + ".in"}, Bounded: true, Consumer: "copy"}))
	through := operators.Map(in, "fail-once", func(v int) int {
		if v == 2*n/3 && !failed.Swap(true) {
			panic("injected failure")
		}
		return v
	})
	sink := jetstream.NewSink(jetstream.SinkConfig[int]{URL: f.url, Subject: f.subject + ".out", Name: "copy/out"})
	operators.Sink(through, "out", sink)
	sys, err := actors.NewSystem(actors.Config{Name: "copy"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer sys.Stop(ctx)
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	cps := operators.CheckpointStatsOf(run)
	if cps.Restarts != 1 {
		t.Fatalf("%d restarts, want 1", cps.Restarts)
	}
	s, err := f.js.Stream(ctx, f.stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, natsjs.WithSubjectFilter(f.subject+".out"))
	if err != nil {
		t.Fatal(err)
	}
	st := sink.Stats()
	// An aborted writer stops counting its in-flight publishes that the
	// server stored anyway; those come back as duplicates after the restart.
	if got := info.State.Subjects[f.subject+".out"]; got != n || st.Published > n || st.Published+st.Duplicates < n {
		t.Fatalf("the output holds %d messages (%d published, %d duplicates dropped), want %d", got, st.Published, st.Duplicates, n)
	}
	if st.Duplicates == 0 {
		t.Fatal("no duplicate was dropped: the failure came right after a checkpoint; the test shows nothing")
	}
	t.Logf("restarted from checkpoint %d after the failure: %d records published again and dropped as duplicates", cps.RestoredFrom, st.Duplicates)
}

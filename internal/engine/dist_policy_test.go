package engine

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/stage"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/mailbox"
)

// The overflow policies on an edge from another process: remoteInbox must
// make the mailbox see what it sees on a local edge.

// recorder is a mailbox's actor in these tests: it keeps what it is given.
type recorder struct{ got []any }

func (r *recorder) InvokeSystemMessage(any)  {}
func (r *recorder) InvokeUserMessage(m any)  { r.got = append(r.got, m) }
func (r *recorder) EscalateFailure(any, any) {}

// inline runs the mailbox's processing on the caller's goroutine.
type inline struct{}

func (inline) Schedule(f func()) { f() }
func (inline) Throughput() int   { return 300 }

// delivered registers r with mb (until then messages wait in the mailbox)
// and returns what the actor got, one line each.
func delivered(t *testing.T, mb actor.Mailbox) []string {
	t.Helper()
	r := &recorder{}
	mb.RegisterHandlers(r, inline{})
	mb.Start()
	var out []string
	for _, m := range r.got {
		switch m := m.(type) {
		case *actors.Envelope:
			if m.Kind == actors.Data {
				out = append(out, fmt.Sprint("data ", m.Payload.(*stage.Batch[int64]).Vs))
			} else {
				out = append(out, fmt.Sprint(m.Kind, " ", m.Channel, " ", m.Mark))
			}
		case *inboxFailure:
			out = append(out, "failure: "+m.err.Error())
		default:
			out = append(out, fmt.Sprintf("%T %v", m, m))
		}
	}
	return out
}

// stream is what a sender in another process sends on channel 0: batches
// of records, each followed by a watermark, a barrier in the middle and
// end of stream. It returns fresh envelopes on every call (policies cut
// batches in place) and the number of records.
func stream() ([]*actors.Envelope, int) {
	var out []*actors.Envelope
	n := int64(0)
	for i := range 40 {
		vs := make([]int64, 25)
		for j := range vs {
			vs[j] = n
			n++
		}
		out = append(out, &actors.Envelope{Kind: actors.Data, Count: len(vs), Payload: &stage.Batch[int64]{Vs: vs}},
			&actors.Envelope{Kind: actors.Watermark, Mark: int64(i)})
		if i == 20 {
			out = append(out, &actors.Envelope{Kind: actors.Barrier, Mark: 1})
		}
	}
	return append(out, &actors.Envelope{Kind: actors.EndOfStream}), int(n)
}

// TestRemoteEdgePolicies feeds the same stream to a mailbox directly (a
// local edge) and through a remote receiver's inbox as wire.Records (packed
// as the cluster's connection posts them, some inside a
// MessageEnvelope), with the actor stuck until everything is posted, under
// every overflow policy. The statistics and what the actor gets must be
// the same: records counted and shed one by one, every control envelope
// delivered, and no ErrLost from the policy's drops.
func TestRemoteEdgePolicies(t *testing.T) {
	const capacity = 100
	clock := time.Unix(1_000, 0)
	now := func() time.Time { return clock }
	store, err := mailbox.OpenSpillStore(filepath.Join(t.TempDir(), "spill.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	spill := func(queue string) mailbox.Config {
		return mailbox.Spill(capacity, mailbox.SpillOptions{Store: store, Queue: queue, Codec: stage.Codec[int64]{}})
	}
	cases := []struct {
		name      string
		cfg       func(which string) mailbox.Config
		dropped   mailbox.Reason
		wantDrops int64 // -1: some, not computed here
	}{
		{"drop-newest", func(string) mailbox.Config { return mailbox.DropNewest(capacity) }, mailbox.ReasonFull, 1000 - capacity},
		{"drop-oldest", func(string) mailbox.Config { return mailbox.DropOldest(capacity) }, mailbox.ReasonEvicted, 1000 - capacity},
		{"sample", func(string) mailbox.Config { return mailbox.Sample(capacity, 4) }, mailbox.ReasonSampled, -1},
		{"throttle", func(string) mailbox.Config {
			c := mailbox.Throttle(capacity, 10)
			c.Now = now
			return c
		}, mailbox.ReasonThrottled, -1},
		{"spill", spill, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			local, err := mailbox.New(tc.cfg("local-" + tc.name))
			if err != nil {
				t.Fatal(err)
			}
			envs, total := stream()
			for _, env := range envs {
				local.PostUserMessage(env)
			}

			in := remoteReceiver(t)
			mb, err := mailbox.New(tc.cfg("remote-" + tc.name))
			if err != nil {
				t.Fatal(err)
			}
			inbox := newRemoteInbox(mb, in)
			envs, _ = stream()
			for i, env := range envs {
				data, err := stage.Codec[int64]{}.Encode(env)
				if err != nil {
					t.Fatal(err)
				}
				var msg any = packed{&wire.Records{Seq: uint64(i + 1), Data: data}}
				if i%3 == 0 {
					msg = &actor.MessageEnvelope{Header: map[string]string{"k": "v"}, Message: msg}
				}
				inbox.PostUserMessage(msg)
			}

			ls, rs := local.Stats(), mb.Stats()
			if rs.Posted != int64(total) {
				t.Errorf("the remote edge's mailbox counted %d records posted, want %d (records, not messages)", rs.Posted, total)
			}
			if rs.Dropped != ls.Dropped || rs.Depth != ls.Depth || rs.Spilled != ls.Spilled || rs.SpillPending != ls.SpillPending {
				t.Errorf("remote edge stats %+v\nlocal edge stats %+v", rs, ls)
			}
			if tc.wantDrops >= 0 && rs.DroppedTotal() != tc.wantDrops {
				t.Errorf("dropped %d records, want exactly %d", rs.DroppedTotal(), tc.wantDrops)
			}
			if tc.wantDrops < 0 && (rs.Dropped[tc.dropped] == 0 || rs.Dropped[tc.dropped] == int64(total)) {
				t.Errorf("dropped %v by %v: want some records shed, not all", rs.Dropped, tc.dropped)
			}

			want, got := delivered(t, local), delivered(t, inbox)
			if !slices.Equal(got, want) {
				t.Fatalf("the actor got from the remote edge\n%s\nfrom the local edge\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			controls := 0
			for _, line := range got {
				if strings.HasPrefix(line, "failure") {
					t.Fatalf("the policy's drops failed the receiver: %s", line)
				}
				if !strings.HasPrefix(line, "data") {
					controls++
				}
			}
			if controls != 42 { // 40 watermarks, a barrier, end of stream
				t.Fatalf("%d control envelopes delivered, want all 42", controls)
			}
			if st := mb.Stats(); st.Delivered+st.DroppedTotal() != int64(total) {
				t.Fatalf("delivered %d + dropped %d != posted %d", st.Delivered, st.DroppedTotal(), total)
			}
		})
	}
}

// TestRemoteRecordsGapFails: records from another process are decoded with
// the receiving task's codec and checked in sequence as they are posted; a
// missing message fails the receiver with ErrLost instead of being
// skipped, and what comes after it on the instance is ignored.
func TestRemoteRecordsGapFails(t *testing.T) {
	in := remoteReceiver(t)
	mb, err := mailbox.New(mailbox.DropNewest(1000))
	if err != nil {
		t.Fatal(err)
	}
	inbox := newRemoteInbox(mb, in)
	inbox.PostUserMessage(packed{records(t, in, 1, 1, 2, 3)})
	inbox.PostUserMessage(records(t, in, 2, 4)) // not packed: as a local send
	inbox.PostUserMessage(packed{nil})          // does not decode: dropped
	inbox.PostUserMessage(packed{records(t, in, 4, 5)})
	inbox.PostUserMessage(packed{records(t, in, 5, 6)})
	r := &recorder{}
	inbox.RegisterHandlers(r, inline{})
	inbox.Start()
	if len(r.got) != 3 {
		t.Fatalf("delivered %v, want two batches and a failure", r.got)
	}
	for i, want := range [][]int64{{1, 2, 3}, {4}} {
		env, ok := r.got[i].(*actors.Envelope)
		if !ok || !slices.Equal(env.Payload.(*stage.Batch[int64]).Vs, want) {
			t.Fatalf("message %d: %v, want the records %v", i, r.got[i], want)
		}
	}
	f, ok := r.got[2].(*inboxFailure)
	if !ok || !errors.Is(f.err, ErrLost) {
		t.Fatalf("after the gap: %v, want a failure with ErrLost", r.got[2])
	}
	t.Logf("the receiver fails with: %v", f.err)
}

// TestRemoteControlNeverDropped: what else other processes send an
// instance (credits, barriers for sources, commits, drain) reaches a full
// dropping mailbox as control messages: never counted as records, never
// dropped. A dropped credit would stall its sender for good.
func TestRemoteControlNeverDropped(t *testing.T) {
	in := remoteReceiver(t)
	mb, err := mailbox.New(mailbox.DropNewest(3))
	if err != nil {
		t.Fatal(err)
	}
	inbox := newRemoteInbox(mb, in)
	inbox.PostUserMessage(packed{records(t, in, 1, 1, 2, 3)}) // full
	controls := []any{&wire.Credit{Out: 0, Total: 64}, &wire.Barrier{ID: 1}, &wire.Committed{ID: 1}, &wire.Drain{}}
	for _, m := range controls {
		inbox.PostUserMessage(&actor.MessageEnvelope{Message: packed{m}})
	}
	inbox.PostUserMessage(packed{records(t, in, 2, 4)}) // dropped
	if st := mb.Stats(); st.Posted != 4 || st.DroppedTotal() != 1 {
		t.Fatalf("posted %d records, dropped %d: want 4 and 1 (control messages are not records)", st.Posted, st.DroppedTotal())
	}
	r := &recorder{}
	inbox.RegisterHandlers(r, inline{})
	inbox.Start()
	if len(r.got) != 1+len(controls) {
		t.Fatalf("delivered %v, want the batch and every control message", r.got)
	}
	// Credits, the job's barriers and commits are urgent (mailbox.Urgent):
	// they overtake the batch; the drain keeps its place after it.
	at := func(m any) int {
		for i, g := range r.got {
			if env, ok := g.(*actor.MessageEnvelope); ok && env.Message == m {
				return i
			}
		}
		t.Fatalf("delivered %v, want %T %v unpacked in its envelope", r.got, m, m)
		return -1
	}
	if at(controls[0]) != 0 || at(controls[1]) != 1 || at(controls[2]) != 2 || at(controls[3]) != 4 {
		t.Fatalf("delivered %v: want the credit, the barrier and the commit first, then the batch and the drain", r.got)
	}
}

package persistence_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/supervision"
)

const wait = 10 * time.Second

// accountBehavior is the account of the example, counting Apply calls.
func accountBehavior(id string, j persistence.Journal, s persistence.SnapshotStore, applied *atomic.Int64) persistence.Behavior[Account, any, AccountEvent] {
	return persistence.Behavior[Account, any, AccountEvent]{
		ID:        id,
		Journal:   j,
		Snapshots: s,
		Events:    accountEvents(),
		Handle:    handleAccount,
		Apply: func(s Account, e AccountEvent) Account {
			if applied != nil {
				applied.Add(1)
			}
			return e.apply(s)
		},
	}
}

// boltSystem starts a System on the store file at path, with a journal and
// a snapshot store in it; the returned stop stops the system and the
// journal.
func boltSystem(t *testing.T, path string) (*actors.System, *persistence.BoltJournal, *persistence.BoltSnapshotStore, func()) {
	t.Helper()
	sys, err := actors.NewSystem(actors.Config{Name: "test", Store: path})
	if err != nil {
		t.Fatal(err)
	}
	db, err := sys.DB()
	if err != nil {
		t.Fatal(err)
	}
	j, err := persistence.NewBoltJournal(db)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := persistence.NewBoltSnapshotStore(db)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		// The actors are idle: close the journal first, so that it
		// compacts its log into the file before the system closes it.
		if err := j.Close(); err != nil {
			t.Errorf("journal Close: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := sys.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}
	t.Cleanup(stop)
	return sys, j, snaps, stop
}

func spawn(t *testing.T, sys *actors.System, name string, b persistence.Behavior[Account, any, AccountEvent]) *actors.Ref {
	t.Helper()
	p, err := persistence.EventSourced(b)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := sys.Spawn(name, p)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func request(t *testing.T, ref *actors.Ref, msg any) any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	reply, err := ref.Request(ctx, msg)
	if err != nil {
		t.Fatalf("request %T%v: %v", msg, msg, err)
	}
	return reply
}

// requestErr sends msg and returns the request's error (a rejected
// command's, say); the test fails when the request succeeds.
func requestErr(t *testing.T, ref *actors.Ref, msg any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	reply, err := ref.Request(ctx, msg)
	if err == nil {
		t.Fatalf("request %T%v replied %v, want an error", msg, msg, reply)
	}
	return err
}

func state(t *testing.T, ref *actors.Ref) Account {
	t.Helper()
	s, ok := request(t, ref, persistence.GetState{}).(Account)
	if !ok {
		t.Fatalf("GetState replied %T", s)
	}
	return s
}

// TestEventSourcedAccountRecovers: commands become events in a real store
// file, then state; a new System on the same file recovers the same state
// from the newest snapshot and the events after it, and goes on.
func TestEventSourcedAccountRecovers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	sys, j, snaps, stop := boltSystem(t, path)
	b := accountBehavior("acct-1", j, snaps, nil)
	b.SnapshotEvery = 4
	ref := spawn(t, sys, "acct-1", b)
	var want Account
	for i := int64(1); i <= 10; i++ {
		reply := request(t, ref, Deposit{i})
		want = Account{want.Balance + i, want.Ops + 1}
		if reply != want {
			t.Fatalf("Deposit{%d} replied %v, want %v", i, reply, want)
		}
	}
	if err := requestErr(t, ref, Withdraw{1000}); !errors.Is(err, ErrInsufficientFunds) {
		t.Fatalf("Withdraw{1000} replied %v, want ErrInsufficientFunds", err)
	}
	if reply := request(t, ref, Withdraw{7}); reply != (Account{48, 11}) {
		t.Fatalf("Withdraw{7} replied %v", reply)
	}
	if s := state(t, ref); s != (Account{48, 11}) {
		t.Fatalf("state %+v, want {48 11}", s)
	}
	stop()

	// A new System on the same file.
	sys, j, snaps, _ = boltSystem(t, path)
	db, _ := sys.DB()
	inv, err := persistence.Inspect(db)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Snapshots) != 1 || inv.Snapshots[0].ID != "acct-1" || inv.Snapshots[0].Seq != 8 {
		t.Fatalf("snapshots %+v, want one of acct-1 at seq 8 (every 4 events, the newest kept)", inv.Snapshots)
	}
	if len(inv.Journals) != 1 || inv.Journals[0].Highest != 11 || inv.Journals[0].Events != 11 {
		t.Fatalf("journals %+v, want acct-1 with 11 events", inv.Journals)
	}
	var applied atomic.Int64
	b = accountBehavior("acct-1", j, snaps, &applied)
	b.SnapshotEvery = 4
	ref = spawn(t, sys, "acct-1", b)
	if s := state(t, ref); s != (Account{48, 11}) {
		t.Fatalf("recovered state %+v, want {48 11}", s)
	}
	if n := applied.Load(); n != 3 {
		t.Errorf("recovery applied %d events, want 3 (9..11, after the snapshot at 8)", n)
	}
	if reply := request(t, ref, Deposit{2}); reply != (Account{50, 12}) {
		t.Fatalf("Deposit{2} after recovery replied %v", reply)
	}
	state(t, ref) // the actor replies before it snapshots: wait for it
	if h, _ := j.HighestSeq(context.Background(), "acct-1"); h != 12 {
		t.Errorf("HighestSeq = %d, want 12", h)
	}
	if sn, ok, _ := snaps.Latest(context.Background(), "acct-1"); !ok || sn.Seq != 12 {
		t.Errorf("newest snapshot at %d, want 12", sn.Seq)
	}
}

// flakyJournal is a Journal whose appends fail while fail is set.
type flakyJournal struct {
	persistence.Journal
	fail atomic.Bool
}

var errDiskFull = errors.New("disk full")

func (f *flakyJournal) Append(ctx context.Context, id string, events []persistence.Event) error {
	if f.fail.Load() {
		return fmt.Errorf("journal %q: %w", id, errDiskFull)
	}
	return f.Journal.Append(ctx, id, events)
}

// TestEventSourcedFailingJournal: when the append fails the command's reply
// is the error and the state is unchanged; the next command continues the
// journal where it was.
func TestEventSourcedFailingJournal(t *testing.T) {
	sys, err := actors.NewSystem(actors.Config{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(context.Background())
	j := &flakyJournal{Journal: persistence.NewMemoryJournal()}
	var applied atomic.Int64
	ref := spawn(t, sys, "acct", accountBehavior("acct", j, nil, &applied))
	request(t, ref, Deposit{5})
	j.fail.Store(true)
	if err := requestErr(t, ref, Deposit{10}); !errors.Is(err, errDiskFull) {
		t.Fatalf("Deposit with a failing journal replied %v, want the journal's error", err)
	}
	if s := state(t, ref); s != (Account{5, 1}) {
		t.Fatalf("state %+v after a failed append, want {5 1}", s)
	}
	if n := applied.Load(); n != 1 {
		t.Errorf("Apply ran %d times, want 1: the failed command's event was applied", n)
	}
	j.fail.Store(false)
	if reply := request(t, ref, Deposit{1}); reply != (Account{6, 2}) {
		t.Fatalf("Deposit after the journal recovered replied %v, want {6 2}", reply)
	}
	var seqs []uint64
	_ = j.Replay(context.Background(), "acct", 1, math.MaxUint64, -1, func(e persistence.Event) error {
		seqs = append(seqs, e.Seq)
		return nil
	})
	if len(seqs) != 2 || seqs[1] != 2 {
		t.Errorf("journal %v, want 1 and 2", seqs)
	}
}

// TestEventSourcedRejectsWithoutPersisting: a command the handler refuses,
// and a message that is no command, persist nothing.
func TestEventSourcedRejectsWithoutPersisting(t *testing.T) {
	sys, err := actors.NewSystem(actors.Config{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(context.Background())
	j := persistence.NewMemoryJournal()
	typed := persistence.Behavior[Account, Deposit, AccountEvent]{
		ID: "typed", Journal: j, Events: accountEvents(),
		Handle: func(s Account, d Deposit) ([]AccountEvent, any, error) { return handleAccount(s, d) },
		Apply:  func(s Account, e AccountEvent) Account { return e.apply(s) },
	}
	p, err := persistence.EventSourced(typed)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := sys.Spawn("typed", p)
	if err != nil {
		t.Fatal(err)
	}
	if err := requestErr(t, ref, Deposit{-3}); err == nil || !strings.Contains(err.Error(), "must be positive") {
		t.Errorf("Deposit{-3} replied %v, want the handler's error", err)
	}
	if err := requestErr(t, ref, Withdraw{1}); err == nil || !strings.Contains(err.Error(), "not a command") {
		t.Errorf("Withdraw to a Deposit-only actor replied %v, want an error", err)
	}
	if h, _ := j.HighestSeq(context.Background(), "typed"); h != 0 {
		t.Errorf("HighestSeq = %d, want 0: a refused command persisted", h)
	}
	if reply := request(t, ref, Deposit{3}); reply != (Account{3, 1}) {
		t.Errorf("Deposit{3} replied %v", reply)
	}
}

// TestRecoveryFailureReachesSupervisor: an actor that cannot recover fails,
// and its supervisor receives a *RecoveryError naming the persistence id
// and the sequence number.
func TestRecoveryFailureReachesSupervisor(t *testing.T) {
	for _, c := range []struct {
		name    string
		damage  func(t *testing.T, path string, j *persistence.BoltJournal)
		offline bool // damage the closed file with bbolt, rather than through the journal
		seq     uint64
		decode  bool   // the reason is a decode error
		mention string // and its text says
	}{
		{"an event that does not decode", func(t *testing.T, path string, _ *persistence.BoltJournal) {
			corrupt(t, path, []byte{0x95, 0x01, 0xa1}, []byte("journal"), []byte("events"), []byte("acct-9"), seqKey(3))
		}, true, 3, true, path0},
		{"an event type that is not registered", func(t *testing.T, _ string, j *persistence.BoltJournal) {
			if err := j.Append(context.Background(), "acct-9", []persistence.Event{{Seq: 5, Type: "frozen", Data: []byte{0x80}}}); err != nil {
				t.Fatal(err)
			}
		}, false, 5, true, `"frozen" is not registered`},
		{"events deleted beyond the newest snapshot", func(t *testing.T, _ string, j *persistence.BoltJournal) {
			if err := j.DeleteTo(context.Background(), "acct-9", 2); err != nil {
				t.Fatal(err)
			}
		}, false, 1, false, "missing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "store.db")
			sys, j, _, stop := boltSystem(t, path)
			ref := spawn(t, sys, "acct-9", accountBehavior("acct-9", j, nil, nil))
			for i := int64(1); i <= 4; i++ {
				request(t, ref, Deposit{i})
			}
			if !c.offline {
				c.damage(t, path, j)
			}
			stop()
			if c.offline {
				c.damage(t, path, j)
			}

			sys, j, _, _ = boltSystem(t, path)
			p, err := persistence.EventSourced(accountBehavior("acct-9", j, nil, nil))
			if err != nil {
				t.Fatal(err)
			}
			stopAtOnce, err := supervision.NewStrategy(supervision.WithDecider(func(error) supervision.Directive { return supervision.Stop }))
			if err != nil {
				t.Fatal(err)
			}
			ref, err = sys.Spawn("acct-9", p, actors.Supervise(stopAtOnce))
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-ref.Done():
				var re *persistence.RecoveryError
				if !errors.As(ref.Err(), &re) {
					t.Fatalf("the actor ended with %v, want a *RecoveryError", ref.Err())
				}
				t.Log(ref.Err())
				mention := c.mention
				if mention == path0 {
					mention = path
				}
				if re.ID != "acct-9" || re.Seq != c.seq || errors.Is(re, persistence.ErrDecode) != c.decode ||
					!strings.Contains(re.Error(), `"acct-9"`) || !strings.Contains(re.Error(), fmt.Sprintf("seq %d", c.seq)) ||
					!strings.Contains(re.Error(), mention) {
					t.Errorf("reason %q (id %q, seq %d), want id acct-9, seq %d, decode error %v, mentioning %q", re, re.ID, re.Seq, c.seq, c.decode, mention)
				}
			case <-time.After(wait):
				t.Fatal("the actor did not end after its failed recovery")
			}
		})
	}
}

// path0 stands for "the store file's path" in the table above.
const path0 = "\x00path"

func TestEventSourcedRefusesBadConfiguration(t *testing.T) {
	good := accountBehavior("x", persistence.NewMemoryJournal(), nil, nil)
	for _, c := range []struct {
		name   string
		change func(b *persistence.Behavior[Account, any, AccountEvent])
		want   string
	}{
		{"no id", func(b *persistence.Behavior[Account, any, AccountEvent]) { b.ID = "" }, "empty ID"},
		{"no journal", func(b *persistence.Behavior[Account, any, AccountEvent]) { b.Journal = nil }, "no Journal"},
		{"no handler", func(b *persistence.Behavior[Account, any, AccountEvent]) { b.Handle = nil }, "no Handle"},
		{"no apply", func(b *persistence.Behavior[Account, any, AccountEvent]) { b.Apply = nil }, "no Apply"},
		{"no registry", func(b *persistence.Behavior[Account, any, AccountEvent]) { b.Events = nil }, "no Events"},
		{"snapshots without a store", func(b *persistence.Behavior[Account, any, AccountEvent]) { b.SnapshotEvery = 10 }, "without a Snapshots store"},
		{"a registry with a clash", func(b *persistence.Behavior[Account, any, AccountEvent]) {
			b.Events = accountEvents().Register("deposited", Withdrawn{})
		}, `"deposited" is already`},
	} {
		b := good
		c.change(&b)
		p, err := persistence.EventSourced(b)
		if err == nil || p != nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: EventSourced = %v, want an error saying %q", c.name, err, c.want)
		}
	}
	if _, err := persistence.EventSourced(good); err != nil {
		t.Errorf("a good behavior: %v", err)
	}
}

// TestBoltJournalOnSystemDB: the journal shares the system's store with
// the spill queues, in buckets of its own.
func TestBoltJournalOnSystemDB(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	sys, j, _, stop := boltSystem(t, path)
	if _, err := sys.SpillStore(); err != nil {
		t.Fatal(err)
	}
	if err := j.Append(context.Background(), "x", []persistence.Event{{Seq: 1, Type: "t"}}); err != nil {
		t.Fatal(err)
	}
	db, _ := sys.DB()
	var buckets []string
	_ = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, _ *bolt.Bucket) error { buckets = append(buckets, string(name)); return nil })
	})
	if strings.Join(buckets, ",") != "journal,sluice" {
		t.Errorf("top-level buckets %v, want journal and sluice", buckets)
	}
	stop()
}

// flakySnapshots is a SnapshotStore whose saves fail while fail is set.
type flakySnapshots struct {
	persistence.SnapshotStore
	fail atomic.Bool
}

func (f *flakySnapshots) Save(ctx context.Context, id string, s persistence.Snapshot) error {
	if f.fail.Load() {
		return errors.New("snapshot store unavailable")
	}
	return f.SnapshotStore.Save(ctx, id, s)
}

// TestSnapshotFailureIsRetried: a failed snapshot costs nothing but the
// snapshot: the command succeeds, and the snapshot is taken after the next
// events.
func TestSnapshotFailureIsRetried(t *testing.T) {
	sys, err := actors.NewSystem(actors.Config{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(context.Background())
	snaps := &flakySnapshots{SnapshotStore: persistence.NewMemorySnapshotStore()}
	snaps.fail.Store(true)
	b := accountBehavior("acct", persistence.NewMemoryJournal(), snaps, nil)
	b.SnapshotEvery = 2
	b.SnapshotWhen = func(s Account, seq uint64) bool { return s.Balance >= 1000 }
	ref := spawn(t, sys, "acct", b)
	request(t, ref, Deposit{1})
	if reply := request(t, ref, Deposit{1}); reply != (Account{2, 2}) { // a snapshot is due, and fails
		t.Fatalf("Deposit with a failing snapshot store replied %v", reply)
	}
	state(t, ref) // the actor replies before it snapshots: wait for it
	if _, ok, _ := snaps.Latest(context.Background(), "acct"); ok {
		t.Fatal("a snapshot was saved by a failing store")
	}
	snaps.fail.Store(false)
	request(t, ref, Deposit{1}) // retried now
	state(t, ref)               // the actor replies before it snapshots: wait for it
	if sn, ok, _ := snaps.Latest(context.Background(), "acct"); !ok || sn.Seq != 3 {
		t.Fatalf("newest snapshot at %d (found %v), want 3: the failed snapshot was not retried", sn.Seq, ok)
	}
	request(t, ref, Deposit{1000}) // seq 4: due by count and by SnapshotWhen
	request(t, ref, Deposit{1})    // seq 5: due by SnapshotWhen only
	state(t, ref)
	if sn, ok, _ := snaps.Latest(context.Background(), "acct"); !ok || sn.Seq != 5 {
		t.Fatalf("newest snapshot at %d, want 5 (SnapshotWhen)", sn.Seq)
	}
}

// TestStaleWriterIsFencedAndRecovers: two actors with one persistence id
// (say, an old incarnation not yet gone): the one whose state is stale
// fails its append with ErrSeqConflict, applies nothing, and restarts to
// recover the journal's state.
func TestStaleWriterIsFencedAndRecovers(t *testing.T) {
	sys, err := actors.NewSystem(actors.Config{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop(context.Background())
	j := persistence.NewMemoryJournal()
	b := accountBehavior("shared", j, nil, nil)
	b.Initial = func() Account { return Account{Balance: 100} }
	a := spawn(t, sys, "a", b)
	if reply := request(t, a, Deposit{5}); reply != (Account{105, 1}) {
		t.Fatalf("a: Deposit{5} replied %v, want {105 1} (from the initial state)", reply)
	}
	stale := spawn(t, sys, "stale", b)
	if s := state(t, stale); s != (Account{105, 1}) {
		t.Fatalf("stale recovered %+v", s)
	}
	request(t, a, Deposit{1}) // seq 2, unknown to stale
	if err := requestErr(t, stale, Deposit{1000}); !errors.Is(err, persistence.ErrSeqConflict) {
		t.Fatalf("the stale writer's Deposit replied %v, want ErrSeqConflict", err)
	}
	if s := state(t, stale); s != (Account{106, 2}) { // restarted and recovered
		t.Fatalf("stale after its failed append: %+v, want {106 2}", s)
	}
	if reply := request(t, stale, Deposit{4}); reply != (Account{110, 3}) {
		t.Fatalf("stale after recovering: Deposit{4} replied %v, want {110 3}", reply)
	}
}

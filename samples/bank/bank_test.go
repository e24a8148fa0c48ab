package bank_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/actors/actortest"
	"github.com/sluicehq/sluice/clock/clocktest"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/operators/optest"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/persistence/persisttest"
	"github.com/sluicehq/sluice/samples/bank"
	"github.com/sluicehq/sluice/supervision"
)

// TestMain fails the package when a test leaves a goroutine behind. The
// protoactor goroutine ignored is the dead-letter throttle's (see
// actors/actors_test.go): bounded, owned by protoactor, not waitable.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	)
}

// wait bounds every wait on a reply, a timer or a job.
const wait = 10 * time.Second

// An account on a real store file: commands through a probe, then a new
// system on the same file recovers the account from its snapshot and the
// events after it, and answers the probe with the same state.
func TestAccountRecoversFromSnapshotAndJournal(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	path := filepath.Join(t.TempDir(), "bank.db")
	id := bank.PersistenceID("alice")

	sys, err := actors.NewSystem(actors.Config{Store: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Stop(context.Background()) })
	db, err := sys.DB()
	if err != nil {
		t.Fatal(err)
	}
	journal, err := persistence.NewBoltJournal(db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { journal.Close() }) // before the system stops (cleanups run last first)
	snapshots, err := persistence.NewBoltSnapshotStore(db)
	if err != nil {
		t.Fatal(err)
	}
	alice, err := bank.NewAccount(bank.AccountConfig{ID: "alice", Journal: journal, Snapshots: snapshots, SnapshotEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := sys.Spawn("alice", alice)
	if err != nil {
		t.Fatal(err)
	}
	p := actortest.NewProbe(t, sys)
	at := bank.Epoch
	var before bank.Account
	for _, cmd := range []bank.Command{
		bank.Open{Initial: 1000, At: at}, bank.Deposit{Amount: 250, At: at}, bank.Withdraw{Amount: 100, At: at},
		bank.Deposit{Amount: 50, At: at}, bank.Withdraw{Amount: 25, At: at},
	} {
		p.Send(ref, cmd)
		before = actortest.ExpectMsg[bank.Account](p, wait)
	}
	if before.Balance != 1175 || before.History != 5 || !before.Open {
		t.Fatalf("after 5 commands: %+v, want an open account with 1175 cents and 5 events", before)
	}
	if snap, ok, err := snapshots.Latest(ctx, id); err != nil || !ok || snap.Seq != 3 {
		t.Fatalf("newest snapshot: seq %d, %v, %v; want seq 3 (every 3 events)", snap.Seq, ok, err)
	}
	if err := ref.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := journal.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sys.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	// A new system on the same file. The events that the snapshot covers
	// are deleted: the state can only come from the snapshot (seq 3) and
	// the two events after it.
	sys2, err := actors.NewSystem(actors.Config{Store: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys2.Stop(context.Background()) })
	db2, err := sys2.DB()
	if err != nil {
		t.Fatal(err)
	}
	journal2, err := persistence.NewBoltJournal(db2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { journal2.Close() })
	snapshots2, err := persistence.NewBoltSnapshotStore(db2)
	if err != nil {
		t.Fatal(err)
	}
	if err := journal2.DeleteTo(ctx, id, 3); err != nil {
		t.Fatal(err)
	}
	alice2, err := bank.NewAccount(bank.AccountConfig{ID: "alice", Journal: journal2, Snapshots: snapshots2, SnapshotEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	ref2, err := sys2.Spawn("alice", alice2)
	if err != nil {
		t.Fatal(err)
	}
	p2 := actortest.NewProbe(t, sys2)
	p2.Send(ref2, persistence.GetState{})
	if after := actortest.ExpectMsg[bank.Account](p2, wait); !reflect.DeepEqual(after, before) {
		t.Fatalf("recovered %+v, want %+v", after, before)
	}
	p2.Send(ref2, bank.Deposit{Amount: 5, At: at}) // and it goes on from seq 6
	if after := actortest.ExpectMsg[bank.Account](p2, wait); after.Balance != 1180 || after.History != 6 {
		t.Fatalf("after a deposit of 5: %+v, want 1180 cents and 6 events", after)
	}
	if seq, err := journal2.HighestSeq(ctx, id); err != nil || seq != 6 {
		t.Fatalf("journal at seq %d (%v), want 6", seq, err)
	}
}

// A failed journal write: the deposit is answered with the injected error,
// nothing is applied, and nothing is there to recover. A refusal (funds
// short) is an error of its own, and a failed snapshot is taken again
// after the next event.
func TestDepositRefusedWhenTheJournalFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Stop(context.Background()) })
	journal := persisttest.NewFaultyJournal(nil)
	snapshots := persisttest.NewFaultySnapshotStore(nil)
	bob, err := bank.NewAccount(bank.AccountConfig{ID: "bob", Journal: journal, Snapshots: snapshots, SnapshotEvery: 2})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := sys.Spawn("bob", bob)
	if err != nil {
		t.Fatal(err)
	}
	p := actortest.NewProbe(t, sys)
	at := bank.Epoch
	p.Send(ref, bank.Open{Initial: 500, At: at})
	if a := actortest.ExpectMsg[bank.Account](p, wait); a.Balance != 500 {
		t.Fatalf("opened: %+v, want 500 cents", a)
	}

	journal.FailNextWrite(syscall.EIO)
	p.Send(ref, bank.Deposit{Amount: 100, At: at})
	err = actortest.ExpectMsg[error](p, wait)
	if !errors.Is(err, syscall.EIO) || !errors.Is(err, persisttest.ErrInjected) || errors.Is(err, bank.ErrRefused) {
		t.Fatalf("deposit on a failing journal: %v; want the injected EIO, not a refusal", err)
	}
	p.Send(ref, persistence.GetState{})
	if a := actortest.ExpectMsg[bank.Account](p, wait); a.Balance != 500 || a.History != 1 {
		t.Fatalf("after the failed deposit: %+v, want 500 cents and 1 event", a)
	}

	p.Send(ref, bank.Withdraw{Amount: 501, At: at})
	err = actortest.ExpectMsg[error](p, wait)
	if !errors.Is(err, bank.ErrInsufficientFunds) || !errors.Is(err, bank.ErrRefused) ||
		err.Error() != `bank: account "bob": withdraw 501 cents from a balance of 500: insufficient funds` {
		t.Fatalf("withdrawal beyond the balance: %v", err)
	}

	snapshots.FailNextWrite(nil) // the snapshot due at seq 2 fails
	p.Send(ref, bank.Deposit{Amount: 100, At: at})
	if a := actortest.ExpectMsg[bank.Account](p, wait); a.Balance != 600 || a.History != 2 {
		t.Fatalf("deposit after the failure: %+v, want 600 cents and 2 events", a)
	}
	p.Send(ref, bank.Withdraw{Amount: 50, At: at}) // the snapshot is taken now, after the reply
	p.Send(ref, persistence.GetState{})            // answered once it is taken
	actortest.ExpectMsg[bank.Account](p, wait)
	last := actortest.ExpectMsg[bank.Account](p, wait)
	if snap, ok, err := snapshots.Latest(ctx, bank.PersistenceID("bob")); err != nil || !ok || snap.Seq != 3 {
		t.Fatalf("newest snapshot: seq %d, %v, %v; want seq 3 (retried after the failed one)", snap.Seq, ok, err)
	}
	if c := journal.Counts(); c.FailedWrites != 1 {
		t.Fatalf("journal counts %+v, want 1 failed write", c)
	}
	if c := snapshots.Counts(); c.FailedWrites != 1 {
		t.Fatalf("snapshot counts %+v, want 1 failed write", c)
	}

	// What was recorded is what the account said: a new actor recovers it.
	if err := ref.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := sys.Spawn("bob-again", bob)
	if err != nil {
		t.Fatal(err)
	}
	p.Send(again, persistence.GetState{})
	if a := actortest.ExpectMsg[bank.Account](p, wait); !reflect.DeepEqual(a, last) || a.Balance != 550 {
		t.Fatalf("recovered %+v, want %+v", a, last)
	}
}

// A corrupt event on recovery: the account fails with a
// *persistence.RecoveryError naming it, which its supervisor receives.
func TestCorruptJournalReachesTheSupervisor(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Stop(context.Background()) })
	journal := persisttest.NewFaultyJournal(nil)
	carol, err := bank.NewAccount(bank.AccountConfig{ID: "carol", Journal: journal})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := sys.Spawn("carol", carol)
	if err != nil {
		t.Fatal(err)
	}
	p := actortest.NewProbe(t, sys)
	p.Send(ref, bank.Open{Initial: 100, At: bank.Epoch})
	p.Send(ref, bank.Deposit{Amount: 1, At: bank.Epoch})
	actortest.ExpectMsg[bank.Account](p, wait)
	actortest.ExpectMsg[bank.Account](p, wait)
	if err := ref.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	// The supervisor hands the failure to the probe, and stops the actor.
	strategy, err := supervision.NewStrategy(supervision.WithDecider(func(err error) supervision.Directive {
		sys.Root().Send(p.PID(), err)
		return supervision.Stop
	}))
	if err != nil {
		t.Fatal(err)
	}
	journal.CorruptNextRead() // the first event replayed
	again, err := sys.Spawn("carol-again", carol, actors.Supervise(strategy))
	if err != nil {
		t.Fatal(err)
	}
	re := actortest.ExpectMsg[*persistence.RecoveryError](p, wait)
	if re.ID != bank.PersistenceID("carol") || re.Seq != 1 || !errors.Is(re, persistence.ErrDecode) {
		t.Fatalf("recovery error %v: want %q at seq 1, a decode error", re, bank.PersistenceID("carol"))
	}
	p.Watch(again.PID()) // watched after the failure: Terminated is a system message, it would overtake the error
	actortest.ExpectTerminated(p, again.PID(), wait)
}

// Through the Bank, on a manual clock: a corrupt read on recovery is
// retried after the supervisor's backoff and the account recovers; when
// every read is corrupt, the restart budget runs out and the caller gets
// the *persistence.RecoveryError.
func TestBankRecoveryFailureReachesTheCaller(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	clock := clocktest.NewManual(bank.Epoch)
	sys, err := actors.NewSystem(actors.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Stop(context.Background()) })
	journal := persisttest.NewFaultyJournal(nil)
	strategy, err := supervision.NewStrategy(
		supervision.WithBackoff(supervision.Backoff{Initial: time.Second, Jitter: supervision.NoJitter}),
		supervision.WithRestartBudget(1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	cfg := bank.Config{Journal: journal, Supervision: &strategy}
	b, err := bank.NewBank(sys, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Open(ctx, "dave", 700, bank.Epoch); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Deposit(ctx, "dave", 300, bank.Epoch); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// A transient corruption: the first recovery fails, the restart after
	// the backoff recovers.
	journal.CorruptNextRead()
	b2, err := bank.NewBank(sys, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b2.Ref("dave"); err != nil { // spawned: it recovers, and fails
		t.Fatal(err)
	}
	if err := clock.WaitForTimers(ctx, 1); err != nil { // the restart's backoff
		t.Fatal(err)
	}
	if d, _ := clock.Next(); d != time.Second {
		t.Fatalf("restart in %v, want the backoff's 1s", d)
	}
	clock.Advance(time.Second)
	if a, err := b2.Account(ctx, "dave"); err != nil || a.Balance != 1000 {
		t.Fatalf("after the restart: %+v, %v; want 1000 cents", a, err)
	}
	if c := journal.Counts(); c.Corrupted != 1 {
		t.Fatalf("journal counts %+v, want 1 corrupt read", c)
	}
	if err := b2.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// A lasting corruption: one restart is allowed, the second failure
	// stops the account, and the caller gets the reason.
	journal.CorruptReads(true)
	b3, err := bank.NewBank(sys, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b3.Close(context.Background()) })
	if _, err := b3.Ref("dave"); err != nil {
		t.Fatal(err)
	}
	if err := clock.WaitForTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	_, err = b3.Account(ctx, "dave")
	var re *persistence.RecoveryError
	if !errors.As(err, &re) || re.ID != bank.PersistenceID("dave") || re.Seq != 1 || !errors.Is(err, persistence.ErrDecode) {
		t.Fatalf("balance of an account that cannot recover: %v; want its RecoveryError at seq 1", err)
	}
	if n := clock.Pending(); n != 0 {
		t.Fatalf("%d restarts pending after the budget ran out", n)
	}
}

// The transfer saga: done, refused, refunded (the receiver is not open),
// left pending by a full disk and completed by Resume, and completed by the
// next transfer after a restart of the bank.
func TestTransfer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Stop(context.Background()) })
	journal := persisttest.NewFaultyJournal(nil)
	b, err := bank.NewBank(sys, bank.Config{Journal: journal})
	if err != nil {
		t.Fatal(err)
	}
	at := bank.Epoch
	if _, err := b.Open(ctx, "a", 1000, at); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Open(ctx, "b", 0, at); err != nil {
		t.Fatal(err)
	}
	balances := func(want map[string]int64) { // closes over b, which a restart replaces
		t.Helper()
		for id, cents := range want {
			if a, err := b.Account(ctx, id); err != nil || a.Balance != cents {
				t.Fatalf("account %s: %+v, %v; want %d cents", id, a, err, cents)
			}
		}
	}

	if err := b.Transfer(ctx, "a", "b", 300, at); err != nil {
		t.Fatal(err)
	}
	balances(map[string]int64{"a": 700, "b": 300})

	err = b.Transfer(ctx, "a", "b", 5000, at)
	if !errors.Is(err, bank.ErrInsufficientFunds) || !errors.Is(err, bank.ErrRefused) || errors.Is(err, bank.ErrRefunded) {
		t.Fatalf("transfer beyond the balance: %v", err)
	}
	balances(map[string]int64{"a": 700, "b": 300})

	err = b.Transfer(ctx, "a", "nobody", 200, at)
	if !errors.Is(err, bank.ErrRefunded) || !errors.Is(err, bank.ErrNotOpen) {
		t.Fatalf("transfer to an account never opened: %v; want refunded, not open", err)
	}
	balances(map[string]int64{"a": 700, "b": 300})

	// The disk fills up after the sender's event (transfer 3): the credit
	// fails, and so does the refund. The amount is in flight.
	_, sent, err := bank.Events().Encode(bank.TransferSent{ID: 3, To: "b", Amount: 100, At: at})
	if err != nil {
		t.Fatal(err)
	}
	journal.FailAfterBytes(len(sent), syscall.ENOSPC)
	err = b.Transfer(ctx, "a", "b", 100, at)
	if !errors.Is(err, bank.ErrPending) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("transfer on a full disk: %v; want pending, ENOSPC", err)
	}
	if a, err := b.Account(ctx, "a"); err != nil || a.Balance != 600 || a.Outgoing == nil || a.Outgoing.ID != 3 {
		t.Fatalf("sender with a pending transfer: %+v, %v; want 600 cents and transfer 3 outgoing", a, err)
	}
	err = b.Transfer(ctx, "a", "b", 1, at) // still full: transfer 3 first, which stays pending
	if !errors.Is(err, bank.ErrPending) {
		t.Fatalf("second transfer on a full disk: %v; want pending", err)
	}
	journal.Heal()
	if err := b.Resume(ctx, "a", at); err != nil {
		t.Fatal(err)
	}
	balances(map[string]int64{"a": 600, "b": 400})

	// Pending again, then the bank stops: a new one, on the same journal,
	// completes it before the next transfer.
	_, sent, err = bank.Events().Encode(bank.TransferSent{ID: 4, To: "b", Amount: 50, At: at})
	if err != nil {
		t.Fatal(err)
	}
	journal.FailAfterBytes(len(sent), syscall.ENOSPC)
	if err := b.Transfer(ctx, "a", "b", 50, at); !errors.Is(err, bank.ErrPending) {
		t.Fatalf("transfer on a full disk: %v; want pending", err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	journal.Heal()
	b, err = bank.NewBank(sys, bank.Config{Journal: journal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	if err := b.Transfer(ctx, "a", "b", 25, at); err != nil {
		t.Fatal(err)
	}
	balances(map[string]int64{"a": 525, "b": 475})
	a, err := b.Account(ctx, "a")
	if err != nil || a.Outgoing != nil || a.LastTransfer != 5 {
		t.Fatalf("sender: %+v, %v; want nothing outgoing after transfer 5", a, err)
	}
	if st, err := b.Account(ctx, "b"); err != nil || st.Received["a"] != 5 {
		t.Fatalf("receiver: %+v, %v; want transfer 5 of a received last", st, err)
	}
}

// The windowed count of deposits through a checkpoint and a crash: the
// open window's state survives, and the entry pushed after the checkpoint
// is read again.
func TestDepositsPerMinuteThroughARestore(t *testing.T) {
	h := optest.New(t, bank.DepositsPerMinute)
	at := bank.Epoch
	h.PushAt(bank.Entry{Account: "a", Seq: 1, Event: bank.Deposited{Amount: 100, At: at.Add(10 * time.Second)}}, at.Add(10*time.Second))
	h.PushAt(bank.Entry{Account: "a", Seq: 2, Event: bank.Withdrawn{Amount: 50, At: at.Add(20 * time.Second)}}, at.Add(20*time.Second))
	h.PushAt(bank.Entry{Account: "b", Seq: 1, Event: bank.Deposited{Amount: 200, At: at.Add(30 * time.Second)}}, at.Add(30*time.Second))
	h.Checkpoint()
	h.PushAt(bank.Entry{Account: "a", Seq: 3, Event: bank.Deposited{Amount: 300, At: at.Add(40 * time.Second)}}, at.Add(40*time.Second))
	h = h.Restart()
	h.Watermark(at.Add(time.Minute - time.Nanosecond)) // the first minute is over
	got := map[string]bank.Deposits{}
	for _, w := range h.WaitOutput(2) {
		got[fmt.Sprintf("%s@%s", w.Key, w.Start.Format("15:04"))] = w.Value
	}
	if want := map[string]bank.Deposits{"a@00:00": {Count: 2, Cents: 400}, "b@00:00": {Count: 1, Cents: 200}}; !maps.Equal(got, want) {
		t.Fatalf("first minute after the restore: %v, want %v", got, want)
	}
	h.PushAt(bank.Entry{Account: "a", Seq: 4, Event: bank.Deposited{Amount: 5, At: at.Add(70 * time.Second)}}, at.Add(70*time.Second))
	final := h.Finish()
	got = map[string]bank.Deposits{}
	for _, w := range final {
		got[fmt.Sprintf("%s@%s", w.Key, w.Start.Format("15:04"))] = w.Value
	}
	want := map[string]bank.Deposits{"a@00:00": {Count: 2, Cents: 400}, "b@00:00": {Count: 1, Cents: 200}, "a@00:01": {Count: 1, Cents: 5}}
	if !maps.Equal(got, want) || len(final) != len(want) {
		t.Fatalf("at the end: %v, want %v", final, want)
	}
}

// A failure injected at a record fails the job, naming it; the restarted
// job resumes from the checkpoint and the result is exact: nothing lost,
// nothing counted twice.
func TestDepositsPerMinuteThroughAFailure(t *testing.T) {
	h := optest.New(t, bank.DepositsPerMinute)
	at := bank.Epoch
	h.PushAt(bank.Entry{Account: "a", Seq: 1, Event: bank.Deposited{Amount: 100, At: at.Add(10 * time.Second)}}, at.Add(10*time.Second))
	h.Checkpoint()
	h.FailAt(2)
	h.PushAt(bank.Entry{Account: "a", Seq: 2, Event: bank.Deposited{Amount: 200, At: at.Add(20 * time.Second)}}, at.Add(20*time.Second))
	h.PushAt(bank.Entry{Account: "b", Seq: 1, Event: bank.Deposited{Amount: 300, At: at.Add(30 * time.Second)}}, at.Add(30*time.Second))
	err := h.WaitErr()
	var opErr *operators.OperatorError
	if !errors.As(err, &opErr) || !strings.Contains(err.Error(), "failure injected at record 2") {
		t.Fatalf("job error: %v; want the injected failure at record 2", err)
	}
	h = h.Restart()
	h.PushAt(bank.Entry{Account: "b", Seq: 2, Event: bank.Deposited{Amount: 7, At: at.Add(90 * time.Second)}}, at.Add(90*time.Second))
	final := h.Finish()
	got := map[string]bank.Deposits{}
	for _, w := range final {
		got[fmt.Sprintf("%s@%s", w.Key, w.Start.Format("15:04"))] = w.Value
	}
	want := map[string]bank.Deposits{"a@00:00": {Count: 2, Cents: 300}, "b@00:00": {Count: 1, Cents: 300}, "b@00:01": {Count: 1, Cents: 7}}
	if !maps.Equal(got, want) || len(final) != len(want) {
		t.Fatalf("after the failure and the restart: %v, want %v", final, want)
	}
}

// The sample, small: every recovered balance, the refusals and the
// deposits per minute equal a plain replay of the same workload.
func TestSampleEqualsDirectComputation(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := bank.New()
	s.Configure(6, 400, 7, 4, filepath.Join(t.TempDir(), "bank.db"))
	top, err := s.Topology()
	if err != nil {
		t.Fatal(err)
	}
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Stop(context.Background()) })
	run, err := sys.Run(ctx, top)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	// The direct computation: a map, the same operations in order.
	w := s.Workload()
	balances, refused, deposits := map[string]int64{}, 0, map[bank.Window]bank.Deposits{}
	for i := range w.Accounts {
		balances[bank.AccountName(i)] = w.Initial
	}
	for i := range w.Ops {
		op := w.Op(i)
		_, open := balances[op.To]
		switch {
		case op.Kind == bank.OpDeposit:
			balances[op.Account] += op.Amount
			k := bank.Window{Account: op.Account, Start: op.At.Truncate(time.Minute)}
			deposits[k] = bank.Deposits{Count: deposits[k].Count + 1, Cents: deposits[k].Cents + op.Amount}
		case op.Amount > balances[op.Account] || op.Kind == bank.OpTransfer && !open:
			refused++
		default:
			balances[op.Account] -= op.Amount
			if op.Kind == bank.OpTransfer {
				balances[op.To] += op.Amount
			}
		}
	}
	res := s.Result()
	if !maps.Equal(res.Balances, balances) || res.Refused != refused {
		t.Fatalf("recovered balances %v with %d refused; the direct computation %v with %d", res.Balances, res.Refused, balances, refused)
	}
	if got := s.Deposits(); !maps.Equal(got, deposits) {
		t.Fatalf("deposits per minute %v; the direct count %v", got, deposits)
	}
	if res.Snapshots != w.Accounts || res.Replayed >= res.Events || int64(len(res.Entries)) != res.Events {
		t.Fatalf("recovered from %d snapshots + %d of %d events, %d entries read; want a snapshot per account, fewer events replayed than stored",
			res.Snapshots, res.Replayed, res.Events, len(res.Entries))
	}
	var out strings.Builder
	if err := s.Report(&out); err != nil {
		t.Fatalf("report: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "balances equal the direct computation") {
		t.Errorf("report:\n%s", out.String())
	}
	t.Logf("report:\n%s", out.String())
}

// Invalid configuration is an error, not a panic.
func TestConfigurationIsValidated(t *testing.T) {
	if _, err := bank.NewAccount(bank.AccountConfig{ID: "x"}); err == nil {
		t.Error("an account without a journal was accepted")
	}
	if _, err := bank.NewAccount(bank.AccountConfig{Journal: persistence.NewMemoryJournal()}); err == nil {
		t.Error("an account without an ID was accepted")
	}
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Stop(context.Background()) })
	if _, err := bank.NewBank(sys, bank.Config{}); err == nil {
		t.Error("a bank without a journal was accepted")
	}
	if _, err := bank.NewBank(sys, bank.Config{Journal: persistence.NewMemoryJournal(), SnapshotEvery: 10}); err == nil {
		t.Error("a bank with SnapshotEvery and no snapshot store was accepted")
	}
	if _, err := bank.New().Topology(); err != nil {
		t.Errorf("the default sample: %v", err)
	}
	s := bank.New()
	s.Configure(1, 10, 1, 0, "")
	if _, err := s.Topology(); err == nil {
		t.Error("a sample with one account was accepted")
	}
}

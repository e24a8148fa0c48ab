package bank

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/supervision"
)

// ErrPending is matched by the error of a transfer whose amount has left
// the sender but whose end (credited or refunded) could not be recorded
// now: the sender's next transfer, or Resume, completes it. Do not send it
// again.
var ErrPending = errors.New("bank: transfer pending")

// ErrRefunded is matched by the error of a transfer that the receiver did
// not take, and whose amount went back to the sender (the saga's
// compensation). The error wraps the reason too: a refusal of the receiver
// (ErrNotOpen, matching ErrRefused), or the failure of its journal.
var ErrRefunded = errors.New("bank: transfer refunded")

// ErrClosed is returned by the methods of a Bank after Close.
var ErrClosed = errors.New("bank: closed")

// Config configures a Bank.
type Config struct {
	// Journal keeps the accounts' events. Required.
	Journal persistence.Journal
	// Snapshots keeps the newest snapshot of each account (nil: none).
	Snapshots persistence.SnapshotStore
	// SnapshotEvery takes a snapshot of an account every so many of its
	// events (0: never). It needs Snapshots.
	SnapshotEvery uint64
	// Supervision says what happens to an account actor that fails: its
	// recovery failed, or the journal moved under it. Nil: restart after
	// 100 ms (doubling, with jitter), at most 3 times a minute, then stop.
	// A stopped account answers every call with the failure's reason.
	// The supervisor runs on the System's clock (actors.Config.Clock).
	Supervision *supervision.Strategy
}

// Bank is an application of event-sourced accounts on an actors.System,
// without a topology. Each account is an actor (NewAccount), spawned when
// first used, which recovers its state from its snapshot and journal. Its
// methods are safe for concurrent use, and honour ctx.
//
// One Bank at a time per System and per journal: the actors are named
// "bank/ID" after their persistence ids.
type Bank struct {
	sys      *actors.System
	cfg      Config
	strategy supervision.Strategy
	applied  atomic.Int64

	mu       sync.Mutex
	closed   bool
	accounts map[string]*account // by account ID
}

// account is a spawned account actor.
type account struct {
	id  string
	ref *actors.Ref
	// sending serialises the transfers that the account sends (a buffered
	// channel of one: a lock that honours ctx).
	sending chan struct{}
}

// NewBank returns a Bank on sys. It validates cfg.
func NewBank(sys *actors.System, cfg Config) (*Bank, error) {
	switch {
	case sys == nil:
		return nil, errors.New("bank: nil System")
	case cfg.Journal == nil:
		return nil, errors.New("bank: no Journal")
	case cfg.SnapshotEvery > 0 && cfg.Snapshots == nil:
		return nil, errors.New("bank: SnapshotEvery without a Snapshots store")
	}
	var strategy supervision.Strategy
	if cfg.Supervision != nil {
		strategy = *cfg.Supervision
		if err := strategy.Validate(); err != nil {
			return nil, fmt.Errorf("bank: %w", err)
		}
	} else {
		var err error
		strategy, err = supervision.NewStrategy(
			supervision.WithBackoff(supervision.Backoff{Initial: 100 * time.Millisecond}),
			supervision.WithRestartBudget(3, time.Minute))
		if err != nil {
			return nil, fmt.Errorf("bank: %w", err)
		}
	}
	b := &Bank{sys: sys, cfg: cfg, strategy: strategy, accounts: map[string]*account{}}
	return b, nil
}

// Applied returns how many events the Bank's accounts have applied: those
// replayed by their recoveries, and those of the commands since.
func (b *Bank) Applied() int64 { return b.applied.Load() }

// account returns the actor of the account id, spawning it (it recovers)
// the first time.
func (b *Bank) account(id string) (*account, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if a := b.accounts[id]; a != nil {
		return a, nil
	}
	producer, err := NewAccount(AccountConfig{
		ID: id, Journal: b.cfg.Journal, Snapshots: b.cfg.Snapshots, SnapshotEvery: b.cfg.SnapshotEvery,
		OnApply: func(Event) { b.applied.Add(1) },
	})
	if err != nil {
		return nil, err
	}
	ref, err := b.sys.Spawn(PersistenceID(id), producer, actors.Supervise(b.strategy))
	if err != nil {
		return nil, fmt.Errorf("bank: account %q: %w", id, err)
	}
	a := &account{id: id, ref: ref, sending: make(chan struct{}, 1)}
	b.accounts[id] = a
	return a, nil
}

// Ref returns the actor of the account id, spawned if needed: commands
// sent to it with Request are answered as the Bank's methods are.
func (b *Bank) Ref(id string) (*actors.Ref, error) {
	a, err := b.account(id)
	if err != nil {
		return nil, err
	}
	return a.ref, nil
}

// request sends msg to the account and returns its reply: the Account, or
// the command's error. When the supervisor stops the account meanwhile (or
// had stopped it), the error wraps the reason, a *persistence.RecoveryError
// for a failed recovery.
func (b *Bank) request(ctx context.Context, id string, msg any) (Account, error) {
	a, err := b.account(id)
	if err != nil {
		return Account{}, err
	}
	// A request to an account that its supervisor stopped (or stops
	// meanwhile) fails at once with the reason; a refused command is the
	// request's error.
	acct, err := actors.Ask[Account](ctx, a.ref, msg)
	if err != nil {
		select {
		case <-a.ref.Done():
			return Account{}, fmt.Errorf("bank: account %q is stopped: %w", id, a.ref.Err())
		default:
		}
		return Account{}, err
	}
	return acct, nil
}

// Open opens the account id with an initial balance (cents).
func (b *Bank) Open(ctx context.Context, id string, initial int64, at time.Time) (Account, error) {
	return b.request(ctx, id, Open{Initial: initial, At: at})
}

// Deposit adds amount cents to the account id.
func (b *Bank) Deposit(ctx context.Context, id string, amount int64, at time.Time) (Account, error) {
	return b.request(ctx, id, Deposit{Amount: amount, At: at})
}

// Withdraw takes amount cents from the account id; it is refused (an error
// matching ErrInsufficientFunds and ErrRefused) when the balance is
// smaller.
func (b *Bank) Withdraw(ctx context.Context, id string, amount int64, at time.Time) (Account, error) {
	return b.request(ctx, id, Withdraw{Amount: amount, At: at})
}

// Account returns the state of the account id.
func (b *Bank) Account(ctx context.Context, id string) (Account, error) {
	return b.request(ctx, id, persistence.GetState{})
}

// Transfer moves amount cents from one account to another, as a small
// saga of events on both:
//
//  1. the sender records TransferSent: the amount leaves its balance, and
//     the transfer is its Outgoing one (refused, changing nothing, when
//     funds are short or another transfer of it is still pending);
//  2. the receiver records TransferReceived, at most once per transfer;
//  3. the sender records TransferSettled. When the receiver refused step 2
//     (it is not open), the sender records TransferRefunded instead: the
//     compensation, and Transfer returns an error matching ErrRefunded and
//     the receiver's refusal.
//
// When step 2's outcome is unknown (a failed journal write, a timeout),
// the receiver's state says whether it took the transfer: if not, the
// amount is refunded as well. When a step cannot be recorded at all, the
// transfer stays pending (an error matching ErrPending) and the sender's
// next transfer, or Resume, completes it: the money is always in exactly
// one place, across failures and restarts. Transfers from one account run
// one at a time.
func (b *Bank) Transfer(ctx context.Context, from, to string, amount int64, at time.Time) error {
	if to == "" {
		return fmt.Errorf("bank: transfer from %q: no receiver", from)
	}
	src, err := b.account(from)
	if err != nil {
		return err
	}
	select {
	case src.sending <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("bank: transfer from %q: %w", from, context.Cause(ctx))
	}
	defer func() { <-src.sending }()
	if err := b.resume(ctx, from, at); err != nil {
		return err
	}
	sent, err := b.request(ctx, from, sendTransfer{To: to, Amount: amount, At: at})
	if err != nil {
		return err // refused, or not recorded: nothing moved
	}
	return b.deliver(ctx, from, *sent.Outgoing, at)
}

// Resume completes the pending outgoing transfer of the account id, if it
// has one (see Transfer).
func (b *Bank) Resume(ctx context.Context, id string, at time.Time) error {
	src, err := b.account(id)
	if err != nil {
		return err
	}
	select {
	case src.sending <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("bank: resume %q: %w", id, context.Cause(ctx))
	}
	defer func() { <-src.sending }()
	return b.resume(ctx, id, at)
}

// resume completes the pending transfer of from; the caller holds its
// sending lock.
func (b *Bank) resume(ctx context.Context, from string, at time.Time) error {
	st, err := b.request(ctx, from, persistence.GetState{})
	if err != nil {
		return err
	}
	if st.Outgoing == nil {
		return nil
	}
	if err := b.deliver(ctx, from, *st.Outgoing, at); err != nil && !errors.Is(err, ErrRefunded) {
		return err // still pending
	}
	return nil // credited, or refunded: the earlier transfer is over
}

// deliver runs steps 2 and 3 of the transfer t of from.
func (b *Bank) deliver(ctx context.Context, from string, t Transfer, at time.Time) error {
	what := fmt.Sprintf("bank: transfer %d of %q (%d cents to %q)", t.ID, from, t.Amount, t.To)
	pending := func(step string, err error) error {
		return &transferError{what: what + " pending: " + step, kind: ErrPending, err: err}
	}
	_, err := b.request(ctx, t.To, receiveTransfer{From: from, ID: t.ID, Amount: t.Amount, At: at})
	refused := errors.Is(err, ErrRefused)
	if err != nil && !refused {
		// The receiver may or may not have recorded it: its state says.
		st, qerr := b.request(ctx, t.To, persistence.GetState{})
		if qerr != nil {
			return pending("credit unknown", errors.Join(err, qerr))
		}
		if st.Received[from] < t.ID {
			refused = true // it has not: give the money back
		}
	}
	if refused {
		if _, rerr := b.request(ctx, from, refundTransfer{ID: t.ID, At: at}); rerr != nil {
			return pending("refund not recorded", rerr)
		}
		return &transferError{what: what + " refunded", kind: ErrRefunded, err: err}
	}
	if _, err := b.request(ctx, from, settleTransfer{ID: t.ID, At: at}); err != nil {
		return pending("credited, settlement not recorded", err)
	}
	return nil
}

// transferError is the error of a transfer refunded or left pending: it
// matches its kind (ErrRefunded, ErrPending) and wraps its cause.
type transferError struct {
	what string
	kind error
	err  error
}

func (e *transferError) Error() string   { return e.what + ": " + e.err.Error() }
func (e *transferError) Unwrap() []error { return []error{e.kind, e.err} }

// Close stops the account actors, waiting for them until ctx ends, and
// stops following their supervisor. The journal and snapshot store stay
// open: close them after.
func (b *Bank) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	accounts := make([]*account, 0, len(b.accounts))
	for _, a := range b.accounts {
		accounts = append(accounts, a)
	}
	b.mu.Unlock()
	var errs []error
	for _, a := range accounts {
		select {
		case <-a.ref.Done(): // stopped by its supervisor
		default:
			if err := a.ref.Stop(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

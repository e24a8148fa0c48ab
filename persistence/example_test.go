package persistence_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/persistence"
)

// An account: its state, its commands and its events.
type Account struct {
	Balance int64
	Ops     int
}

type (
	Deposit  struct{ Amount int64 }
	Withdraw struct{ Amount int64 }
)

type (
	Deposited struct{ Amount int64 }
	Withdrawn struct{ Amount int64 }
)

// AccountEvent is the type of the account's events: each knows how it
// changes the state.
type AccountEvent interface{ apply(Account) Account }

func (e Deposited) apply(a Account) Account { return Account{a.Balance + e.Amount, a.Ops + 1} }
func (e Withdrawn) apply(a Account) Account { return Account{a.Balance - e.Amount, a.Ops + 1} }

var ErrInsufficientFunds = errors.New("insufficient funds")

// handleAccount decides: it checks a command against the state and returns
// the events that record it. It changes nothing itself.
func handleAccount(s Account, cmd any) ([]AccountEvent, any, error) {
	switch c := cmd.(type) {
	case Deposit:
		if c.Amount <= 0 {
			return nil, nil, fmt.Errorf("deposit of %d: must be positive", c.Amount)
		}
		return []AccountEvent{Deposited{c.Amount}}, nil, nil
	case Withdraw:
		if c.Amount > s.Balance {
			return nil, nil, fmt.Errorf("withdraw %d of %d: %w", c.Amount, s.Balance, ErrInsufficientFunds)
		}
		return []AccountEvent{Withdrawn{c.Amount}}, nil, nil
	}
	return nil, nil, fmt.Errorf("%T is not an account command", cmd)
}

func accountEvents() *persistence.Registry {
	return persistence.NewRegistry().
		Register("deposited", Deposited{}).
		Register("withdrawn", Withdrawn{})
}

// An application spawns an event-sourced account on a System: no topology.
// Each command's events are durable in the journal before they change the
// state and before the reply. A second actor with the same persistence id
// (after a restart, or on a new System reading the same store) recovers the
// state from the journal.
func ExampleEventSourced() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{Name: "bank"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sys.Stop(ctx)

	journal := persistence.NewMemoryJournal() // or persistence.NewBoltJournal(sys.DB())
	behavior := persistence.Behavior[Account, any, AccountEvent]{
		ID:            "account-42",
		Journal:       journal,
		Snapshots:     persistence.NewMemorySnapshotStore(),
		Events:        accountEvents(),
		Handle:        handleAccount,
		Apply:         func(s Account, e AccountEvent) Account { return e.apply(s) },
		SnapshotEvery: 100,
	}
	account, err := persistence.EventSourced(behavior)
	if err != nil {
		fmt.Println(err)
		return
	}
	ref, err := sys.Spawn("account-42", account)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, cmd := range []any{Deposit{100}, Withdraw{30}, Withdraw{500}} {
		state, err := actors.Ask[Account](ctx, ref, cmd) // the new state, typed
		if errors.Is(err, ErrInsufficientFunds) {        // a rejected command is an error
			fmt.Printf("%T%v rejected: %v\n", cmd, cmd, err)
			continue
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%T%v -> %+v\n", cmd, cmd, state)
	}
	_ = ref.Stop(ctx)

	// The same persistence id, spawned again, recovers its state.
	again, err := sys.Spawn("account-42-again", account)
	if err != nil {
		fmt.Println(err)
		return
	}
	state, err := again.Request(ctx, persistence.GetState{})
	if err != nil {
		fmt.Println(err)
		return
	}
	seq, _ := journal.HighestSeq(ctx, "account-42")
	fmt.Printf("recovered %+v at seq %d\n", state, seq)
	// Output:
	// persistence_test.Deposit{100} -> {Balance:100 Ops:1}
	// persistence_test.Withdraw{30} -> {Balance:70 Ops:2}
	// persistence_test.Withdraw{500} rejected: withdraw 500 of 70: insufficient funds
	// recovered {Balance:70 Ops:2} at seq 2
}

// Snapshots with retention: a snapshot every 2 events, the newest 2 kept,
// and the events the oldest kept snapshot covers deleted. A second actor
// recovers an older state: the newest snapshot at or below seq 3, then the
// events up to 3; it is read only.
func ExampleBehavior_snapshotRetention() {
	ctx := context.Background()
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sys.Stop(ctx)
	journal, snapshots := persistence.NewMemoryJournal(), persistence.NewMemorySnapshotStore()
	behavior := persistence.Behavior[Account, any, AccountEvent]{
		ID: "account-7", Journal: journal, Snapshots: snapshots, Events: accountEvents(),
		Handle:        handleAccount,
		Apply:         func(s Account, e AccountEvent) Account { return e.apply(s) },
		SnapshotEvery: 2, KeepSnapshots: 2, DeleteEventsOnSnapshot: true,
	}
	account, err := persistence.EventSourced(behavior)
	if err != nil {
		fmt.Println(err)
		return
	}
	ref, err := sys.Spawn("account-7", account)
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := int64(1); i <= 6; i++ {
		if _, err := actors.Ask[Account](ctx, ref, Deposit{i}); err != nil {
			fmt.Println(err)
			return
		}
	}
	// The actor replies, then snapshots: a question it answers after the
	// last deposit's turn ends waits for that snapshot and its retention.
	if _, err := actors.Ask[Account](ctx, ref, persistence.GetState{}); err != nil {
		fmt.Println(err)
		return
	}
	for _, seq := range []uint64{2, 4, 6} {
		if s, ok, _ := snapshots.Select(ctx, "account-7", persistence.SnapshotCriteria{MaxSeq: seq}); ok {
			fmt.Printf("newest snapshot at or below %d: seq %d\n", seq, s.Seq)
		} else {
			fmt.Printf("newest snapshot at or below %d: none\n", seq)
		}
	}
	var first uint64
	_ = journal.Replay(ctx, "account-7", 1, 100, 1, func(e persistence.Event) error { first = e.Seq; return nil })
	fmt.Println("first event in the journal:", first)

	behavior.RecoverTo = persistence.SnapshotCriteria{MaxSeq: 5}
	past, _ := persistence.EventSourced(behavior)
	old, err := sys.Spawn("account-7-at-5", past)
	if err != nil {
		fmt.Println(err)
		return
	}
	state, err := actors.Ask[Account](ctx, old, persistence.GetState{})
	fmt.Printf("state at seq 5: %+v, %v\n", state, err)
	_, err = old.Request(ctx, Deposit{1})
	fmt.Println(errors.Is(err, persistence.ErrRecoveredToPast))
	// Output:
	// newest snapshot at or below 2: none
	// newest snapshot at or below 4: seq 4
	// newest snapshot at or below 6: seq 6
	// first event in the journal: 5
	// state at seq 5: {Balance:15 Ops:5}, <nil>
	// true
}

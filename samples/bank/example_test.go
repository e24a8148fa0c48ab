package bank_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/samples/bank"
)

// A bank on a System's store file, without a topology: accounts recover
// from their snapshot and journal on a new System.
func ExampleBank() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "bank-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "bank.db")
	at := bank.Epoch

	for life := 1; life <= 2; life++ {
		sys, err := actors.NewSystem(actors.Config{Store: path})
		if err != nil {
			fmt.Println(err)
			return
		}
		db, err := sys.DB()
		if err != nil {
			fmt.Println(err)
			return
		}
		journal, err := persistence.NewBoltJournal(db)
		if err != nil {
			fmt.Println(err)
			return
		}
		snapshots, err := persistence.NewBoltSnapshotStore(db)
		if err != nil {
			fmt.Println(err)
			return
		}
		b, err := bank.NewBank(sys, bank.Config{Journal: journal, Snapshots: snapshots, SnapshotEvery: 2})
		if err != nil {
			fmt.Println(err)
			return
		}
		if life == 1 {
			_, _ = b.Open(ctx, "alice", 10_000, at)
			_, _ = b.Open(ctx, "bob", 0, at)
			_, err = b.Withdraw(ctx, "alice", 20_000, at)
			fmt.Println(err, "| refused:", errors.Is(err, bank.ErrRefused))
			fmt.Println(b.Transfer(ctx, "alice", "bob", 2_500, at))
			err = b.Transfer(ctx, "alice", "carol", 1_000, at) // carol has no account
			fmt.Println(err, "| refunded:", errors.Is(err, bank.ErrRefunded))
		} else {
			for _, id := range []string{"alice", "bob"} {
				a, err := b.Account(ctx, id)
				fmt.Printf("%s: %d cents, %d events (recovered: %v)\n", id, a.Balance, a.History, err == nil)
			}
		}
		// Stop the accounts, then the journal, then the system.
		if err := errors.Join(b.Close(ctx), journal.Close(), sys.Stop(ctx)); err != nil {
			fmt.Println(err)
			return
		}
	}
	// Output:
	// bank: account "alice": withdraw 20000 cents from a balance of 10000: insufficient funds | refused: true
	// <nil>
	// bank: transfer 2 of "alice" (1000 cents to "carol") refunded: bank: account "carol": receive transfer 2 of "alice" (1000 cents): account not open | refunded: true
	// alice: 7500 cents, 5 events (recovered: true)
	// bob: 2500 cents, 2 events (recovered: true)
}

// Run runs a workload of random operations, recovers the bank on a new
// system, and agrees with Expected, which replays the same operations on a
// plain map.
func ExampleRun() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "bank-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	w := bank.Workload{Accounts: 10, Ops: 200, Seed: 42, Initial: 10_000}
	res, err := bank.Run(ctx, filepath.Join(dir, "bank.db"), w, 10)
	if err != nil {
		fmt.Println(err)
		return
	}
	want := bank.Expected(w)
	fmt.Printf("%d operations, %d refused (%d refunded), total %s cents\n", w.Ops, res.Refused, res.Refunded, bank.Cents(res.Total()))
	fmt.Printf("recovered from %d snapshots + %d of %d events\n", res.Snapshots, res.Replayed, res.Events)
	fmt.Println("equal to the direct computation:", maps.Equal(res.Balances, want.Balances) && res.Refused == want.Refused)
	// Output:
	// 200 operations, 62 refused (2 refunded), total 114 949 cents
	// recovered from 10 snapshots + 38 of 238 events
	// equal to the direct computation: true
}

package mailboxtest_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/mailbox/mailboxtest"
)

type reading struct{ V int }

// A spill whose disk is full: the group's records are counted as dropped
// (ReasonUnspillable) and the error, which names the queue and the store
// file, goes to OnError as well as to Sync's caller.
func ExampleFaultySpill() {
	dir, _ := os.MkdirTemp("", "mailboxtest")
	defer os.RemoveAll(dir)
	st, err := mailbox.OpenSpillStore(filepath.Join(dir, "spill.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()

	faults := mailboxtest.NewFaultySpill()
	var reported error
	cfg := mailbox.Spill(1, mailbox.SpillOptions{Store: st, Queue: "readings",
		Codec: mailbox.NewTypeCodec().Register("reading", reading{}), WrapIO: faults.Wrap})
	cfg.OnError = func(err error) { reported = err }
	mb, err := mailbox.New(cfg) // not started: nothing takes messages out
	if err != nil {
		fmt.Println(err)
		return
	}
	for v := range 3 {
		_ = mb.TryPut(reading{v}) // one in memory, two spilled
	}
	faults.FailCommits(syscall.ENOSPC)
	err = mb.Sync()
	fmt.Println("ENOSPC:", errors.Is(err, syscall.ENOSPC), "reported:", reported != nil)
	st2 := mb.Stats()
	fmt.Println("unspillable:", st2.Dropped[mailbox.ReasonUnspillable], "in memory:", st2.Depth, "pending:", st2.SpillPending)
	fmt.Printf("%+v\n", faults.Counts())
	// Output:
	// ENOSPC: true reported: true
	// unspillable: 2 in memory: 1 pending: 0
	// {Commits:1 Loads:0 FailedCommits:1 FailedLoads:0 Corrupted:0}
}

package persisttest_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/persistence/persisttest"
	"github.com/sluicehq/sluice/supervision"
)

// A journal that fails on demand: the next write, or every write once a
// number of payload bytes has been written (a full disk).
func ExampleFaultyJournal() {
	ctx := context.Background()
	j := persisttest.NewFaultyJournal(nil) // wraps a new persistence.MemoryJournal

	j.FailNextWrite(syscall.EIO)
	err := j.Append(ctx, "orders", []persistence.Event{{Seq: 1, Type: "placed", Data: []byte{0x80}}})
	fmt.Println(err)
	fmt.Println("EIO:", errors.Is(err, syscall.EIO))

	j.FailAfterBytes(1, syscall.ENOSPC) // room for one byte of payload
	fmt.Println(j.Append(ctx, "orders", []persistence.Event{{Seq: 1, Type: "placed", Data: []byte{0x80}}}))
	fmt.Println(j.Append(ctx, "orders", []persistence.Event{{Seq: 2, Type: "placed", Data: []byte{0x80}}}))

	fmt.Printf("%+v\n", j.Counts())
	// Output:
	// persisttest: journal "orders": append: injected fault: input/output error
	// EIO: true
	// <nil>
	// persisttest: journal "orders": append: byte limit reached (1/1 used): injected fault: no space left on device
	// {Writes:3 Reads:0 FailedWrites:2 FailedReads:0 Corrupted:0 BytesWritten:1}
}

// An event-sourced actor whose journal returns a corrupt event cannot
// recover: it fails with a *persistence.RecoveryError that names the event,
// which its supervisor receives.
func ExampleFaults_CorruptNextRead() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sys.Stop(ctx)

	type added struct{ N int }
	j := persisttest.NewFaultyJournal(nil)
	behavior := persistence.Behavior[int, int, added]{
		ID:      "counter",
		Journal: j,
		Events:  persistence.NewRegistry().Register("added", added{}),
		Handle:  func(_ int, n int) ([]added, any, error) { return []added{{n}}, nil, nil },
		Apply:   func(total int, e added) int { return total + e.N },
	}
	producer, err := persistence.EventSourced(behavior)
	if err != nil {
		fmt.Println(err)
		return
	}
	failures := make(chan error, 1)
	strategy, _ := supervision.NewStrategy(supervision.WithDecider(func(err error) supervision.Directive {
		failures <- err
		return supervision.Stop
	}))

	first, _ := sys.Spawn("first", producer)
	for n := 1; n <= 3; n++ {
		_, _ = first.Request(ctx, n)
	}
	_ = first.Stop(ctx)

	j.CorruptNextRead() // the first event replayed comes back corrupt
	if _, err := sys.Spawn("second", producer, actors.Supervise(strategy)); err != nil {
		fmt.Println(err)
		return
	}
	err = <-failures
	var re *persistence.RecoveryError
	fmt.Println("recovery error:", errors.As(err, &re), "at seq", re.Seq, "decode:", errors.Is(err, persistence.ErrDecode))
	// Output: recovery error: true at seq 1 decode: true
}

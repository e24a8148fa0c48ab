package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/persistence"
)

// The journal benchmark's account: its state, command and event.
type (
	benchAccount   struct{ Balance, Ops int64 }
	benchDeposit   struct{ Amount int64 }
	benchDeposited struct{ Amount int64 }
)

func benchRegistry() *persistence.Registry {
	return persistence.NewRegistry().Register("deposited", benchDeposited{})
}

// benchJournal measures the bbolt journal in files in a temporary directory,
// with real fsyncs: persisted events/s with group commit (many appenders,
// one event per Append) against one bbolt transaction per event under the
// same load, and the recovery time of an event-sourced actor whose journal
// holds 1M events with a snapshot every 10k.
func benchJournal(ctx context.Context, e *env) ([]Result, error) {
	dir, err := os.MkdirTemp("", "sluice-journal-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	data, err := msgpack.Marshal(benchDeposited{Amount: 12345})
	if err != nil {
		return nil, err
	}
	file := 0
	next := func() string { file++; return filepath.Join(dir, fmt.Sprintf("j%d.db", file)) }

	var out []Result
	// One transaction per event, as context: under the load of the
	// 64-appender case.
	const baseAppenders = 64
	nBase := e.n(1_500)
	perTx, err := best(e.rounds, nBase, func() (time.Duration, error) {
		return appendPerTransaction(next(), baseAppenders, nBase, data)
	})
	if err != nil {
		return nil, err
	}
	out = append(out, Result{Name: "journal/context-tx-per-event-64", Value: perTx, Unit: "events/s",
		Note: fmt.Sprintf("%d appenders, one bbolt Update (fsync) per event, %d events", baseAppenders, nBase)})
	for _, c := range []struct{ appenders, events int }{{64, 100_000}, {1024, 400_000}} {
		appenders, n := c.appenders, e.n(c.events)
		batched, err := best(e.rounds, n, func() (time.Duration, error) {
			return appendDBBatch(next(), appenders, n, data)
		})
		if err != nil {
			return nil, err
		}
		base := Result{Name: fmt.Sprintf("journal/base-bbolt-batch-%d", appenders), Value: batched, Unit: "events/s",
			Note: fmt.Sprintf("%d goroutines, one db.Batch call per event (bbolt's group commit, defaults), %d events", appenders, n)}
		var stats persistence.JournalStats
		grouped, err := best(e.rounds, n, func() (time.Duration, error) {
			d, st, err := appendGrouped(ctx, next(), appenders, n, data)
			stats = st
			return d, err
		})
		if err != nil {
			return nil, err
		}
		out = append(out, base, Result{Name: fmt.Sprintf("journal/group-commit-%d-vs-bbolt-batch", appenders), Value: grouped, Unit: "events/s",
			Note: fmt.Sprintf("%d appenders (one id each), 1 event per Append, %d events, until Close; %.0f events per fsync'd commit, %d log compactions (aim >= 1.0x)",
				appenders, n, float64(stats.Events)/float64(max(stats.Commits, 1)), stats.Compactions)}.against(base))
	}

	// Recovery: 1M events less one, so that the newest snapshot (every 10k)
	// is at 990,000 and the tail to replay is the longest: 9,999 events.
	events := max(e.n(1_000_000)-1, 2)
	every := max(1, e.n(10_000))
	path := filepath.Join(dir, "recovery.db")
	balance, build, err := buildRecoveryJournal(ctx, path, events, every)
	if err != nil {
		return nil, err
	}
	var recovery time.Duration = -1
	for range e.rounds {
		d, err := recoverAccount(ctx, path, events, balance, every)
		if err != nil {
			return nil, err
		}
		if recovery < 0 || d < recovery {
			recovery = d
		}
	}
	tail := events % every
	out = append(out, Result{Name: "journal/recovery-1M", Value: float64(recovery.Microseconds()) / 1000, Unit: "ms",
		Note: fmt.Sprintf("%d events, snapshot every %d: newest snapshot + %d events replayed, spawn to first reply (page cache warm); built in %s",
			events, every, tail, build.Round(time.Millisecond))})
	return out, nil
}

// appendGrouped runs appenders goroutines, each appending its share of n
// events to its own persistence id, one event per Append, and returns the
// time until every Append has returned (every event durable) and the
// journal has closed (the rest of its log compacted: no work left behind).
func appendGrouped(ctx context.Context, path string, appenders, n int, data []byte) (time.Duration, persistence.JournalStats, error) {
	s, err := persistence.Open(path)
	if err != nil {
		return 0, persistence.JournalStats{}, err
	}
	defer s.Close()
	j := s.Journal()
	now := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, appenders)
	start := time.Now()
	for a := range appenders {
		share := n / appenders
		if a < n%appenders {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("acct-%d", a)
			ev := []persistence.Event{{Type: "deposited", Data: data, Time: now}}
			for seq := 1; seq <= share; seq++ {
				ev[0].Seq = uint64(seq)
				if err := j.Append(ctx, id, ev); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := j.Close(); err != nil {
		return 0, persistence.JournalStats{}, err
	}
	d := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, persistence.JournalStats{}, err
	}
	st := j.Stats()
	if st.Events != uint64(n) {
		return 0, st, fmt.Errorf("group commit: %d events committed, want %d", st.Events, n)
	}
	return d, st, nil
}

// appendPerTransaction is the same load written the plain way: each event
// in a bbolt Update of its own (the event, and the highest sequence
// number), one fsync each.
func appendPerTransaction(path string, appenders, n int, data []byte) (time.Duration, error) {
	return appendBolt(path, appenders, n, data, false)
}

// appendDBBatch is the same load through bbolt's own group commit,
// db.Batch (its defaults: up to 1000 calls or 10 ms per transaction), with
// the same concurrent writers: the fair baseline of the journal's group
// commit. It counts the events in the file afterwards.
func appendDBBatch(path string, appenders, n int, data []byte) (time.Duration, error) {
	return appendBolt(path, appenders, n, data, true)
}

func appendBolt(path string, appenders, n int, data []byte, batch bool) (time.Duration, error) {
	s, err := persistence.Open(path) // the same store file format
	if err != nil {
		return 0, err
	}
	defer s.Close()
	db := s.DB()
	var wg sync.WaitGroup
	errs := make(chan error, appenders)
	start := time.Now()
	for a := range appenders {
		share := n / appenders
		if a < n%appenders {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := []byte(fmt.Sprintf("acct-%d", a))
			for seq := 1; seq <= share; seq++ {
				key := binary.BigEndian.AppendUint64(nil, uint64(seq))
				write := db.Update
				if batch {
					write = db.Batch
				}
				if err := write(func(tx *bolt.Tx) error {
					root, err := tx.CreateBucketIfNotExists([]byte("bench"))
					if err != nil {
						return err
					}
					b, err := root.CreateBucketIfNotExists(id)
					if err != nil {
						return err
					}
					if b.Get(key) != nil {
						return errors.New("seq conflict")
					}
					if err := b.Put(key, data); err != nil {
						return err
					}
					return root.Put(append(id, 0), key)
				}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	d := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	stored := 0
	if err := db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("bench")).ForEachBucket(func(k []byte) error {
			stored += tx.Bucket([]byte("bench")).Bucket(k).Stats().KeyN
			return nil
		})
	}); err != nil {
		return 0, err
	}
	if stored != n {
		return 0, fmt.Errorf("bbolt: %d events stored, want %d", stored, n)
	}
	return d, nil
}

// buildRecoveryJournal writes events deposits of 1..events to the journal
// of "acct", with a snapshot every every events, and returns the balance.
func buildRecoveryJournal(ctx context.Context, path string, events, every int) (int64, time.Duration, error) {
	start := time.Now()
	s, err := persistence.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer s.Close()
	reg := benchRegistry()
	var st benchAccount
	batch := make([]persistence.Event, 0, every)
	now := time.Now()
	for seq := 1; seq <= events; seq++ {
		ev := benchDeposited{Amount: int64(seq)}
		typ, data, err := reg.Encode(ev)
		if err != nil {
			return 0, 0, err
		}
		batch = append(batch, persistence.Event{Seq: uint64(seq), Type: typ, Data: data, Time: now})
		st = benchAccount{st.Balance + ev.Amount, st.Ops + 1}
		if seq%every == 0 || seq == events {
			if err := s.Journal().Append(ctx, "acct", batch); err != nil {
				return 0, 0, err
			}
			batch = batch[:0]
		}
		if seq%every == 0 {
			snap, err := msgpack.Marshal(st)
			if err != nil {
				return 0, 0, err
			}
			// Older snapshots go, as the event-sourced actor does it.
			if err := s.Snapshots().Save(ctx, "acct", persistence.Snapshot{Seq: uint64(seq), Data: snap, Time: now}); err != nil {
				return 0, 0, err
			}
			if err := s.Snapshots().DeleteTo(ctx, "acct", uint64(seq-1)); err != nil {
				return 0, 0, err
			}
		}
	}
	return st.Balance, time.Since(start), nil
}

// recoverAccount opens the store on a new System and times an event-sourced
// account from its spawn to its first reply, which follows its recovery.
func recoverAccount(ctx context.Context, path string, events int, balance int64, every int) (time.Duration, error) {
	sys, err := actors.NewSystem(actors.Config{Name: "recovery", Store: path})
	if err != nil {
		return 0, err
	}
	defer sys.Stop(ctx)
	db, err := sys.DB()
	if err != nil {
		return 0, err
	}
	j, err := persistence.NewBoltJournal(db)
	if err != nil {
		return 0, err
	}
	defer j.Close()
	snaps, err := persistence.NewBoltSnapshotStore(db)
	if err != nil {
		return 0, err
	}
	var applied int64
	p, err := persistence.EventSourced(persistence.Behavior[benchAccount, benchDeposit, benchDeposited]{
		ID: "acct", Journal: j, Snapshots: snaps, Events: benchRegistry(), SnapshotEvery: uint64(every),
		Handle: func(_ benchAccount, d benchDeposit) ([]benchDeposited, any, error) {
			return []benchDeposited{{d.Amount}}, nil, nil
		},
		Apply: func(s benchAccount, d benchDeposited) benchAccount {
			applied++
			return benchAccount{s.Balance + d.Amount, s.Ops + 1}
		},
	})
	if err != nil {
		return 0, err
	}
	runtime.GC()
	start := time.Now()
	ref, err := sys.Spawn("acct", p)
	if err != nil {
		return 0, err
	}
	reply, err := ref.Request(ctx, persistence.GetState{})
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	st, ok := reply.(benchAccount)
	if !ok || st.Balance != balance || st.Ops != int64(events) {
		return 0, fmt.Errorf("recovered %+v, want balance %d after %d events", reply, balance, events)
	}
	if want := int64(events % every); applied != want {
		return 0, fmt.Errorf("recovery replayed %d events, want %d after the newest snapshot", applied, want)
	}
	return d, nil
}

package persistence_test

import (
	"context"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/persistence/persisttest"
)

// TestMain fails the package when a test leaves a goroutine behind: every
// journal's writer must have stopped, every actor system shut down.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor's dead-letter throttle outlives its system by design.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	)
}

// openStore opens a store file in t.TempDir, closed at the end of the test.
func openStore(t *testing.T) *persistence.Store {
	t.Helper()
	s, err := persistence.Open(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestMemoryJournal(t *testing.T) {
	persisttest.TestJournal(t, func(t *testing.T) persistence.Journal { return persistence.NewMemoryJournal() })
}

func TestBoltJournal(t *testing.T) {
	persisttest.TestJournal(t, func(t *testing.T) persistence.Journal { return openStore(t).Journal() })
}

func TestMemorySnapshotStore(t *testing.T) {
	persisttest.TestSnapshotStore(t, func(t *testing.T) persistence.SnapshotStore { return persistence.NewMemorySnapshotStore() })
}

func TestBoltSnapshotStore(t *testing.T) {
	persisttest.TestSnapshotStore(t, func(t *testing.T) persistence.SnapshotStore { return openStore(t).Snapshots() })
}

func TestMemoryCheckpointStore(t *testing.T) {
	persisttest.TestCheckpointStore(t, func(t *testing.T) persistence.CheckpointStore { return persistence.NewMemoryCheckpointStore() })
}

func TestBoltCheckpointStore(t *testing.T) {
	persisttest.TestCheckpointStore(t, func(t *testing.T) persistence.CheckpointStore { return openStore(t).Checkpoints() })
}

func TestCheckpointClear(t *testing.T) {
	ctx := context.Background()
	bolt, err := persistence.Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	for name, s := range map[string]persistence.CheckpointStore{"memory": persistence.NewMemoryCheckpointStore(), "bolt": bolt.Checkpoints()} {
		t.Run(name, func(t *testing.T) {
			if err := s.Clear(ctx, "never-ran"); err != nil {
				t.Fatalf("Clear of an unknown job: %v", err)
			}
			if err := s.Complete(ctx, "job", persistence.Checkpoint{ID: 5, States: map[string][]byte{"a/0": {1}}}); err != nil {
				t.Fatal(err)
			}
			if err := s.Clear(ctx, "job"); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := s.Latest(ctx, "job"); ok || err != nil {
				t.Fatalf("Latest after Clear = %v, %v; want none", ok, err)
			}
			if err := s.Complete(ctx, "job", persistence.Checkpoint{ID: 1}); err != nil {
				t.Fatalf("a new run's first checkpoint after Clear: %v", err)
			}
		})
	}
}

package workers

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitFor receives from ch or fails after a deadline.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
		panic("unreachable")
	}
}

// goid is an identity of the calling goroutine: the address of a stack
// variable is not one, so the goroutine's header line of its stack trace.
func goid() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	for i := len("goroutine "); i < len(b); i++ {
		if b[i] == ' ' {
			return string(b[:i])
		}
	}
	return string(b)
}

func TestIdleWorkerIsReused(t *testing.T) {
	p := New(300, 2)
	idle := make(chan struct{}, 8)
	p.onIdle = func() { idle <- struct{}{} }
	ran := make(chan string, 8)
	p.Schedule(func() { ran <- goid() })
	first := waitFor(t, ran, "first run")
	waitFor(t, idle, "idle worker")
	// The worker is about to wait; it may not be receiving yet, in which
	// case Schedule starts another: repeat until one run lands on it.
	reused := false
	for range 100 {
		p.Schedule(func() { ran <- goid() })
		if waitFor(t, ran, "run") == first {
			reused = true
			break
		}
		waitFor(t, idle, "idle worker")
	}
	if !reused {
		t.Fatal("no scheduled function ran on the idle worker in 100 tries")
	}
	p.Stop()
	p.Wait()
}

func TestEveryScheduledFunctionRuns(t *testing.T) {
	p := New(300, 3)
	const n = 10_000
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := make(map[int]int, n)
	wg.Add(n)
	for i := range n {
		p.Schedule(func() {
			mu.Lock()
			seen[i]++
			mu.Unlock()
			wg.Done()
		})
	}
	wg.Wait()
	for i := range n {
		if seen[i] != 1 {
			t.Fatalf("function %d ran %d times", i, seen[i])
		}
	}
	p.Stop()
	p.Wait()
}

func TestIdleWorkersBounded(t *testing.T) {
	const maxIdle = 2
	p := New(300, maxIdle)
	release := make(chan struct{})
	started := make(chan struct{}, 8)
	var done sync.WaitGroup
	done.Add(8)
	for range 8 { // 8 at once: 8 workers
		p.Schedule(func() { started <- struct{}{}; <-release; done.Done() })
	}
	for range 8 {
		waitFor(t, started, "start")
	}
	close(release)
	done.Wait()
	// 6 of the 8 end at once; Stop ends the 2 left idle, and Wait returns.
	if got := p.Idle(); got > maxIdle {
		t.Fatalf("%d idle workers, want at most %d", got, maxIdle)
	}
	p.Stop()
	p.Wait()
	if got := p.Idle(); got != 0 {
		t.Fatalf("%d idle workers after Stop", got)
	}
}

func TestScheduleAfterStopRuns(t *testing.T) {
	p := New(300, 1)
	p.Stop()
	ran := make(chan struct{})
	p.Schedule(func() { close(ran) })
	waitFor(t, ran, "run after Stop")
	p.Wait() // its goroutine ends after it
	p.Stop() // idempotent
}

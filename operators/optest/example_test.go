package optest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/operators/optest"
)

// exampleT stands in for the *testing.T of a real test.
type exampleT struct{ testing.TB }

func (exampleT) Helper()                      {}
func (exampleT) Name() string                 { return "Example" }
func (exampleT) Cleanup(func())               {}
func (exampleT) Errorf(f string, args ...any) { fmt.Printf(f+"\n", args...) }
func (exampleT) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

// A windowed count tested through a checkpoint, a crash and a restore.
// In a test, pass the test's *testing.T; the harness stops with the test.
func Example() {
	var t testing.TB = exampleT{}
	h := optest.New(t, func(in operators.Stream[string]) operators.Stream[operators.Windowed[string, int64]] {
		byWord := operators.KeyBy(in, "by-word", func(w string) string { return w })
		return operators.WindowCount(byWord, "count", operators.Tumbling(time.Minute))
	})
	defer h.Close()
	h.PushAt("go", time.Unix(10, 0))
	h.PushAt("go", time.Unix(20, 0))
	h.Checkpoint()
	h.PushAt("go", time.Unix(30, 0)) // after the checkpoint: read again after the crash
	h = h.Restart()
	h.Watermark(time.Unix(60, 0))
	for _, w := range h.WaitOutput(1) {
		fmt.Printf("%s [%ds, %ds): %d\n", w.Key, w.Start.Unix(), w.End.Unix(), w.Value)
	}
	// Output: go [0s, 60s): 3
}

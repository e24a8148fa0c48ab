package operators_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
)

// A job with checkpoints writes its output exactly once with File. Started
// afresh on a file that already holds something (a previous run's output),
// it refuses to destroy it, unless given FileOverwrite.
func ExampleFileOverwrite() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "numbers.txt")
	if err := os.WriteFile(path, []byte("a previous run's output\n"), 0o600); err != nil {
		panic(err)
	}
	sys, err := actors.NewSystem(actors.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer sys.Stop(ctx)

	job := func(opts ...operators.FileOption) error {
		t := operators.NewTopology("numbers", operators.Checkpoints(time.Second))
		src := operators.Source(t, "numbers", operators.Generate(3, func(i int64) int64 { return i }))
		operators.Sink(src, "file", operators.File(path, func(v int64) string { return strconv.FormatInt(v, 10) }, opts...))
		run, err := sys.Run(ctx, t)
		if err != nil {
			return err
		}
		return run.Wait(ctx)
	}
	fmt.Println("refused:", errors.Is(job(), operators.ErrFileNotEmpty))
	if err := job(operators.FileOverwrite()); err != nil {
		panic(err)
	}
	out, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	fmt.Print(string(out))
	// Output:
	// refused: true
	// 0
	// 1
	// 2
}

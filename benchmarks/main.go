// Command benchmarks measures sluice against baselines measured in the same
// run (a hand-written loop, plain Go channels, raw protoactor-go) and prints
// one result a line, or one JSON object a line with -json.
//
//	go run ./benchmarks                  # every benchmark
//	go run ./benchmarks -run pipeline    # those whose name matches
//	go run ./benchmarks -run pipeline -json
//
// Results are throughputs; a result that has a baseline also reports the
// ratio value/baseline, so that figures from different machines compare.
// See RESULTS.md for recorded runs.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"runtime"
	"time"
)

// Result is one measured figure.
type Result struct {
	Name          string  `json:"name"`
	Value         float64 `json:"value"`
	Unit          string  `json:"unit"`
	Baseline      string  `json:"baseline,omitempty"`
	BaselineValue float64 `json:"baseline_value,omitempty"`
	Ratio         float64 `json:"ratio,omitempty"`
	Note          string  `json:"note,omitempty"`
}

// against fills in r's baseline from b.
func (r Result) against(b Result) Result {
	r.Baseline, r.BaselineValue = b.Name, b.Value
	if b.Value != 0 {
		r.Ratio = r.Value / b.Value
	}
	return r
}

// benchmark is one named group of measurements.
type benchmark struct {
	name string
	desc string
	run  func(ctx context.Context, env *env) ([]Result, error)
}

// env is what every benchmark gets: its scale and a logger.
type env struct {
	scale  float64 // multiplies the default record counts
	rounds int     // repetitions; the best round counts
	log    *slog.Logger
}

func (e *env) n(base int) int { return max(1, int(float64(base)*e.scale)) }

// suite lists every benchmark, in the order they run.
func suite() []benchmark {
	return []benchmark{
		{"pipeline", "4-stage stateless pipeline: source -> map -> filter -> sink", benchPipeline},
		{"hop", "one actor hop: sluice Block mailbox vs protoactor's default", benchHop},
		{"overload", "10M messages into a 10x slower consumer, each policy in its own process: peak RSS", benchOverload},
		{"spill", "spill-to-bbolt path vs in-memory mailbox", benchSpill},
		{"checkpoint", "keyed count with checkpoints every second vs none", benchCheckpoint},
		{"checkpoint-unaligned", "a 10x slower consumer under Block back-pressure: unaligned (and aligned) checkpoints every second vs none", benchUnaligned},
		{"checkpoint-ingress", "durable ingress into a checkpointed keyed count vs the durable spill path", benchIngress},
		{"tracing", "unfused pipeline: no telemetry vs tracing off, 1 % and 100 % sampled", benchTracing},
		{"journal", "bbolt journal: group commit vs a transaction per event; recovery of a 1M-event journal", benchJournal},
		{"nexmark", "Nexmark q0-q9, q11 on the live generator: events/s per core vs Flink 1.11's published figures", benchNexmark},
		{"connectors", "JetStream -> topology -> PostgreSQL (exactly-once) vs a plain nats.go consumer feeding pgx COPY", benchConnectors},
		{"remote", "one hop between two nodes on loopback: sluice codec vs raw protoactor remote vs an in-process hop", benchRemote},
	}
}

func main() {
	var (
		runPat = flag.String("run", "", "run only the benchmarks whose name matches this regular expression")
		asJSON = flag.Bool("json", false, "print one JSON object per result per line")
		scale  = flag.Float64("scale", 1, "multiply the record counts (smaller is quicker and noisier)")
		rounds = flag.Int("rounds", 3, "repetitions of each measurement; the best counts")
		list   = flag.Bool("list", false, "list the benchmarks and exit")
		child  = flag.String("child", "", "internal: run one case of a benchmark in this process")
		ccase  = flag.String("child-case", "", "internal: the child's case")
		cn     = flag.Int64("child-n", 0, "internal: the child's message count")
		cburn  = flag.Int("child-burn", 0, "internal: the child consumer's work per message")
	)
	flag.Parse()
	if *child != "" {
		if err := overloadChild(*ccase, *cn, *cburn); err != nil {
			fmt.Fprintln(os.Stderr, "benchmarks child:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*runPat, *asJSON, *scale, *rounds, *list); err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks:", err)
		os.Exit(1)
	}
}

func run(pat string, asJSON bool, scale float64, rounds int, list bool) error {
	re, err := regexp.Compile(pat)
	if err != nil {
		return fmt.Errorf("-run %q: %w", pat, err)
	}
	if scale <= 0 || rounds < 1 {
		return fmt.Errorf("-scale must be > 0 and -rounds >= 1")
	}
	e := &env{scale: scale, rounds: rounds, log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	ctx := context.Background()
	if !asJSON {
		fmt.Printf("# %s/%s, %d CPUs, %s\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	}
	matched := 0
	for _, b := range suite() {
		if !re.MatchString(b.name) {
			continue
		}
		matched++
		if list {
			fmt.Printf("%-12s %s\n", b.name, b.desc)
			continue
		}
		start := time.Now()
		res, err := b.run(ctx, e)
		if err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		for _, r := range res {
			if asJSON {
				line, _ := json.Marshal(r)
				fmt.Println(string(line))
				continue
			}
			fmt.Printf("%-40s %14.0f %-10s", r.Name, r.Value, r.Unit)
			if r.Baseline != "" {
				fmt.Printf("  %.2fx %s", r.Ratio, r.Baseline)
			}
			if r.Note != "" {
				fmt.Printf("  (%s)", r.Note)
			}
			fmt.Println()
		}
		if !asJSON {
			fmt.Printf("# %s took %s\n", b.name, time.Since(start).Round(time.Millisecond))
		}
	}
	if matched == 0 {
		return fmt.Errorf("no benchmark matches %q", pat)
	}
	return nil
}

// best runs f rounds times and returns the highest throughput in records/s.
func best(rounds, n int, f func() (time.Duration, error)) (float64, error) {
	var top float64
	for range rounds {
		runtime.GC()
		d, err := f()
		if err != nil {
			return 0, err
		}
		if v := float64(n) / d.Seconds(); v > top {
			top = v
		}
	}
	return top, nil
}

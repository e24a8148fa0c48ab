// Command benchmarks measures sluice against fair baselines measured in the
// same run, on the same records: a hand-written loop; Go channels and raw
// protoactor-go carrying the same batches as sluice, with the same records
// in flight; bbolt's own db.Batch with the same writers; protoactor's
// bounded mailboxes; each Nexmark query's single-goroutine model. It prints
// one result a line, or one JSON object a line with -json.
//
//	go run ./benchmarks                  # every benchmark
//	go run ./benchmarks -list            # what each measures, and its aim
//	go run ./benchmarks -run pipeline    # those whose name matches
//	go run ./benchmarks -run pipeline -json
//
// Baselines are named .../base-...; a result compared with one is named
// ...-vs-<baseline> and reports the ratio value/baseline, so that figures
// from different machines compare. Figures named .../context-... are for
// context only (one record per message, published figures). See RESULTS.md
// for recorded runs.
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
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/actors"
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

// spread adds spreadNote(ratios) to r's note.
func (r Result) spread(ratios []float64) Result {
	r.Note += spreadNote(ratios)
	return r
}

// benchmark is one named group of measurements.
type benchmark struct {
	name string
	desc string // what it measures: the workload and its sizes at -scale 1
	aim  string // what it is for: the ratios it should reach
	run  func(ctx context.Context, env *env) ([]Result, error)
}

// env is what every benchmark gets: its scale and a logger.
type env struct {
	scale    float64        // multiplies the default record counts
	rounds   int            // repetitions; the best round counts
	skipSlow bool           // leave out the context-only figures (one record per message)
	cases    *regexp.Regexp // -cases: the cases of a benchmark to run (nil: all; the checkpoint benchmark's and nexmark's queries)
	log      *slog.Logger
}

func (e *env) n(base int) int { return max(1, int(float64(base)*e.scale)) }

// roundsTimes multiplies -rounds for the benchmarks whose rounds take a
// few seconds: the best of more rounds is steadier on a machine whose
// speed swings by a fifth within minutes (session 21), and costs them
// seconds, not the minutes more rounds would cost the long ones.
var roundsTimes = map[string]int{"pipeline": 3, "hop": 3, "remote-topology": 3}

// suite lists every benchmark, in the order they run.
func suite() []benchmark {
	return []benchmark{
		{"pipeline",
			"source -> map -> filter -> sink over 20 M int64 records, best of 3x -rounds rounds (each round runs every case once): sluice fused (one actor) and unfused (an actor per stage, " +
				"batches of 256, 4096 credits per edge) against a hand-written loop, a goroutine per stage joined by chan []int64 carrying the same " +
				"batches with the same records in flight, and raw protoactor-go with one batch per message (each baseline allocating a fresh array per batch " +
				"and handing arrays back to its source, as sluice hands its own back; protoactor also with its Bounded(16) mailboxes, the same records in flight; " +
				"the fastest counting); as context, the unfused pipeline with batches of 1024 " +
				"(operators.BatchSize) against channels carrying 1024, one record per send/message, and the floor of an actor per stage (protoactor actors on sluice's " +
				"mailbox and worker pool doing the stages' loops and nothing else, no flow control) against the channels and sluice",
			"unfused >= 0.8x batched channels and >= 1.0x protoactor with batches; fused >= 0.5x the loop", benchPipeline},
		{"hop",
			"one sender -> one receiver, best of 3x -rounds rounds (each round runs every case once): 5 M messages by the embedded actor's Ref.Send into Block(1024) against protoactor's default mailbox (one " +
				"message each), and 20 M records by a topology hop (batches of 256 with credits) against two goroutines joined by chan []int64 of the same batches " +
				"and in-flight records, and against protoactor carrying one batch per message (each allocating and recycling its arrays, the faster counting); " +
				"as context, the hop with batches of 1024 against channels carrying 1024",
			"Ref.Send >= 1.0x protoactor default; topology hop >= 0.8x batched channels", benchHop},
		{"overload",
			"10 M messages into a consumer about 10x slower than the producer (its slowness measured and printed: producer rate / consumer rate), one " +
				"child process per case: peak RSS of protoactor unbounded, Bounded(1024), BoundedDropping(1024) and sluice Block, DropOldest, Spill",
			"each sluice policy's peak RSS <= protoactor Bounded(1024)'s + 16 MiB", benchOverload},
		{"spill", "1 M messages through Spill(1024) (embedded actor) and 20 M records through Spill(4096) (topology edge), consumer held until the " +
			"producer is done, against mailboxes big enough for everything", "edge spill >= 0.3x the edge in memory", benchSpill},
		{"checkpoint", "keyed count (2 instances) over 1 000 keys, over 1 M keys (memory backend with a changelog), and over 1 M keys back-pressured by a slow consumer: checkpoints every second into bbolt against none, each run sized to last >= 20 s (at least 30 M records); checkpoint p50/p99/max duration and bytes written per checkpoint",
			"with checkpoints >= 0.9x without; with 1 M keys, checkpoint p99 <= 500 ms", benchCheckpoint},
		{"checkpoint-unaligned", "keyed count with a consumer about 10x slower than the source, Block back-pressure: unaligned and aligned (rotated rounds, median of their ratios) " +
			"checkpoints every second against none; then 1 M records with the count's input spilling and unaligned checkpoints every 500 ms, and the same job under Block",
			"unaligned >= 0.9x none; with Spill >= 5 checkpoints while the spill holds >= 100 k records, p99 <= 1 s", benchUnaligned},
		{"checkpoint-ingress", "an app's SendBatch (4096, durable when it returns) through the durable ingress into a checkpointed keyed count " +
			"against the same records through a Spill mailbox into a store of its own (fsynced per 4096-message group)",
			"ingress >= 0.8x the spill path", benchIngress},
		{"latency", "unfused 4-stage pipeline: latency measured (the default, one batch in 8 timed) and every batch timed (LatencyEvery(1)) against NoLatencyStats, rotating rounds",
			"measurement costs <= 3 % throughput", benchLatency},
		{"tracing", "unfused 4-stage pipeline over 10 M records, per-record tracing: no telemetry (no provider) against an SDK tracer (spans to a " +
			"discarding exporter) with TraceRatio 0 (off) and 1 % of records (a span per operator for each); rotated rounds, medians of their ratios",
			"off >= 0.99x no telemetry; 1 % >= 0.95x no telemetry", benchTracing},
		{"tracing-json", "the tracing benchmark over 1 M records with a service's work per record: the map decodes a 150-byte JSON bid " +
			"(encoding/json) in every case; what a sampled record's spans cost against work of that size",
			"context: the same 1 % sampling beside work of about a microsecond a record", benchTracingJSON},
		{"journal", "bbolt journal with real fsyncs: group commit (64 and 1024 concurrent appenders, one event per Append) against bbolt's own " +
			"db.Batch with the same writers (and one db.Update per event as context); recovery of a 1 M-event journal with a snapshot every 10 k",
			"group commit >= 1.0x db.Batch with the same writers; recovery <= 200 ms", benchJournal},
		{"nexmark", "Nexmark q0-q9, q11 on 2 M pre-generated events held in memory: sluice (2 source instances, parallelism 2) against each " +
			"query's single-goroutine reference model on the same events (best of -rounds, the model run in each round beside sluice's), every output checked against its model; the same events replayed in " +
			"laps (ids and times shifted, about 4 s a run, 3 rotated rounds) without checkpoints, with checkpoints every second into a bbolt store " +
			"(memory state written whole), and the same with the memory state's changelog (incremental), each run's result count checked; as " +
			"context, checkpoints every tenth of a 2 M-event run; Flink 1.11 figures as context",
			"every query >= 0.5x its model (2 cores against one goroutine); with checkpoints every second >= 0.9x without", benchNexmark},
		{"connectors", "200 k messages: JetStream -> topology -> PostgreSQL (exactly-once) against a plain nats.go consumer feeding pgx COPY",
			"context: the cost of exactly-once", benchConnectors},
		{"remote", "300 k records over one hop between two nodes on loopback: sluice codec against raw protoactor remote and an in-process hop",
			"context", benchRemote},
		{"remote-topology", "5 M int64 records through a job source -> map -> sink whose map runs on a second node (two nodes on loopback, in this process): " +
			"every record crosses twice in batches of 256 with credits, against raw protoactor remote carrying the same batches (256 varints per message, " +
			"the same map, 32 batches in flight end to end; sluice 16 per edge, 32 on the two); best of 3x -rounds rounds, the two alternated in each round",
			"sluice >= 0.8x raw protoactor with the same batches; >= 2.7 M records/s (10x the 272 k/s of one record per message)", benchRemoteTopology},
		{"state-backends", "source -> map -> KeyBy -> Count (1000 keys) -> sink over 10 M records, checkpoints every second: the memory and the disk (pebble) state backend, alternated rounds",
			"disk >= 0.5x memory", benchStateBackends},
		{"state-incremental", "a disk state table and a memory table with a changelog of 10 M keys each, 1 % of them changed between checkpoints: incremental checkpoints' new bytes and time against a full one, and recovery",
			"incremental <= 3 % of the full bytes and <= 10 % of its time; recovery <= 5 s", benchStateIncremental},
		{"state-large", "a keyed count over 50 M distinct keys (60 M records) with the disk backend, in a child process of its own under GOMEMLIMIT=256MiB (its peak RSS is its own)",
			"peak RSS <= 512 MiB, counts equal to the reference", benchStateLarge},
	}
}

func main() {
	// The overload benchmark runs each case in a child process of this
	// binary; the child's flags are not the command's, so they stay out of -h.
	if len(os.Args) > 1 && os.Args[1] == childFlag {
		if err := childMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "benchmarks child:", err)
			os.Exit(1)
		}
		return
	}
	var (
		runPat  = flag.String("run", "", "run only the benchmarks whose name matches this regular expression")
		asJSON  = flag.Bool("json", false, "print one JSON object per result per line")
		scale   = flag.Float64("scale", 1, "multiply the record counts (smaller is quicker and noisier)")
		rounds  = flag.Int("rounds", 3, "repetitions of each measurement; the best counts")
		list    = flag.Bool("list", false, "list the benchmarks, what each measures and its aim, and exit")
		withCtx = flag.Bool("context", true, "also measure the context-only figures (one record per channel send or actor message: slow)")
		cpuProf = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (for profiling, not for recorded figures)")
		cases   = flag.String("cases", "", "run only the cases whose name matches this regular expression (the checkpoint benchmark's, e.g. 1m-keys; nexmark's queries, e.g. '^q9$')")
	)
	flag.Parse()
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchmarks: -cpuprofile:", err)
			os.Exit(1)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if err := run(*runPat, *cases, *asJSON, *scale, *rounds, *list, !*withCtx); err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// childFlag, as the first argument, runs one case of a benchmark in this
// process (see benchOverload).
const childFlag = "-internal-child"

func childMain(args []string) error {
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	ccase := fs.String("case", "", "")
	cn := fs.Int64("n", 0, "")
	cburn := fs.Int("burn", 0, "")
	cscale := fs.Float64("scale", 1, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ccase == stateLargeCase {
		return stateLargeChild(*cscale)
	}
	return overloadChild(*ccase, *cn, *cburn)
}

func run(pat, cases string, asJSON bool, scale float64, rounds int, list, skipSlow bool) error {
	re, err := regexp.Compile(pat)
	if err != nil {
		return fmt.Errorf("-run %q: %w", pat, err)
	}
	cre, err := regexp.Compile(cases)
	if err != nil {
		return fmt.Errorf("-cases %q: %w", cases, err)
	}
	if scale <= 0 || rounds < 1 {
		return fmt.Errorf("-scale must be > 0 and -rounds >= 1")
	}
	e := &env{scale: scale, rounds: rounds, skipSlow: skipSlow, cases: cre, log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	ctx := context.Background()
	machine := fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	if !asJSON {
		fmt.Printf("# %s, load average %s\n", machine, loadAvg())
		defer func() { fmt.Printf("# load average at the end %s\n", loadAvg()) }()
	}
	matched := 0
	for _, b := range suite() {
		if !re.MatchString(b.name) {
			continue
		}
		matched++
		if list {
			fmt.Printf("%s\n  measures: %s\n  aim: %s\n", b.name, b.desc, b.aim)
			continue
		}
		if !asJSON {
			fmt.Printf("## %s\n# measures: %s\n# aim: %s\n", b.name, b.desc, b.aim)
		}
		start, startLoad := time.Now(), loadAvg()
		be := *e
		be.rounds = rounds * max(1, roundsTimes[b.name])
		res, err := b.run(ctx, &be)
		if err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		if asJSON { // the JSON lines carry what the text's comment lines say
			res = append(res, Result{Name: b.name + "/run", Value: time.Since(start).Seconds(), Unit: "s",
				Note: fmt.Sprintf("%s; load average at the start %s, at the end %s; -scale %g -rounds %d (%d rounds here)", machine, startLoad, loadAvg(), scale, rounds, be.rounds)})
		}
		for _, r := range res {
			if asJSON {
				line, _ := json.Marshal(r)
				fmt.Println(string(line))
				continue
			}
			fmt.Printf("%-48s %14.0f %-10s", r.Name, r.Value, r.Unit)
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
	rate, _, err := bestCPU(rounds, n, f)
	return rate, err
}

// bestCPU is best, with the process's CPU time in the best round: what
// the round cost beside how long it took (its CPU ÷ wall time is how many
// of the machine's cores it kept busy).
func bestCPU(rounds, n int, f func() (time.Duration, error)) (rate float64, cpu time.Duration, err error) {
	b, err := interleaved(rounds, []timedCase{{n, f}})
	if err != nil {
		return 0, 0, err
	}
	return b[0].rate, b[0].cpu, nil
}

// timedCase is one case of a comparison: a run of n records (or
// messages) that returns the time it measured.
type timedCase struct {
	n int
	f func() (time.Duration, error)
}

// bestRound is a case's best round: its rate, and the process's CPU time
// in that round; rates is every round's rate, in the order they ran.
type bestRound struct {
	rate  float64
	cpu   time.Duration
	rates []float64
}

// roundRatios is num's rate ÷ the faster of dens' rates, round by round:
// each ratio compares runs made in the same round, seconds apart, where a
// ratio of best rounds may pair rounds minutes apart on a machine whose
// speed drifts.
func roundRatios(num bestRound, dens ...bestRound) []float64 {
	var out []float64
	for r, v := range num.rates {
		var d float64
		for _, den := range dens {
			if r < len(den.rates) {
				d = max(d, den.rates[r])
			}
		}
		if d > 0 {
			out = append(out, v/d)
		}
	}
	return out
}

// spreadNote says how a ratio's rounds spread, as the end of a note: the
// median of the round-by-round ratios, and their least and greatest.
func spreadNote(ratios []float64) string {
	if len(ratios) < 2 {
		return ""
	}
	s := slices.Sorted(slices.Values(ratios))
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return fmt.Sprintf("; round by round (the two runs of a round seconds apart): median %.3f, %.3f-%.3f over %d rounds", m, s[0], s[len(s)-1], len(s))
}

// interleaved runs cases in rounds, each round running every case once
// in order, and returns each case's best round. The cases a ratio compares
// then sample the same states of the machine: a machine that slows down
// or speeds up during the run reaches all of them, not only those measured
// last.
func interleaved(rounds int, cases []timedCase) ([]bestRound, error) {
	out := make([]bestRound, len(cases))
	for range max(rounds, 1) {
		for i, c := range cases {
			runtime.GC()
			c0 := cpuTime()
			d, err := c.f()
			used := cpuTime() - c0
			if err != nil {
				return nil, err
			}
			v := float64(c.n) / d.Seconds()
			if v > out[i].rate {
				out[i].rate, out[i].cpu = v, used
			}
			out[i].rates = append(out[i].rates, v)
		}
	}
	return out, nil
}

// cpuNote says what a best round cost in CPU, nanoseconds a record and the
// cores kept busy on average, as the end of a note ("" for a round that
// did not run).
func cpuNote(n int, rate float64, cpu time.Duration) string {
	if rate <= 0 || n <= 0 {
		return ""
	}
	wall := float64(n) / rate // seconds
	return fmt.Sprintf("; best round: %.1f CPU-ns a record, %.2f cores busy", float64(cpu.Nanoseconds())/float64(n), cpu.Seconds()/wall)
}

// loadAvg is the machine's 1, 5 and 15 minute load averages, "?" where
// unknown: the machine may be shared, and the figures say how much.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// runTimed runs job on sys to its end and returns the run and its wall
// time, from the start of Run to the end of Wait.
func runTimed(ctx context.Context, sys *actors.System, job actors.Job) (*actors.Run, time.Duration, error) {
	start := time.Now()
	run, err := sys.Run(ctx, job)
	if err != nil {
		return nil, 0, err
	}
	err = run.Wait(ctx)
	return run, time.Since(start), err
}

// cpuTime is the process's user and system CPU time so far: on a loaded
// machine it says more about a change than the wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

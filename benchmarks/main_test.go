package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/samples/nexmark"
)

// TestPipelineSmall runs the pipeline benchmark at a tiny scale: every
// variant must compute the right sum (each checks it) and report a ratio.
func TestPipelineSmall(t *testing.T) {
	res, err := benchPipeline(context.Background(), &env{scale: 0.001, rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]Result{}
	for _, r := range res {
		names[r.Name] = r
		if r.Value <= 0 {
			t.Errorf("%s: value %v", r.Name, r.Value)
		}
	}
	for _, n := range []string{"pipeline/base-loop", "pipeline/base-channels-batched", "pipeline/base-protoactor-batched",
		"pipeline/base-channels-batched-recycled", "pipeline/base-protoactor-batched-recycled", "pipeline/base-protoactor-batched-bounded",
		"pipeline/sluice-fused-vs-loop", "pipeline/sluice-unfused-vs-channels-batched", "pipeline/sluice-unfused-vs-protoactor-batched",
		"pipeline/context-channels-per-record", "pipeline/context-protoactor-per-record"} {
		if _, ok := names[n]; !ok {
			t.Errorf("missing result %s", n)
		}
	}
	for name, base := range map[string]string{"pipeline/sluice-fused-vs-loop": "pipeline/base-loop",
		"pipeline/sluice-unfused-vs-channels-batched":   "pipeline/base-channels-batched",
		"pipeline/sluice-unfused-vs-protoactor-batched": "pipeline/base-protoactor-batched"} {
		// The batched baselines count in their fastest configuration:
		// allocating or recycling their arrays (protoactor's also with
		// bounded mailboxes).
		want := names[base]
		for _, other := range []string{base + "-recycled", base + "-bounded"} {
			if o, ok := names[other]; ok && o.Value > want.Value {
				want = o
			}
		}
		if r := names[name]; r.Baseline != want.Name || r.BaselineValue != want.Value || r.Ratio <= 0 {
			t.Errorf("%s lacks its baseline %s: %+v", name, want.Name, r)
		}
	}
}

// TestInterleavedRounds: every round runs each case once, in order (so
// that the cases compared sample the same states of the machine), and each
// case keeps its best round, rate and CPU time together.
func TestInterleavedRounds(t *testing.T) {
	var order []int
	durs := map[int][]time.Duration{0: {4 * time.Second, 2 * time.Second, 3 * time.Second}, 1: {time.Second, 5 * time.Second, 2 * time.Second}}
	caseOf := func(i, n int) timedCase {
		return timedCase{n, func() (time.Duration, error) {
			d := durs[i][len(order)/2]
			order = append(order, i)
			return d, nil
		}}
	}
	got, err := interleaved(3, []timedCase{caseOf(0, 100), caseOf(1, 10)})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 1, 0, 1, 0, 1}; !slices.Equal(order, want) {
		t.Errorf("cases ran in the order %v, want %v", order, want)
	}
	if got[0].rate != 50 || got[1].rate != 10 { // 100 records in 2 s, 10 in 1 s
		t.Errorf("best rates %v and %v, want 50 and 10", got[0].rate, got[1].rate)
	}
	if !slices.Equal(got[0].rates, []float64{25, 50, 100.0 / 3}) || !slices.Equal(got[1].rates, []float64{10, 2, 5}) {
		t.Errorf("rates by round %v and %v, want [25 50 33.3] and [10 2 5]", got[0].rates, got[1].rates)
	}
	_, err = interleaved(3, []timedCase{{1, func() (time.Duration, error) { return 0, errors.New("boom") }}})
	if err == nil || err.Error() != "boom" {
		t.Errorf("a failing case gave %v, want its error", err)
	}
}

// TestRoundRatios: a ratio's rounds pair the runs of one round, against
// the faster baseline of that round, and the note gives their median and
// range.
func TestRoundRatios(t *testing.T) {
	num := bestRound{rates: []float64{8, 9, 6}}
	alloc := bestRound{rates: []float64{10, 9, 12}}
	recycled := bestRound{rates: []float64{5, 10, 10}}
	got := roundRatios(num, alloc, recycled)
	if want := []float64{0.8, 0.9, 0.5}; !slices.Equal(got, want) {
		t.Errorf("round ratios %v, want %v", got, want)
	}
	if s, want := spreadNote(got), "median 0.800, 0.500-0.900 over 3 rounds"; !strings.HasSuffix(s, want) {
		t.Errorf("note %q, want it to end %q", s, want)
	}
	if s, want := spreadNote([]float64{0.5, 0.9, 0.7, 0.6}), "median 0.650, 0.500-0.900 over 4 rounds"; !strings.HasSuffix(s, want) {
		t.Errorf("note %q, want it to end %q", s, want)
	}
	if s := spreadNote([]float64{0.7}); s != "" {
		t.Errorf("one round: note %q, want none", s)
	}
}

// TestHopSmall runs the hop benchmark on a few records: every result is
// there, and each ratio is against the faster configuration of the
// baseline it names.
func TestHopSmall(t *testing.T) {
	res, err := benchHop(context.Background(), &env{scale: 0.001, rounds: 2})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]Result{}
	for _, r := range res {
		names[r.Name] = r
		if r.Value <= 0 {
			t.Errorf("%s: value %v", r.Name, r.Value)
		}
	}
	for name, bases := range map[string][2]string{
		"hop/sluice-block-send-vs-protoactor-default":             {"hop/base-protoactor-default", ""},
		"hop/sluice-topology-vs-channels-batched":                 {"hop/base-channels-batched", "hop/base-channels-batched-recycled"},
		"hop/sluice-topology-vs-protoactor-batched":               {"hop/base-protoactor-batched", "hop/base-protoactor-batched-recycled"},
		"hop/sluice-topology-batch-1024-vs-channels-batched-1024": {"hop/base-channels-batched-1024", "hop/base-channels-batched-1024-recycled"},
	} {
		want, ok := names[bases[0]]
		if !ok {
			t.Errorf("missing result %s", bases[0])
		}
		if rec, ok := names[bases[1]]; ok && rec.Value > want.Value {
			want = rec
		}
		r, ok := names[name]
		if !ok {
			t.Errorf("missing result %s", name)
			continue
		}
		if r.Baseline != want.Name || r.BaselineValue != want.Value || r.Ratio != r.Value/want.Value {
			t.Errorf("%s lacks its baseline %s: %+v", name, want.Name, r)
		}
		// Two rounds: the aims' ratios say how their rounds spread.
		if aim := !strings.Contains(name, "1024"); aim && !strings.Contains(r.Note, "round by round") {
			t.Errorf("%s: no round-by-round ratios in %q", name, r.Note)
		}
	}
}

// TestNexmarkChecksOutput runs the Nexmark benchmark on 100 k events: every
// query's topology output must equal its model's, with and without
// checkpoints (the benchmark fails otherwise), each result names the model
// as its baseline, and each checkpointed result the run without.
func TestNexmarkChecksOutput(t *testing.T) {
	res, err := benchNexmark(context.Background(), &env{scale: 0.05, rounds: 1, log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	compared, frequent, checkpointed := 0, 0, 0
	for _, r := range res {
		if q, ok := strings.CutSuffix(r.Name, "/sluice-vs-model"); ok {
			compared++
			if r.Baseline != q+"/base-model" || r.Ratio <= 0 {
				t.Errorf("%s: baseline %q ratio %v", r.Name, r.Baseline, r.Ratio)
			}
		}
		if q, ok := strings.CutSuffix(r.Name, "/checkpoints-frequent-vs-none"); ok {
			frequent++
			if r.Baseline != q+"/sluice-vs-model" || r.Ratio <= 0 || strings.Contains(r.Note, "[0]") {
				t.Errorf("%s: baseline %q ratio %v, %s", r.Name, r.Baseline, r.Ratio, r.Note)
			}
		}
		if q, ok := strings.CutSuffix(strings.Replace(r.Name, "-changelog", "", 1), "/checkpoints-1s-vs-none"); ok {
			checkpointed++
			if r.Baseline != q+"/long-none" || r.Ratio <= 0 || strings.Contains(r.Note, ": 0 completed") || strings.Contains(r.Note, ": 1 completed") {
				t.Errorf("%s: baseline %q ratio %v, %s", r.Name, r.Baseline, r.Ratio, r.Note)
			}
		}
	}
	if compared != 11 || frequent != 11 || checkpointed != 22 {
		t.Errorf("%d queries compared with their models, %d with frequent checkpoints against without, %d with checkpoints a tenth of a long run against without (memory state whole and with its changelog), want 11, 11 and 22", compared, frequent, checkpointed)
	}
}

// BenchmarkPipelineUnfused is the unfused pipeline alone, for profiling:
// go test -run '^$' -bench PipelineUnfused -cpuprofile cpu.out ./benchmarks
func BenchmarkPipelineUnfused(b *testing.B) {
	const n = 2_000_000
	want := expectedSum(n)
	cpu0 := cpuTime()
	for b.Loop() {
		sum, err := sluicePipeline(context.Background(), n, false)
		if err != nil || sum != want {
			b.Fatalf("sum %d, %v; want %d", sum, err, want)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/(float64(n)*float64(b.N)), "cpu-ns/record")
}

// BenchmarkPipelineFused is the same pipeline fused into one actor, for
// profiling: go test -run '^$' -bench PipelineFused -cpuprofile cpu.out ./benchmarks
func BenchmarkPipelineFused(b *testing.B) {
	const n = 4_000_000
	want := expectedSum(n)
	cpu0 := cpuTime()
	for b.Loop() {
		sum, err := sluicePipeline(context.Background(), n, true)
		if err != nil || sum != want {
			b.Fatalf("sum %d, %v; want %d", sum, err, want)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/(float64(n)*float64(b.N)), "cpu-ns/record")
}

// BenchmarkPipelineLoop is its hand-written loop baseline.
func BenchmarkPipelineLoop(b *testing.B) {
	const n = 4_000_000
	cpu0 := cpuTime()
	for b.Loop() {
		handLoop(n, pipeGen, pipeMap, pipeFilter)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/(float64(n)*float64(b.N)), "cpu-ns/record")
}

// BenchmarkPipelineChannelsBatched is its batched channel baseline.
func BenchmarkPipelineChannelsBatched(b *testing.B) { benchChannelPipeline(b, false) }

// BenchmarkPipelineChannelsRecycled is its batched channel baseline whose
// sink hands arrays back to the source (the faster of the two in the
// recorded runs).
func BenchmarkPipelineChannelsRecycled(b *testing.B) { benchChannelPipeline(b, true) }

func benchChannelPipeline(b *testing.B, recycle bool) {
	const n = 2_000_000
	cpu0 := cpuTime()
	for b.Loop() {
		batchedChannelPipeline(n, benchBatch, benchInFlight/benchBatch, recycle)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/(float64(n)*float64(b.N)), "cpu-ns/record")
}

// BenchmarkTopologyHop is the topology hop alone (source -> sink actor),
// for profiling.
func BenchmarkTopologyHop(b *testing.B) {
	const n = 4_000_000
	ctx := context.Background()
	cpu0 := cpuTime()
	for b.Loop() {
		sys, err := actors.NewSystem(actors.Config{Name: "hop"})
		if err != nil {
			b.Fatal(err)
		}
		var count int64
		t := operators.NewTopology("hop")
		src := operators.Source(t, "src", operators.Generate(int64(n), func(i int64) int64 { return i }))
		operators.Sink(src, "sink", operators.SinkFunc(func(int64) error { count++; return nil }), operators.NoFusion())
		run, err := sys.Run(ctx, t)
		if err != nil {
			b.Fatal(err)
		}
		if err := run.Wait(ctx); err != nil || count != n {
			b.Fatalf("%d of %d, %v", count, n, err)
		}
		sys.Stop(ctx)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/(float64(n)*float64(b.N)), "cpu-ns/record")
}

// BenchmarkRefSend is the embedded actor's Ref.Send into Block(1024), for
// profiling and A/B runs.
func BenchmarkRefSend(b *testing.B) {
	const n = 1_000_000
	ctx := context.Background()
	cpu0 := cpuTime()
	for b.Loop() {
		sys, err := actors.NewSystem(actors.Config{Name: "hop"})
		if err != nil {
			b.Fatal(err)
		}
		c := &counterActor{want: n, done: make(chan struct{})}
		ref, err := sys.Spawn("counter", func() actor.Actor { return c }, actors.Mailbox(mailbox.Block(1024)))
		if err != nil {
			b.Fatal(err)
		}
		for i := int64(0); i < n; i++ {
			if err := ref.Send(ctx, i); err != nil {
				b.Fatal(err)
			}
		}
		<-c.done
		sys.Stop(ctx)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/(float64(n)*float64(b.N)), "cpu-ns/record")
}

// BenchmarkProtoactorSend is BenchmarkRefSend's baseline: root.Send, one
// message each, into protoactor's default mailbox.
func BenchmarkProtoactorSend(b *testing.B) {
	const n = 1_000_000
	cpu0 := cpuTime()
	for b.Loop() {
		sys := quietSystem()
		root := actor.NewRootContext(sys, nil)
		c := &counterActor{want: n, done: make(chan struct{})}
		pid := root.Spawn(actor.PropsFromProducer(func() actor.Actor { return c }))
		for i := int64(0); i < n; i++ {
			root.Send(pid, i)
		}
		<-c.done
		sys.Shutdown()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/(float64(n)*float64(b.N)), "cpu-ns/record")
}

// The JSON variant of the tracing benchmark decodes every record and
// exports the spans of the sampled ones.
func TestTracingJSONSmall(t *testing.T) {
	res, err := benchTracingJSON(context.Background(), &env{scale: 0.02, rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Result{}
	for _, r := range res {
		got[r.Name] = r
	}
	for _, n := range []string{"tracing-json/no-telemetry", "tracing-json/sdk-off", "tracing-json/sdk-1pct"} {
		if got[n].Value <= 0 {
			t.Errorf("%s: value %v (results %v)", n, got[n].Value, res)
		}
	}
	if note := got["tracing-json/sdk-1pct"].Note; !strings.Contains(note, "JSON") || strings.Contains(note, " 0 spans exported") {
		t.Errorf("1 %% note %q: want the JSON work and some spans exported", note)
	}
}

// The checkpoint benchmark runs its three cases and reports, for each, the
// rates, the durations' p99 and the bytes written per checkpoint.
func TestCheckpointSmall(t *testing.T) {
	res, err := benchCheckpoint(context.Background(), &env{scale: 0.01, rounds: 2})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Result{}
	for _, r := range res {
		got[r.Name] = r
	}
	for _, c := range []string{"checkpoint", "checkpoint-1m-keys", "checkpoint-1m-keys-backpressure"} {
		for _, n := range []string{c + "/none", c + "/every-1s"} {
			if got[n].Value <= 0 {
				t.Errorf("%s: value %v (results %v)", n, got[n].Value, res)
			}
		}
		if r := got[c+"/every-1s"]; r.Baseline != c+"/none" || r.Ratio <= 0 || !strings.Contains(r.Note, "p99") {
			t.Errorf("%s: baseline %q ratio %v note %q", c, r.Baseline, r.Ratio, r.Note)
		}
		for _, n := range []string{c + "/every-1s-p99", c + "/every-1s-bytes-per-checkpoint"} {
			if _, ok := got[n]; !ok {
				t.Errorf("no result %s (results %v)", n, res)
			}
		}
	}
	if w := writtenBytes(); w <= 0 {
		t.Errorf("writtenBytes() = %d after runs that wrote stores", w)
	}
}

// TestMain lets the tests run the benchmarks' child processes: the test
// binary is their executable (os.Executable), as the command's is.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == childFlag {
		if err := childMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "benchmarks child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// state-large runs in a child process under GOMEMLIMIT and reports the
// child's own rate and peak RSS (its counts checked there).
func TestStateLargeChild(t *testing.T) {
	res, err := benchStateLarge(context.Background(), &env{scale: 0.0004, rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Result{}
	for _, r := range res {
		got[r.Name] = r
	}
	if r := got["state-large/disk-count"]; r.Value <= 0 || !strings.Contains(r.Note, "GOMEMLIMIT=256MiB") || !strings.Contains(r.Note, "20000 distinct keys") {
		t.Errorf("disk-count: %+v", r)
	}
	if r := got["state-large/peak-rss"]; r.Value <= 0 {
		t.Errorf("peak-rss: %+v", r)
	}
}

// BenchmarkStateBackends is the state-backends job (source -> map -> KeyBy
// -> Count over 1000 keys -> sink, checkpoints every second) with each
// backend, for profiling and A/B runs:
// go test -run '^$' -bench StateBackends/disk -cpuprofile cpu.out ./benchmarks
func BenchmarkStateBackends(b *testing.B) {
	const n = 4_000_000
	for _, disk := range []bool{false, true} {
		name := "memory"
		if disk {
			name = "disk"
		}
		b.Run(name, func(b *testing.B) {
			cpu0 := cpuTime()
			for b.Loop() {
				if _, err := stateBackendRun(context.Background(), n, disk); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(cpuTime()-cpu0)/(float64(n)*float64(b.N)), "cpu-ns/record")
		})
	}
}

// TestLappedShiftsEveryLap reads three laps of a few events through two
// partitions, one reopened at its offset midway: every event appears once
// per lap, with its ids and times raised by the lap's strides (q2's
// auction skip divides the id stride), and nothing in evs changes.
func TestLappedShiftsEveryLap(t *testing.T) {
	evs := []nexmark.Event{
		{Person: &nexmark.Person{ID: 1000, DateTime: 5_000}},
		{Auction: &nexmark.Auction{ID: 1000, Seller: 1000, DateTime: 6_000, Expires: 9_000}},
		{Bid: &nexmark.Bid{Auction: 1000, Bidder: 1000, DateTime: 7_000}},
	}
	src := lapped(evs, 3, 123).(lapSource)
	if src.idStride%123 != 0 || src.idStride <= 1000 || src.timeStride <= 9_000-5_000 {
		t.Fatalf("strides %d, %d", src.idStride, src.timeStride)
	}
	var got []nexmark.Event
	for part := range 2 {
		r, err := src.Open(context.Background(), part, 2, 0)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]nexmark.Event, 2)
		for {
			k, err := r.Read(buf)
			got = append(got, buf[:k]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			// Reopen at the offset: the reader goes on where it was.
			if r, err = src.Open(context.Background(), part, 2, r.Offset()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(got) != 9 {
		t.Fatalf("%d events, want 9", len(got))
	}
	seen := map[[2]int64]int{}
	for _, ev := range got {
		var id int64
		switch {
		case ev.Person != nil:
			id = ev.Person.ID
		case ev.Auction != nil:
			id = ev.Auction.ID
			if ev.Auction.Seller != id || ev.Auction.Expires-ev.Auction.DateTime != 3_000 {
				t.Errorf("auction %+v: seller or expiry not shifted with it", *ev.Auction)
			}
		case ev.Bid != nil:
			id = ev.Bid.Auction
			if ev.Bid.Bidder != id {
				t.Errorf("bid %+v: bidder not shifted with it", *ev.Bid)
			}
		}
		lap := (id - 1000) / src.idStride
		if id != 1000+lap*src.idStride {
			t.Errorf("event %v: id %d is not 1000 shifted by whole laps", ev, id)
		}
		seen[[2]int64{lap, ev.Time() - lap*src.timeStride}]++
	}
	for lap := range int64(3) {
		for _, ev := range evs {
			if seen[[2]int64{lap, ev.Time()}] != 1 {
				t.Errorf("lap %d: event at %d seen %d times", lap, ev.Time(), seen[[2]int64{lap, ev.Time()}])
			}
		}
	}
	if evs[0].Person.ID != 1000 || evs[1].Auction.DateTime != 6_000 || evs[2].Bid.Bidder != 1000 {
		t.Errorf("evs changed: %+v %+v %+v", *evs[0].Person, *evs[1].Auction, *evs[2].Bid)
	}
}

package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
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
		"pipeline/sluice-fused-vs-loop", "pipeline/sluice-unfused-vs-channels-batched", "pipeline/sluice-unfused-vs-protoactor-batched",
		"pipeline/context-channels-per-record", "pipeline/context-protoactor-per-record"} {
		if _, ok := names[n]; !ok {
			t.Errorf("missing result %s", n)
		}
	}
	for name, base := range map[string]string{"pipeline/sluice-fused-vs-loop": "pipeline/base-loop",
		"pipeline/sluice-unfused-vs-channels-batched":   "pipeline/base-channels-batched",
		"pipeline/sluice-unfused-vs-protoactor-batched": "pipeline/base-protoactor-batched"} {
		if r := names[name]; r.Baseline != base || r.Ratio <= 0 {
			t.Errorf("%s lacks its baseline %s: %+v", name, base, r)
		}
	}
}

// TestNexmarkChecksOutput runs the Nexmark benchmark on 100 k events: every
// query's topology output must equal its model's (the benchmark fails
// otherwise), and each result names the model as its baseline.
func TestNexmarkChecksOutput(t *testing.T) {
	res, err := benchNexmark(context.Background(), &env{scale: 0.05, rounds: 1, log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	compared := 0
	for _, r := range res {
		if q, ok := strings.CutSuffix(r.Name, "/sluice-vs-model"); ok {
			compared++
			if r.Baseline != q+"/base-model" || r.Ratio <= 0 {
				t.Errorf("%s: baseline %q ratio %v", r.Name, r.Baseline, r.Ratio)
			}
		}
	}
	if compared != 11 {
		t.Errorf("%d queries compared with their models, want 11", compared)
	}
}

// BenchmarkPipelineUnfused is the unfused pipeline alone, for profiling:
// go test -run '^$' -bench PipelineUnfused -cpuprofile cpu.out ./benchmarks
func BenchmarkPipelineUnfused(b *testing.B) {
	const n = 2_000_000
	want := expectedSum(n)
	for b.Loop() {
		sum, err := sluicePipeline(context.Background(), n, false)
		if err != nil || sum != want {
			b.Fatalf("sum %d, %v; want %d", sum, err, want)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkPipelineChannelsBatched is its batched channel baseline.
func BenchmarkPipelineChannelsBatched(b *testing.B) {
	const n = 2_000_000
	for b.Loop() {
		batchedChannelPipeline(n, benchBatch, benchInFlight/benchBatch)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

package main

import (
	"context"
	"testing"
)

// TestPipelineSmall runs the pipeline benchmark at a tiny scale: every
// variant must compute the right sum (each checks it) and report a ratio.
func TestPipelineSmall(t *testing.T) {
	res, err := benchPipeline(context.Background(), &env{scale: 0.001, rounds: 1, log: nil})
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
	for _, n := range []string{"pipeline/loop", "pipeline/channels", "pipeline/protoactor-chain", "pipeline/sluice-fused", "pipeline/sluice-unfused"} {
		if _, ok := names[n]; !ok {
			t.Errorf("missing result %s", n)
		}
	}
	if r := names["pipeline/sluice-fused"]; r.Baseline != "pipeline/loop" || r.Ratio <= 0 {
		t.Errorf("fused result lacks its baseline: %+v", r)
	}
}

package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/telemetry/jaegertest"
)

func execute(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRoot(&out, &errb)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

func TestRunWordcount(t *testing.T) {
	out, errOut, err := execute(t, "run", "wordcount", "--lines", "5000", "--top", "3", "--progress", "1ms")
	if err != nil {
		t.Fatalf("run wordcount: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, "distinct; top 3:") || strings.Count(out, "\n") != 4 {
		t.Errorf("unexpected report:\n%s", out)
	}
	// Piped stderr: plain progress lines naming every operator.
	if !strings.Contains(errOut, "lines ") || !strings.Contains(errOut, "collect ") || strings.Contains(errOut, "\r") {
		t.Errorf("progress output:\n%q", errOut)
	}
}

func TestPlan(t *testing.T) {
	out, _, err := execute(t, "plan", "wordcount", "--parallelism", "3")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"lines(source) -> split(flatmap)  [fused]", "x3  count(count) -> collect(sink)", `hash via "by-word"`} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
}

func TestSamplesAndUnknown(t *testing.T) {
	out, _, err := execute(t, "samples")
	if err != nil || !strings.Contains(out, "wordcount") {
		t.Fatalf("samples: %v\n%s", err, out)
	}
	if _, _, err := execute(t, "run", "nope"); err == nil || !strings.Contains(err.Error(), "valid: ") || !strings.Contains(err.Error(), "wordcount") {
		t.Fatalf("run nope: %v, want an error listing the samples", err)
	}
	if _, _, err := execute(t, "run", "wordcount", "--parallelism", "0"); err == nil || !strings.Contains(err.Error(), "parallelism 0") {
		t.Fatalf("run with parallelism 0: %v, want an invalid-parallelism error", err)
	}
}

// The sampling flags are checked before anything starts.
func TestTraceFlags(t *testing.T) {
	for _, args := range [][]string{{"--trace-key", "the"}, {"--trace-ratio", "0.5"}, {"--trace", "--trace-ratio", "2"},
		{"--trace-parent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, {"--trace", "--trace-parent", "00-nothex-01"}} {
		out, _, err := execute(t, append([]string{"run", "wordcount", "--lines", "10"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "--trace") || out != "" {
			t.Errorf("run %v: %v (output %q), want an error naming the flag", args, err, out)
		}
	}
}

// --trace with nothing listening fails before the job starts and says how
// to start a Jaeger.
func TestTraceWithoutJaeger(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close() // a port on which nothing listens now
	out, _, err := execute(t, "run", "wordcount", "--lines", "100", "--trace", "--trace-endpoint", closed)
	if err == nil || !strings.Contains(err.Error(), "start a Jaeger") || !strings.Contains(err.Error(), "tools/jaeger/start.sh") {
		t.Fatalf("run --trace without Jaeger: %v, want an error saying how to start one", err)
	}
	if out != "" {
		t.Errorf("the job ran anyway: %q", out)
	}
}

// --trace-parent puts the job's span, sluice.run, into the caller's trace
// in the real Jaeger, as a child of the caller's span; the records keep
// traces of their own.
func TestTraceParentFlagInJaeger(t *testing.T) {
	j := jaegertest.Start(t)
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	_, errOut, err := execute(t, "run", "wordcount", "--lines", "20", "--progress", "0", "--trace", "--trace-ratio", "1",
		"--trace-endpoint", j.OTLPGRPC, "--trace-parent", "00-"+tid+"-"+sid+"-01")
	if err != nil {
		t.Fatalf("run --trace-parent: %v\n%s", err, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var caller, records int
	_, err = j.WaitTraces(ctx, "sluice-wordcount", func(trs []jaegertest.Trace) bool {
		caller, records = 0, 0
		for _, tr := range trs {
			if tr.TraceID != tid {
				if _, ok := tr.Span("sluice.run"); !ok {
					records++
				}
				continue
			}
			run, ok := tr.Span("sluice.run")
			if ok && len(tr.Spans) == 1 && len(run.References) == 1 && run.References[0].RefType == jaegertest.ChildOf &&
				run.References[0].SpanID == sid {
				caller++
			}
		}
		return caller == 1 && records > 0
	})
	if err != nil {
		t.Fatalf("want the caller's trace %s holding one sluice.run span, child of %s, and the records' traces apart: "+
			"%d such traces, %d record traces: %v", tid, sid, caller, records, err)
	}
}

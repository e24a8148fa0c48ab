package main

import (
	"strings"
	"testing"
)

// --metrics with a port alone binds 127.0.0.1, as --ui does; a
// non-loopback address is served with a warning.
func TestRunMetricsFlag(t *testing.T) {
	_, errOut, err := execute(t, "run", "wordcount", "--lines", "200", "--progress", "0", "--metrics", ":0")
	if err != nil {
		t.Fatalf("run --metrics :0: %v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "metrics at http://127.0.0.1:") || strings.Contains(errOut, "warning") {
		t.Fatalf("--metrics :0: stderr %q, want metrics on 127.0.0.1 and no warning", errOut)
	}
	_, errOut, err = execute(t, "run", "wordcount", "--lines", "200", "--progress", "0", "--metrics", "0.0.0.0:0")
	if err != nil {
		t.Fatalf("run --metrics 0.0.0.0:0: %v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "warning: --metrics 0.0.0.0:0 is reachable beyond this machine") {
		t.Fatalf("--metrics 0.0.0.0:0: stderr %q, want a warning", errOut)
	}
}

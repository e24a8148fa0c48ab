package operators_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestOptionFamilies builds programs that pass an option to an operator it
// does not apply to (testdata/misused) and expects each to fail to compile,
// naming the option family the operator takes.
func TestOptionFamilies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goCmd); err != nil {
		if goCmd, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command")
		}
	}
	for dir, want := range map[string]string{
		"ttlonmap":      "operators.TTLOption does not implement operators.MapOption",
		"retryonsource": "operators.RecordFailureOption does not implement operators.SourceOption",
		"emitonwindow":  "operators.EmitOption does not implement operators.WindowOption",
	} {
		t.Run(dir, func(t *testing.T) {
			cmd := exec.Command(goCmd, "build", "-o", os.DevNull, "./testdata/misused/"+dir)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("testdata/misused/%s compiled; want: %s", dir, want)
			}
			if !strings.Contains(string(out), want) {
				t.Fatalf("go build testdata/misused/%s: %v\n%s\nwant an error saying %q", dir, err, out, want)
			}
		})
	}
}

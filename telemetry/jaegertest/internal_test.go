package jaegertest

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// toolsDir is tools/jaeger, seen from this package's directory (where go
// test runs its tests).
var toolsDir = filepath.Join("..", "..", "tools", "jaeger")

// TestConfigMatchesTools: the template rendered with the usual ports is
// tools/jaeger/config.yaml, comments aside.
func TestConfigMatchesTools(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(toolsDir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := renderConfig(defaultPorts)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := yamlLines(string(got)), yamlLines(string(want)); g != w {
		t.Errorf("configTemplate and tools/jaeger/config.yaml differ:\ntemplate:\n%s\nconfig.yaml:\n%s", g, w)
	}
	if strings.Contains(string(got), "0.0.0.0") || strings.Contains(string(got), "localhost") {
		t.Errorf("config listens beyond 127.0.0.1:\n%s", got)
	}
}

func yamlLines(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(l); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// TestVersionMatchesTools: the cached binary is named after the Jaeger that
// tools/jaeger/go.mod pins.
func TestVersionMatchesTools(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join(toolsDir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/jaegertracing/jaeger (v\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("tools/jaeger/go.mod does not require github.com/jaegertracing/jaeger")
	}
	if got := string(m[1]); got != Version {
		t.Errorf("tools/jaeger/go.mod pins jaeger %s, Version is %s", got, Version)
	}
}

func TestBinaryPath(t *testing.T) {
	t.Setenv(EnvBin, "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	t.Setenv("HOME", "/home/u")
	if got, want := BinaryPath(), "/xdg/sluice/jaeger-"+Version; got != want {
		t.Errorf("with XDG_CACHE_HOME: %q, want %q", got, want)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	if got, want := BinaryPath(), "/home/u/.cache/sluice/jaeger-"+Version; got != want {
		t.Errorf("with HOME: %q, want %q", got, want)
	}
	t.Setenv(EnvBin, "/opt/jaeger")
	if got, want := BinaryPath(), "/opt/jaeger"; got != want {
		t.Errorf("with %s: %q, want %q", EnvBin, got, want)
	}
}

func TestMissingBinary(t *testing.T) {
	err := errors.New("no Jaeger binary at /x")
	for _, tc := range []struct {
		require string
		fail    bool
	}{
		{"", false},
		{"0", false},
		{"false", false},
		{"1", true},
		{"true", true},
		{"yes", true}, // not a boolean: a typo must not silently skip
	} {
		fail, msg := missingBinary(err, tc.require)
		if fail != tc.fail {
			t.Errorf("%s=%q: fail = %v, want %v (%s)", EnvRequire, tc.require, fail, tc.fail, msg)
		}
		if !strings.Contains(msg, "/x") || !strings.Contains(msg, "tools/jaeger/build.sh") {
			t.Errorf("%s=%q: message %q does not say where and how", EnvRequire, tc.require, msg)
		}
	}
}

// TestStartSkipsWithoutBinary runs Start against a path with nothing there.
func TestStartSkipsWithoutBinary(t *testing.T) {
	t.Setenv(EnvBin, filepath.Join(t.TempDir(), "absent"))
	t.Setenv(EnvRequire, "")
	var skipped bool
	t.Run("start", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		Start(t)
		t.Error("Start returned without a binary")
	})
	if !skipped {
		t.Error("Start did not skip the test")
	}
}

// TestLaunchReportsEarlyExit: a binary that exits at once is an error with
// its log, not a wait for the deadline, and not taken for a port clash.
func TestLaunchReportsEarlyExit(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fake-jaeger")
	script := "#!/bin/sh\necho \"fake jaeger: bad config $*\" >&2\nexit 3\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	j, err := launch(bin, t.TempDir(), 1)
	if err == nil {
		j.terminate()
		t.Fatal("launch succeeded with a binary that exits at once")
	}
	if errors.Is(err, errPortTaken) {
		t.Errorf("taken for a port clash: %v", err)
	}
	for _, want := range []string{"exited before it was ready", "exit status 3", "fake jaeger: bad config --config"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
}

func FuzzDecodeTraces(f *testing.F) {
	f.Add([]byte(`{"data":[{"traceID":"01","spans":[{"traceID":"01","spanID":"02","operationName":"op",` +
		`"references":[{"refType":"CHILD_OF","traceID":"01","spanID":"03"}],"tags":[{"key":"k","type":"int64","value":9007199254740993}],` +
		`"processID":"p1"}],"processes":{"p1":{"serviceName":"s"}}}],"errors":null}`))
	f.Add([]byte(`{"data":null,"errors":[{"code":400,"msg":"bad"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		traces, err := decodeTraces("s", b)
		if err != nil && traces != nil {
			t.Fatalf("traces %v with error %v", traces, err)
		}
	})
}

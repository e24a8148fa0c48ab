// Package jaegertest runs a real Jaeger for tests: a child process with
// in-memory storage, an OTLP receiver and the query HTTP API, every listener
// on a free port of 127.0.0.1.
//
// # Basics
//
//	j := jaegertest.Start(t) // skips (or fails under SLUICE_REQUIRE_JAEGER=1) without a binary
//	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(j.OTLPGRPC), otlptracegrpc.WithInsecure())
//	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
//	... // spans from tp
//	traces, err := j.WaitTraces(ctx, "my-service", func(ts []jaegertest.Trace) bool { return len(ts) == 1 })
//
// Start stops the process when the test ends (SIGTERM, then SIGKILL after
// a deadline) and prints Jaeger's log when the test failed.
//
// # The binary
//
// The binary is not a dependency of sluice's module: tools/jaeger is a
// module of its own that pins Jaeger, and tools/jaeger/build.sh builds it
// (several minutes the first time) to the path that [BinaryPath] returns:
// $SLUICE_JAEGER_BIN when set, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/sluice/jaeger-<Version>.
//
// When the binary is absent, Start skips the test, unless
// SLUICE_REQUIRE_JAEGER is set to a true value (1, true), as CI does: then
// it fails the test.
//
// # Caveats
//
// Each Start runs its own Jaeger (about a second to start), so tests do not
// see each other's traces. Free ports are found by listening on
// 127.0.0.1:0 and closing; when another process takes one in between, Start
// tries again with new ports, a few times.
package jaegertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"
)

// Version is the Jaeger release that tools/jaeger/go.mod pins; it names the
// cached binary.
const Version = "v1.76.0"

// Environment variables that Start reads.
const (
	// EnvBin is the path of the Jaeger binary, overriding the cache path.
	EnvBin = "SLUICE_JAEGER_BIN"
	// EnvRequire, when true (1, true), makes a missing binary fail the
	// test instead of skipping it.
	EnvRequire = "SLUICE_REQUIRE_JAEGER"
)

const (
	// startTimeout bounds the wait for Jaeger to answer after it starts.
	startTimeout = 60 * time.Second
	// stopTimeout is how long Jaeger has to exit after SIGTERM before it
	// gets SIGKILL.
	stopTimeout = 10 * time.Second
	// pollInterval paces the readiness checks and WaitTraces.
	pollInterval = 25 * time.Millisecond
	// startAttempts bounds the retries when a chosen port was taken.
	startAttempts = 3
	// logTail bounds how much of Jaeger's log goes into errors and test logs.
	logTail = 8 << 10
)

// Jaeger is a running Jaeger. Its addresses are on 127.0.0.1.
type Jaeger struct {
	// OTLPGRPC is the OTLP/gRPC receiver as host:port, for
	// otlptracegrpc.WithEndpoint (with WithInsecure).
	OTLPGRPC string
	// OTLPHTTP is the OTLP/HTTP receiver as host:port, for
	// otlptracehttp.WithEndpoint (with WithInsecure).
	OTLPHTTP string
	// QueryURL is the base URL of the query HTTP API, such as
	// http://127.0.0.1:16686 (the /api/... paths; the binary has no UI).
	QueryURL string

	client    *http.Client
	transport *http.Transport
	cmd       *exec.Cmd
	logPath   string
	exited    chan struct{} // closed when the process has been waited for
	waitErr   error         // set before exited is closed
}

// BinaryPath returns where Start looks for the Jaeger binary: $SLUICE_JAEGER_BIN
// when set, else ${XDG_CACHE_HOME:-$HOME/.cache}/sluice/jaeger-<Version>, the
// path tools/jaeger/build.sh builds to. It returns "" when neither variable
// gives a path.
func BinaryPath() string {
	if p := os.Getenv(EnvBin); p != "" {
		return p
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home := os.Getenv("HOME")
		if home == "" {
			return ""
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "sluice", "jaeger-"+Version)
}

// Start runs Jaeger for the test and stops it when the test ends. Without a
// binary (see [BinaryPath]) it skips the test, or fails it when
// SLUICE_REQUIRE_JAEGER is true. It fails the test when Jaeger does not
// start and answer within a minute.
func Start(t testing.TB) *Jaeger {
	t.Helper()
	bin, err := findBinary()
	if err != nil {
		fail, msg := missingBinary(err, os.Getenv(EnvRequire))
		if fail {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}

	// The directory is made before the stop is registered, so that the
	// cleanups (last in, first out) stop Jaeger before removing its files.
	dir := t.TempDir()
	var errs []error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		j, err := launch(bin, dir, attempt)
		if err == nil {
			t.Cleanup(func() { j.stop(t) })
			return j
		}
		errs = append(errs, fmt.Errorf("attempt %d: %w", attempt, err))
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	t.Fatalf("jaegertest: start %s: %v", bin, errors.Join(errs...))
	return nil
}

// errPortTaken marks a start that failed because another process took one
// of the chosen ports first; Start tries again with new ones.
var errPortTaken = errors.New("a chosen port was taken")

func findBinary() (string, error) {
	bin := BinaryPath()
	if bin == "" {
		return "", fmt.Errorf("no Jaeger binary: neither %s nor HOME nor XDG_CACHE_HOME is set", EnvBin)
	}
	info, err := os.Stat(bin)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no Jaeger binary at %s", bin)
	}
	if err != nil {
		return "", fmt.Errorf("Jaeger binary: %w", err)
	}
	if info.IsDir() || info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("Jaeger binary %s is not an executable file", bin)
	}
	return bin, nil
}

// missingBinary decides what a test does without a binary: it fails when
// require (the value of SLUICE_REQUIRE_JAEGER) is true or not a boolean,
// and skips otherwise; msg says why and what to do.
func missingBinary(err error, require string) (fail bool, msg string) {
	if require != "" {
		b, perr := strconv.ParseBool(require)
		if perr != nil {
			return true, fmt.Sprintf("jaegertest: %v; build it with tools/jaeger/build.sh (%s=%q is not a boolean, so taken as required)", err, EnvRequire, require)
		}
		if b {
			return true, fmt.Sprintf("jaegertest: %v; %s=%s, so trace tests must run: build it with tools/jaeger/build.sh", err, EnvRequire, require)
		}
	}
	return false, fmt.Sprintf("jaegertest: %v; build it with tools/jaeger/build.sh or set %s (set %s=1 to fail instead of skipping)", err, EnvBin, EnvRequire)
}

// ports are the listeners of one Jaeger.
type ports struct {
	OTLPGRPC, OTLPHTTP, QueryHTTP, QueryGRPC int
}

// defaultPorts are Jaeger's usual ports, those of tools/jaeger/config.yaml.
var defaultPorts = ports{OTLPGRPC: 4317, OTLPHTTP: 4318, QueryHTTP: 16686, QueryGRPC: 16685}

// configTemplate is tools/jaeger/config.yaml with the ports left open
// (TestConfigMatchesTools keeps the two in step): in-memory storage, the
// OTLP receiver, the query API, everything on 127.0.0.1 and nothing else
// listening (internal metrics and traces are off, so is the query
// extension's tracing of itself).
var configTemplate = template.Must(template.New("jaeger.yaml").Option("missingkey=error").Parse(`service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    logs:
      level: warn
    metrics:
      level: none
    traces:
      level: none

extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    enable_tracing: false
    http:
      endpoint: 127.0.0.1:{{.QueryHTTP}}
    grpc:
      endpoint: 127.0.0.1:{{.QueryGRPC}}

receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{{.OTLPGRPC}}
      http:
        endpoint: 127.0.0.1:{{.OTLPHTTP}}

exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`))

func renderConfig(p ports) ([]byte, error) {
	var buf bytes.Buffer
	if err := configTemplate.Execute(&buf, p); err != nil {
		return nil, fmt.Errorf("render config: %w", err)
	}
	return buf.Bytes(), nil
}

// freePorts returns n distinct free TCP ports on 127.0.0.1. They are held
// open until all are chosen, then released for Jaeger to take.
func freePorts(n int) ([]int, error) {
	out := make([]int, 0, n)
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// launch starts one Jaeger and waits until it answers. On error the process
// has been stopped and waited for.
func launch(bin, dir string, attempt int) (*Jaeger, error) {
	ps, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	p := ports{OTLPGRPC: ps[0], OTLPHTTP: ps[1], QueryHTTP: ps[2], QueryGRPC: ps[3]}
	cfg, err := renderConfig(p)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, fmt.Sprintf("jaeger-%d.yaml", attempt))
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		return nil, fmt.Errorf("write config: %w", err)
	}
	logPath := filepath.Join(dir, fmt.Sprintf("jaeger-%d.log", attempt))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create log: %w", err)
	}
	// The child writes to the file directly: no copying goroutine.
	defer logFile.Close()

	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}

	// A transport of its own (never a proxy: Proxy is nil), so stop can close
	// its idle connections and leave no goroutine behind.
	transport := &http.Transport{MaxIdleConnsPerHost: 2}
	j := &Jaeger{
		OTLPGRPC:  net.JoinHostPort("127.0.0.1", strconv.Itoa(p.OTLPGRPC)),
		OTLPHTTP:  net.JoinHostPort("127.0.0.1", strconv.Itoa(p.OTLPHTTP)),
		QueryURL:  "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(p.QueryHTTP)),
		client:    &http.Client{Transport: transport},
		transport: transport,
		cmd:       cmd,
		logPath:   logPath,
		exited:    make(chan struct{}),
	}
	// The waiter is owned by j: it ends when the process does, and stop
	// (or the error path below) waits for it.
	go func() {
		j.waitErr = cmd.Wait()
		close(j.exited)
	}()

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := j.waitReady(ctx); err != nil {
		_, _ = j.terminate()
		log := j.logTail()
		if strings.Contains(log, "address already in use") {
			err = fmt.Errorf("%w: %w", errPortTaken, err)
		}
		return nil, fmt.Errorf("%w\njaeger log (%s):\n%s", err, logPath, log)
	}
	return j, nil
}

// waitReady polls until the query API answers and both OTLP receivers
// accept connections (the collector starts its receivers after its
// extensions), until the process exits, or until ctx ends.
func (j *Jaeger) waitReady(ctx context.Context) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		last = j.ready(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-j.exited:
			return fmt.Errorf("jaeger exited before it was ready: %v", j.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v: %w", startTimeout, last)
		case <-tick.C:
		}
	}
}

func (j *Jaeger) ready(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.QueryURL+"/api/services", nil)
	if err != nil {
		return err
	}
	resp, err := j.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /api/services: %s", resp.Status)
	}
	var d net.Dialer
	for _, addr := range []string{j.OTLPGRPC, j.OTLPHTTP} {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("OTLP receiver: %w", err)
		}
		c.Close()
	}
	return nil
}

// terminate asks Jaeger to stop (SIGTERM), kills it after stopTimeout,
// and waits for it. It reports whether the kill was needed and the exit
// error of the process.
func (j *Jaeger) terminate() (killed bool, err error) {
	defer j.transport.CloseIdleConnections()
	select {
	case <-j.exited:
		return false, j.waitErr
	default:
	}
	if err := j.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		// Not delivered (no SIGTERM on this OS, or it just exited).
		_ = j.cmd.Process.Kill()
		<-j.exited
		return true, j.waitErr
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-j.exited:
		return false, j.waitErr
	case <-timer.C:
		_ = j.cmd.Process.Kill()
		<-j.exited
		return true, j.waitErr
	}
}

// stop is Start's cleanup.
func (j *Jaeger) stop(t testing.TB) {
	select {
	case <-j.exited:
		// Gone before the test ended: whatever the test saw, say why.
		t.Errorf("jaegertest: jaeger exited during the test: %v\njaeger log:\n%s", j.waitErr, j.logTail())
		return
	default:
	}
	killed, err := j.terminate()
	switch {
	case killed:
		t.Logf("jaegertest: jaeger did not stop within %v of SIGTERM and was killed", stopTimeout)
	case err != nil:
		t.Errorf("jaegertest: jaeger stopped with %v\njaeger log:\n%s", err, j.logTail())
		return
	}
	if t.Failed() {
		t.Logf("jaegertest: jaeger log (%s):\n%s", j.logPath, j.logTail())
	}
}

// logTail returns the end of Jaeger's log.
func (j *Jaeger) logTail() string {
	b, err := os.ReadFile(j.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(b) > logTail {
		b = append([]byte("..."), b[len(b)-logTail:]...)
	}
	if len(b) == 0 {
		return "(empty)"
	}
	return string(b)
}

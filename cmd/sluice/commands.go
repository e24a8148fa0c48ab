package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/internal/stage"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/persistence"
	"github.com/sluicehq/sluice/samples"
	"github.com/sluicehq/sluice/telemetry"
)

func samplesCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "samples",
		Short: "list the samples",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, s := range samples.Catalog() {
				fmt.Fprintf(g.stdout, "%-14s %s\n", s.Name(), s.Description())
			}
			return nil
		},
	}
}

// sampleCommands makes one subcommand per sample, each with the sample's own
// flags, so that `sluice run NAME --help` documents them.
func sampleCommands(g *globals, use string, run func(cmd *cobra.Command, s samples.Sample) error) []*cobra.Command {
	var cmds []*cobra.Command
	for _, s := range samples.Catalog() {
		s := s
		c := &cobra.Command{
			Use:   s.Name(),
			Short: s.Description(),
			Args:  cobra.NoArgs,
			RunE:  func(cmd *cobra.Command, _ []string) error { return run(cmd, s) },
		}
		fs := flag.NewFlagSet(s.Name(), flag.ContinueOnError)
		s.Flags(fs)
		c.Flags().AddGoFlagSet(fs)
		cmds = append(cmds, c)
	}
	return cmds
}

func unknownSample(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%s: name a sample (see 'sluice samples')", cmd.CommandPath())
	}
	_, err := samples.Lookup(args[0])
	return err
}

func planCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "plan SAMPLE [flags]",
		Short: "print a sample's physical plan: fused chains, parallelism and edges",
		RunE:  unknownSample,
	}
	c.AddCommand(sampleCommands(g, "plan", func(cmd *cobra.Command, s samples.Sample) error {
		t, err := s.Topology()
		if err != nil {
			return err
		}
		p, err := t.Plan()
		if err != nil {
			return err
		}
		fmt.Fprint(g.stdout, p.String())
		return nil
	})...)
	return c
}

func runCmd(g *globals) *cobra.Command {
	var progress time.Duration
	var trace bool
	var traceEndpoint, traceKey, traceParent, metricsAddr, uiAddr string
	var traceRatio float64
	var uiWait bool
	var dur durability
	var af adminFlags
	c := &cobra.Command{
		Use:   "run SAMPLE [flags]",
		Short: "run a sample, with a live progress line on stderr",
		RunE:  unknownSample,
	}
	c.PersistentFlags().DurationVar(&progress, "progress", 500*time.Millisecond, "progress line interval (0: none)")
	c.PersistentFlags().BoolVar(&trace, "trace", false, "export traces of sampled records over OTLP (docs/tracing.md; find one in Jaeger by the tag sluice.key=KEY)")
	c.PersistentFlags().Float64Var(&traceRatio, "trace-ratio", operators.DefaultTraceRatio, "with --trace: the share of records traced (0 to 1; each source samples each record with this probability)")
	c.PersistentFlags().StringVar(&traceKey, "trace-key", "", "with --trace: also trace every record with this key (as fmt.Sprint writes it): from the source when a key-by reads the source directly, else from the first keyed operator on")
	c.PersistentFlags().StringVar(&traceParent, "trace-parent", "", "with --trace: a W3C traceparent (00-TRACEID-SPANID-FLAGS) of the caller's span: the job's span, sluice.run, "+
		"and its restarts go into that trace as its children (each sampled record keeps a trace of its own)")
	c.PersistentFlags().StringVar(&traceEndpoint, "trace-endpoint", "127.0.0.1:4317", "OTLP gRPC endpoint for --trace (a local Jaeger)")
	c.PersistentFlags().StringVar(&metricsAddr, "metrics", "", "serve Prometheus metrics at http://ADDR/metrics (e.g. "+telemetry.DefaultMetricsAddr+"; a port alone binds 127.0.0.1, a host written out is used as written)")
	c.PersistentFlags().StringVar(&uiAddr, "ui", "", "serve the live dashboard at http://ADDR/ while the sample runs (e.g. 127.0.0.1:8080; a port alone binds 127.0.0.1, a host written out is used as written)")
	c.PersistentFlags().BoolVar(&uiWait, "ui-wait", false, "with --ui: after the job ends, keep serving its final state until interrupted (Ctrl-C)")
	c.PersistentFlags().StringVar(&dur.save, "savepoint", "", "on Ctrl-C, write a savepoint of the job into DIR (new or empty), then stop it")
	c.PersistentFlags().StringVar(&dur.from, "from-savepoint", "", "start the job from the savepoint in DIR (at the parallelism the flags give)")
	af.add(c, true)
	// The cluster word count starts node processes of its own: it is a
	// command rather than a samples.Sample, reachable as a sample too.
	c.AddCommand(clusterWordCountCmd(g))
	runs := sampleCommands(g, "run", func(cmd *cobra.Command, s samples.Sample) error {
		if err := dur.check(cmd, s); err != nil {
			return err
		}
		if !trace && (cmd.Flags().Changed("trace-ratio") || traceKey != "" || traceParent != "") {
			return fmt.Errorf("--trace-ratio, --trace-key and --trace-parent need --trace")
		}
		var caller oteltrace.SpanContext
		if traceParent != "" {
			var err error
			if caller, err = stage.DecodeTraceParent(traceParent, ""); err != nil {
				return fmt.Errorf("--trace-parent %q: %w (want 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>)", traceParent, err)
			}
		}
		if traceRatio < 0 || traceRatio > 1 {
			return fmt.Errorf("--trace-ratio %v: want a share between 0 and 1", traceRatio)
		}
		tp := telemetry.Noop()
		if trace {
			if err := checkTraceEndpoint(traceEndpoint); err != nil {
				return err
			}
			sdk, err := telemetry.NewOTLPTracerProvider(cmd.Context(), "sluice-"+s.Name(), traceEndpoint)
			if err != nil {
				return err
			}
			tp.Tracer, tp.Shutdown = sdk, sdk.Shutdown
		}
		if metricsAddr != "" {
			mp, handler, err := telemetry.NewPrometheus()
			if err != nil {
				return err
			}
			defer mp.Shutdown(context.WithoutCancel(cmd.Context()))
			if err := telemetry.RuntimeMetrics(mp); err != nil {
				return err
			}
			_, loopback, err := telemetry.MetricsListenAddr(metricsAddr)
			if err != nil {
				return fmt.Errorf("--metrics: %w", err)
			}
			serveCtx, stop := context.WithCancel(cmd.Context())
			addr, wait, err := telemetry.ServeMetrics(serveCtx, metricsAddr, handler)
			if err != nil {
				stop()
				return err
			}
			defer func() { stop(); _ = wait() }()
			fmt.Fprintf(g.stderr, "metrics at http://%s/metrics\n", addr)
			if !loopback {
				fmt.Fprintf(g.stderr, "warning: --metrics %s is reachable beyond this machine, without authentication\n", metricsAddr)
			}
			tp.Meter = mp
		}
		srv, stopAdmin, err := af.start(g, tp)
		if err != nil {
			return err
		}
		defer stopAdmin()
		var ui *dashboard.Dashboard
		if uiAddr != "" {
			var controls http.Handler // the dashboard's controls call the admin API, when there is one
			if srv != nil {
				controls = srv.Handler()
			}
			d, stopUI, err := serveUI(g, uiAddr, trace, "sluice-"+s.Name(), controls)
			if err != nil {
				return err
			}
			defer stopUI()
			ui = d
		}
		topts := []operators.TopologyOption{operators.TraceRatio(traceRatio)}
		if traceKey != "" {
			topts = append(topts, operators.TraceKey(traceKey))
		}
		runCtx := cmd.Context()
		var runSpan oteltrace.Span
		if caller.IsValid() {
			runCtx, runSpan = tp.Tracer.Tracer("github.com/sluicehq/sluice/cmd/sluice").Start(
				oteltrace.ContextWithRemoteSpanContext(runCtx, caller), "sluice.run",
				oteltrace.WithAttributes(attribute.String("sluice.role", "run"), attribute.String("sluice.sample", s.Name())))
		}
		err = runSample(runCtx, g, s, progress, tp, ui, dur, topts, srv, func(run *actors.Run, start admin.Starter) (func(), error) {
			if srv != nil {
				if err := srv.AddRestartable(run, start); err != nil {
					return nil, err
				}
			}
			return af.watch(srv), nil
		})
		if runSpan != nil {
			if err != nil {
				runSpan.RecordError(err)
			}
			runSpan.End()
		}
		flush, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 5*time.Second)
		defer cancel()
		if ferr := tp.Shutdown(flush); ferr != nil && err == nil {
			err = fmt.Errorf("flush traces to %s: %w", traceEndpoint, ferr)
		}
		if ui != nil && uiWait && cmd.Context().Err() == nil {
			fmt.Fprintln(g.stderr, "job ended; the dashboard shows its final state until interrupted (Ctrl-C)")
			<-cmd.Context().Done()
		}
		return err
	})
	for _, rc := range runs {
		dur.flags(rc)
	}
	c.AddCommand(runs...)
	return c
}

// durability is what `run --store FILE --checkpoints D` asks for: a store
// that outlives the run, and checkpoints in it from which a run started
// again with the same flags resumes; and `--savepoint DIR` (written on
// Ctrl-C) and `--from-savepoint DIR`.
type durability struct {
	store       string
	checkpoints time.Duration
	save, from  string
}

// savepoints says whether a savepoint is written or read.
func (d durability) savepoints() bool { return d.save != "" || d.from != "" }

// options are the run settings the flags ask for. With a savepoint and no
// --store, checkpoints are kept in memory (the savepoint is what outlives
// the run), every 10s unless --checkpoints says otherwise.
func (d durability) options() []operators.TopologyOption {
	var opts []operators.TopologyOption
	iv := d.checkpoints
	if iv == 0 && d.savepoints() {
		iv = 10 * time.Second
	}
	if iv > 0 {
		opts = append(opts, operators.Checkpoints(iv))
		if d.store == "" {
			opts = append(opts, operators.CheckpointStore(persistence.NewMemoryCheckpointStore()))
		}
	}
	if d.from != "" {
		opts = append(opts, operators.FromSavepoint(d.from))
	}
	return opts
}

// flags adds --store and --checkpoints to a sample's run command, unless
// the sample has a flag of that name of its own (the bank's --store is its
// journal's).
func (d *durability) flags(c *cobra.Command) {
	if c.Flags().Lookup("store") == nil {
		c.Flags().StringVar(&d.store, "store", "", "bbolt file of the run's durable state: its checkpoints, spilled records and dead letters (default: a temporary file, removed when the run ends)")
	}
	if c.Flags().Lookup("checkpoints") == nil {
		c.Flags().DurationVar(&d.checkpoints, "checkpoints", 0, "take a checkpoint every DURATION in --store (exactly-once state and --out files); "+
			"a run killed and started again with the same flags resumes from its last completed checkpoint (0: none)")
	}
}

// check refuses flags that cannot work, before anything starts.
func (d *durability) check(cmd *cobra.Command, s samples.Sample) error {
	name := cmd.CommandPath()
	switch {
	case d.checkpoints < 0:
		return fmt.Errorf("%s: --checkpoints %v: want a positive interval (or 0 for none)", name, d.checkpoints)
	case d.checkpoints == 0:
		return nil
	}
	if why, ok := s.(samples.NotResumable); ok {
		return fmt.Errorf("%s: --checkpoints: %s", name, why.NotResumable())
	}
	if d.store == "" && !d.savepoints() {
		return fmt.Errorf("%s: --checkpoints %v needs --store FILE: the checkpoints are kept there, and without it the run's store is temporary, removed when the run ends, so no run could resume from them", name, d.checkpoints)
	}
	return nil
}

// serveUI serves a dashboard for `run --ui ADDR` (a port alone means
// 127.0.0.1) and prints its URL; stop ends it. With tracing on, operators
// link to their spans in the local Jaeger, and the page finds a sampled
// record's trace there (Jaeger's query API, beside its UI). With controls
// (the admin API's handler) the page offers its controls.
func serveUI(g *globals, addr string, trace bool, service string, controls http.Handler) (d *dashboard.Dashboard, stop func(), err error) {
	_, loopback, err := dashboard.ListenAddr(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--ui: %w", err)
	}
	opts := dashboard.Options{Title: service, Admin: controls}
	if trace {
		opts.JaegerURL, opts.JaegerQueryURL, opts.JaegerService = dashboard.DefaultJaegerURL, dashboard.DefaultJaegerURL, service
	}
	d, err = dashboard.New(opts)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	url, wait, err := d.Serve(ctx, addr)
	if err != nil {
		cancel()
		_ = d.Close()
		return nil, nil, fmt.Errorf("--ui: %w", err)
	}
	fmt.Fprintf(g.stderr, "dashboard at %s\n", url)
	if !loopback {
		fmt.Fprintf(g.stderr, "warning: --ui %s is reachable beyond this machine, and the dashboard has no authentication\n", addr)
	}
	return d, func() { cancel(); _ = wait() }, nil
}

// runSample runs a sample to its end; started (which may be nil) is told
// of the run once it started, and what it returns runs when the run ended.
//
// With srv (the admin API), the job can be rescaled through it (sluice ctl
// rescale): started registers the run with the Starter that starts it
// again, and the run followed is the one srv serves.
func runSample(ctx context.Context, g *globals, s samples.Sample, every time.Duration, tp telemetry.Providers, ui *dashboard.Dashboard, dur durability,
	topts []operators.TopologyOption, srv *admin.Server, started func(*actors.Run, admin.Starter) (func(), error)) error {
	log, err := g.logger()
	if err != nil {
		return err
	}
	t, err := s.Topology()
	if err != nil {
		return err
	}
	t.Configure(topts...)
	sys, err := actors.NewSystem(actors.Config{Name: "sluice", Logger: log, TracerProvider: tp.Tracer, MeterProvider: tp.Meter, Store: dur.store})
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = sys.Stop(stopCtx)
	}()
	job, err := operators.Start(ctx, sys, t, dur.options()...)
	if err != nil {
		return err
	}
	run := job.Run()
	cps := job.Checkpoints()
	switch {
	case dur.from != "":
		fmt.Fprintf(g.stderr, "job %s: started from savepoint %s (checkpoint %d)\n", t.Name(), dur.from, cps.RestoredFrom)
	case cps.RestoredFrom != 0:
		fmt.Fprintf(g.stderr, "resumed job %s from checkpoint %d of %s in %s", t.Name(), cps.RestoredFrom,
			cps.RestoredTime.UTC().Format(time.RFC3339Nano), dur.store)
		if cps.RestoredInFlight > 0 {
			fmt.Fprintf(g.stderr, " (first the in-flight records of %d input channels it overtook)", cps.RestoredInFlight)
		}
		fmt.Fprintln(g.stderr)
	case dur.checkpoints > 0:
		fmt.Fprintf(g.stderr, "started job %s afresh: no checkpoint of it in %s; checkpoints every %v\n", t.Name(), dur.store, dur.checkpoints)
	}
	if o, ok := s.(samples.Observer); ok {
		o.Observe(run)
	}
	if ui != nil {
		if err := ui.Add(run); err != nil {
			return err
		}
	}
	if started != nil {
		done, err := started(run, admin.TopologyStarter(sys, t, dur.options()...))
		if err != nil {
			return err
		}
		defer done()
	}
	// current is the run now: after a rescale through the admin API, the
	// one started in the old one's place; ended is closed when the job
	// has ended for good (Server.Wait follows it across rescales).
	current := func() *actors.Run { return run }
	ended := run.Done()
	if srv != nil {
		current = func() *actors.Run {
			if r, err := srv.Current(run.Name()); err == nil {
				return r
			}
			return run
		}
		ch := make(chan struct{})
		waitCtx, stopWait := context.WithCancel(context.WithoutCancel(ctx))
		defer stopWait()
		go func() { // owned: ends with the job, or when runSample returns
			defer close(ch)
			if ui == nil {
				_ = srv.Wait(waitCtx, run.Name())
				return
			}
			// The dashboard shows each run a rescale starts as the same job.
			shown := run
			_ = srv.Follow(waitCtx, run.Name(), func(r *actors.Run) {
				if _, err := ui.Replace(shown, r); err != nil {
					log.Warn("dashboard: the rescaled run is not shown", "job", r.Name(), "err", err)
				}
				shown = r
			})
		}()
		ended = ch
	}
	p := newProgress(g.stderr, isTerminal(g.stderr))
	if dur.checkpoints > 0 {
		p.checkpoints = func() operators.CheckpointStats { return operators.CheckpointStatsOf(current()) }
	}
	var tick <-chan time.Time
	if every > 0 {
		tk := time.NewTicker(every)
		defer tk.Stop()
		tick = tk.C
	}
	interrupted := false
wait:
	for {
		select {
		case <-ended:
			break wait
		case <-tick:
			r := current()
			p.show(r.Name(), r.Elapsed(), r.Stats())
		case <-ctx.Done():
			if interrupted {
				break wait
			}
			interrupted = true
			if dur.save != "" {
				fmt.Fprintf(g.stderr, "\ninterrupted: writing a savepoint into %s, then stopping the job\n", dur.save)
				spCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				info, err := operators.StopWithSavepoint(spCtx, current(), dur.save)
				cancel()
				_ = current().Stop(context.WithoutCancel(ctx))
				if err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "savepoint %s: checkpoint %d of job %s (sluice savepoint inspect %s)\n", info.Dir, info.Checkpoint, info.Job, info.Dir)
				return nil
			}
			fmt.Fprintln(g.stderr, "\ninterrupted: draining (sources stop, in-flight records finish)")
			drainCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			err := current().Drain(drainCtx)
			cancel()
			if err != nil {
				return err
			}
			break wait
		}
	}
	run = current()
	if every > 0 {
		p.show(run.Name(), run.Elapsed(), run.Stats())
		p.done()
	}
	if srv != nil {
		if err := srv.Wait(context.WithoutCancel(ctx), run.Name()); err != nil {
			return err
		}
	}
	if err := run.Wait(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	return s.Report(g.stdout)
}

// progress draws one status line: redrawn in place on a terminal, a new line
// each time otherwise.
type progress struct {
	w        interface{ Write([]byte) (int, error) }
	tty      bool
	lastIn   int64
	lastOut  int64
	lastTime time.Duration
	// checkpoints, when set, adds the job's checkpoints to the line.
	checkpoints func() operators.CheckpointStats
}

func newProgress(w interface{ Write([]byte) (int, error) }, tty bool) *progress {
	return &progress{w: w, tty: tty}
}

func (p *progress) show(name string, elapsed time.Duration, stats []actors.OperatorStats) {
	var in, out int64
	var ops []string
	for _, s := range stats {
		switch s.Kind {
		case "source":
			in += s.Out
			ops = append(ops, fmt.Sprintf("%s %s", s.Name, human(s.Out)))
		case "sink":
			out += s.In
			ops = append(ops, fmt.Sprintf("%s %s", s.Name, human(s.In)))
		default:
			ops = append(ops, fmt.Sprintf("%s %s", s.Name, human(s.In)))
		}
		if s.Dropped > 0 || s.SpillPending > 0 {
			ops[len(ops)-1] += fmt.Sprintf(" (dropped %s, spilled %s)", human(s.Dropped), human(s.SpillPending))
		}
	}
	dt := (elapsed - p.lastTime).Seconds()
	var rin, rout float64
	if dt > 0 {
		rin, rout = float64(in-p.lastIn)/dt, float64(out-p.lastOut)/dt
	}
	p.lastIn, p.lastOut, p.lastTime = in, out, elapsed
	line := fmt.Sprintf("%s %5.1fs  in %s/s  out %s/s | %s", name, elapsed.Seconds(),
		human(int64(rin)), human(int64(rout)), strings.Join(ops, "  "))
	if p.checkpoints != nil {
		cs := p.checkpoints()
		line += fmt.Sprintf(" | checkpoint %d (%d this run", cs.LastID, cs.Completed)
		if cs.Failed > 0 {
			line += fmt.Sprintf(", %d failed", cs.Failed)
		}
		line += ")"
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r\x1b[K%s", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
}

func (p *progress) done() {
	if p.tty {
		fmt.Fprintln(p.w)
	}
}

func human(n int64) string {
	switch {
	case n >= 1_000_000_000:
		return fmt.Sprintf("%.2fG", float64(n)/1e9)
	case n >= 1_000_000:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// checkTraceEndpoint says, before a job starts, that nothing listens where
// --trace would export, and how to start a Jaeger there; without it the
// job would run and its traces be lost, with an error only at the end.
func checkTraceEndpoint(endpoint string) error {
	c, err := net.DialTimeout("tcp", endpoint, 2*time.Second)
	if err != nil {
		return fmt.Errorf("--trace: nothing accepts OTLP on %s (%v): start a Jaeger there first, "+
			"e.g. `bash tools/jaeger/build.sh && bash tools/jaeger/start.sh` from sluice's repository "+
			"(OTLP gRPC on 127.0.0.1:4317, UI and API on 127.0.0.1:16686), or give --trace-endpoint", endpoint, err)
	}
	return c.Close()
}

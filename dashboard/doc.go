// Package dashboard serves a live web page of running sluice jobs: the
// physical topology as a graph, and per operator its rates, queue, drops,
// spills, back-pressure, lateness, watermark and dead letters; per job its
// restarts and checkpoints.
//
// # Basics
//
// A Dashboard follows the jobs given to Add and serves them with Handler, an
// http.Handler to mount in your own server, under a prefix if you like:
//
//	d, err := dashboard.New(dashboard.Options{Title: "orders"})
//	if err != nil { return err }
//	defer d.Close()
//
//	run, err := sys.Run(ctx, topology) // sys is an *actors.System
//	if err != nil { return err }
//	d.Add(run)
//
//	mux := http.NewServeMux()
//	mux.Handle("/sluice/", http.StripPrefix("/sluice", d.Handler()))
//	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: mux}
//
// and the page is at http://127.0.0.1:8080/sluice/. For a server of its
// own, Serve listens on an address (a port alone means loopback) and stops
// when its context ends; `sluice run SAMPLE --ui 127.0.0.1:8080` uses it.
//
// # What the page shows
//
// Each job is a section: its state (running, finished, failed with the
// error), elapsed time, restarts, and checkpoints (how many completed, the
// last one's id, duration and age, failures, the checkpoint it restored
// from). Below it, the physical plan drawn as SVG, laid out by topological
// depth from the sources on the left: each task is a box listing its fused
// operators in chain order with its parallelism (×N), a bar of its input
// queue against the capacity, and each operator's rates in and out; edges
// carry their partitioning (forward, hash, rebalance, broadcast) and the
// operator that chose it. A box turns orange while an instance is
// back-pressured and red while it drops. A table then lists every operator:
// records in and out with their rates per second (and a sparkline of the
// last minute's input rate), queue depth and high-water mark against the
// capacity and policy, drops in total, per second and by reason, spills
// (total and pending), how the task's instances spent the last interval
// (busy handling records, back-pressured without credit to send, idle: three
// shares that sum to 100 %, as Flink shows them), late records, watermark
// and dead letters. A legend explains the colours. Each operator's row
// expands into a row per instance (subtask) with its own records, rates,
// queue and shares; an operator whose busiest instance takes SkewThreshold
// times the mean or more is marked "skew ×N" and that instance "hot". Below
// the table, the checkpoints in progress (since when, how many instances
// acknowledged) and the completed ones, newest first (id, time, duration,
// bytes of state); and the exceptions: the failure that ended the job, each
// restart with its cause, the newest failed checkpoint, the dead letters by
// operator and the newest of them (store sequence number, operator
// instance, attempts, failure; `sluice deadletters` reads the records). With Options.JaegerURL, every
// operator links to a Jaeger search for its spans: sluice names each span
// after its operator and tags it with the topology (see package telemetry).
//
// Each operator's latency over the latest latency window shows as p50 · p99:
// end to end (from ingestion at a source) at a sink, queue wait (then the
// task's processing) at a task's first operator. Charts follow the last
// Options.History (5 minutes by default): records in per second, queue
// depth, back-pressured share, watermark lag and latency p99, a line per
// operator; and, above the jobs, this process's heap, CPU (cores busy),
// goroutines and GC pause p99, read from runtime/metrics. A panel lists the
// job's configuration: its plan, batch size, capacities, checkpoint
// settings, restart policy, and each task's input as it is now.
//
// With Options.Admin (an admin.Server's Handler), the dashboard serves the
// admin API under admin/ and the configuration panel gains controls: change
// an input's policy and capacity, pause or resume a source, take a
// savepoint. The user pastes the admin token into the page, which sends it
// as a bearer token and keeps it nowhere else; without it the API answers
// 401, shown on the page; the admin API's Origin and Host checks apply.
//
// With Options.JaegerQueryURL, the page finds the trace of a sampled record
// by its key (sluice.key) or its trace id: the dashboard reads it from
// Jaeger's HTTP query API (bounded, decoded on one path; see TraceOptions
// and docs/tracing.md), and the page draws the record's path on the graph,
// numbered in order, with a waterfall of its spans.
//
// # Data
//
// The page itself carries the latest snapshot (a JSON data block, which the
// Content Security Policy allows since the browser does not run it), so it
// shows the jobs at load, before the stream's first event.
//
// One goroutine per dashboard reads every job's statistics once per
// Options.Interval (half a second by default), however many pages are open,
// computes rates from successive readings, and publishes a Snapshot. The
// page receives each one over Server-Sent Events at /events (event type
// "snapshot", the Snapshot as JSON) and updates itself in place; the latest
// is also at /snapshot.json for scripts. The first frame and /snapshot.json
// carry the charts' history whole; each streamed snapshot only its newest
// point (Job.Point), which the page appends: the history is a ring of
// bounded size on the server. Rates of a job that has ended are
// zero; its final counters stay on the page until Remove or Close.
//
// The page, its script and its style sheet are embedded in the binary: no
// CDN, no build step, nothing fetched from elsewhere (the page's Content
// Security Policy allows only its own origin).
//
// # Caveats
//
// The dashboard has no authentication: serve it on loopback (ListenAddr and
// Serve do when given a port alone) or behind your own. It answers only
// requests whose Host header is an IP address, localhost or one of
// Options.AllowedHosts (403 otherwise), so that a page on another site
// cannot read it by pointing its own DNS name at 127.0.0.1 (DNS
// rebinding); it serves at most Options.MaxStreams event streams at once
// (503 beyond), and Serve's server closes connections idle for
// IdleTimeout. Close it before
// shutting down the server that serves it, since event streams end only when
// their client goes or the dashboard closes, and http.Server.Shutdown waits
// for them. Counters that go down (a job restarted) give a rate of zero for
// that interval, not a negative one.
package dashboard

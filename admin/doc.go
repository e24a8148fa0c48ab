// Package admin is sluice's control plane: an HTTP+JSON API that every
// process running jobs can serve (`sluice run ... --admin ADDR`, `sluice
// node --admin ADDR`), and the declarative desired state that it applies,
// pushed as service meshes push configuration with xDS.
//
// # Basics
//
// A Server holds the jobs of a process. Add each run; serve its Handler
// (or call Serve, which listens on loopback unless told otherwise):
//
//	srv, _ := admin.New(admin.Options{Token: token, Logger: log})
//	_ = srv.Add(job.Run())
//	url, wait, _ := srv.Serve(ctx, "127.0.0.1:7070")
//
// The API (JSON in and out; errors are {"error": "..."} with the status;
// new endpoints and fields are only ever added):
//
//	GET  /v1/jobs                                  the jobs: name, state, elapsed
//	GET  /v1/jobs/{job}                            plan, statistics, inputs, checkpoints, desired vs applied
//	GET  /v1/jobs/{job}/history                    the changes made to the job, applied or rejected
//	PUT  /v1/jobs/{job}/inputs/{operator}          change an input: {"policy": "drop-oldest", "capacity": 4096}
//	POST /v1/jobs/{job}/sources/{operator}/pause   stop a source reading
//	POST /v1/jobs/{job}/sources/{operator}/resume  let it read again
//	POST /v1/jobs/{job}/savepoint                  take a checkpoint now: {"checkpoint": 12}; with {"dir": "NAME"}, write it
//	                                               as a savepoint into NAME under Options.SavepointDir: {"checkpoint": 12, "dir": ...}
//	POST /v1/jobs/{job}/stop                       drain the job, keeping its final checkpoint to resume from; with
//	                                               {"savepoint": "NAME"}, stop it with a savepoint into NAME under
//	                                               Options.SavepointDir: {"checkpoint": 12, "savepoint": ...}
//	POST /v1/jobs/{job}/rescale                    {"parallelism": {"count": 4}}: stop with a savepoint, start again from it
//	                                               at the new parallelism (a job added with a Starter); answers Rescaled
//	PUT  /v1/jobs/{job}/latency-target             {"target": "250ms"}: change the LatencyTarget of a job started with one
//	GET  /v1/desired                               the desired-state document's status: desired, applied per job, last rejection
//	PUT  /v1/desired                               push a desired-state document: 200 applied, 409 rejected whole (the reason names the field)
//
// An input change is applied at a consistent point of every instance's
// mailbox, so the accounting stays exact across it: for every input,
// posted = delivered + dropped + queued + spilled at every moment. A change
// to or from Block resynchronises the senders' credits in band (see
// internal/engine, control.go); a change away from Spill drains the spill
// in order first. Inputs of operators fused into a chain and of sources
// cannot change while the job runs: the change is refused, naming why. A
// distributed job is changed through the admin server of its
// coordinator's process: the cluster applies the change on every node
// hosting the operator or on none (Spill is refused there), and the job's
// status lists the change in force per node (JobStatus.Nodes).
//
// # Stopping with a savepoint, rescaling
//
// A stop with a savepoint suspends the job (operators.StopWithSavepoint):
// the sources stop where they are, what is in flight is processed, no
// operator finishes its input (no window emits, no timer fires), sinks
// flush, and the final checkpoint is written as a savepoint: a job
// started from it repeats no output and misses none.
//
// A rescale needs to start the job again, so the Server must know how: add
// the run with AddRestartable and a Starter (TopologyStarter for a
// topology started with operators.Start; `sluice run` does so). Rescale
// checks the operators and values first, stops the job with a savepoint
// into a new directory under Options.SavepointDir, starts it from it with
// the operators at their new parallelism (operators.RunParallelism; per-key
// state redistributed by key group), sets the old run's live input
// settings and paused sources on the new one, and serves it in the old
// one's place; Current is the run now and Wait follows the job across
// rescales. A start the new plan refuses (state that is not per key)
// starts the job again at its old parallelism from the same savepoint and
// reports why. The answer says how long the job was paused:
//
//	srv.AddRestartable(job.Run(), admin.TopologyStarter(sys, top, opts...))
//	r, err := srv.Rescale(ctx, "me", "clicks", map[string]int{"count": 4})
//	fmt.Println(r.Parallelism, r.Pause)
//
// # Security
//
// The API listens on loopback by default. Every request is refused (403)
// when its Host header names another host than loopback or
// Options.AllowedHosts, the defence against DNS rebinding, and when it has
// an Origin header other than its own (a page of another site). Every
// request that changes something (PUT, POST) needs the bearer token
// (Authorization: Bearer TOKEN, compared in constant time): 401 without
// it; with no token configured, changes are refused.
//
// # Desired state
//
// WatchFile polls a JSON document (see package internal/desired for the
// format) on the Server's clock and applies each new version to the jobs
// it names as one change: every setting or none. A document with a bad
// value, an unknown job or operator, or an impossible change (a Spill
// without a store, an input that cannot change live) is rejected whole with
// a reason naming the field, and the last good version stays in force; if
// a change fails while a version is applied, the changes before it are
// undone. GET /v1/desired and each job's status show the desired version
// against the version each job runs.
//
// # History
//
// Every change, from the API or the desired state, is an Event in its
// job's history (who, what, when, applied or rejected and why), logged on
// the Server's logger and, with a TracerProvider, a span.
package admin

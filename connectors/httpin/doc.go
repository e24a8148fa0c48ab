// Package httpin is an HTTP ingress for sluice topologies: clients POST
// JSON lines, one record a line, and the records enter a topology through
// an operators.Ingress. When the topology cannot take more, the ingress
// answers 429 Too Many Requests with Retry-After instead of buffering
// without bound.
//
// # Basics
//
//	in, err := httpin.New(httpin.Config[Event]{Addr: "127.0.0.1:8080", Path: "/events"})
//	events := operators.Source(t, "events", in.Source())
//	... // the rest of the topology
//	run, err := sys.Run(ctx, t)
//	err = in.Start()           // listen and serve
//	...
//	err = in.Close(ctx)        // stop serving, then end the stream
//	err = run.Wait(ctx)        // the topology finishes the accepted records
//
// A client sends
//
//	POST /events
//	{"id": 1, "kind": "click"}
//	{"id": 2, "kind": "view"}
//
// and gets one of:
//
//   - 202 Accepted, {"accepted": 2}: every record of the request is in the
//     ingress's buffer, and the topology will process it.
//   - 429 Too Many Requests, with Retry-After: the records do not fit in the
//     buffer now (the topology is slower than its clients); none was taken.
//     HoldFor makes a request wait that long for room first.
//   - 503 Service Unavailable: more than MaxConcurrent requests at once
//     (with Retry-After), or the stream has ended (after Close).
//   - 413 Request Entity Too Large: a body over MaxBodyBytes, or more than
//     MaxRecords records.
//   - 400 Bad Request: a line that does not decode; the message names the
//     line ("line 3: ..."), and none of the request's records was taken.
//   - 405 Method Not Allowed: anything but POST.
//   - 403 Forbidden: a cross-site request from a browser: an Origin header
//     not in AllowedOrigins, or Sec-Fetch-Site: cross-site.
//   - 401 Unauthorized: Token is set and the request has no
//     "Authorization: Bearer <Token>".
//   - 415 Unsupported Media Type: a Content-Type other than
//     application/json or application/x-ndjson (a web page can send
//     text/plain across sites without asking; it cannot send these).
//
// A request is all or nothing, so a client can retry a refused request
// whole. Stats counts every request once, by outcome, and records the
// buffer's high-water mark.
//
// # Bounds
//
// Memory is bounded by Capacity accepted records waiting for the topology,
// plus the bodies being read (MaxBodyBytes each) and at most MaxConcurrent
// requests being decoded. A body is read before the request takes one of
// the MaxConcurrent slots, so slow clients hold connections (until the
// server's ReadTimeout of a minute), not slots; behind your own server,
// bound connections there (Handler).
//
// # Browsers
//
// Browsers attach an Origin header to cross-site POSTs, and Sec-Fetch-Site;
// the ingress refuses both unless the origin is in AllowedOrigins, and it
// accepts only JSON content types, which a page on another site cannot send
// without the browser asking first (CORS preflight, which the ingress does
// not answer). Clients that are not browsers (curl, services) send neither
// header. Set Token to require a bearer token from every client. Behind the
// buffer, the topology's own mailboxes are bounded and apply back-pressure:
// when the sinks are slow, the source stops reading the buffer, the buffer
// fills, and the ingress answers 429.
//
// The server binds loopback (127.0.0.1) unless Addr says otherwise, and has
// timeouts for slow clients. Handler serves the same endpoint on a server of
// your own (with TLS, authentication, other routes).
//
// # Tracing a request's records
//
// A request's W3C trace context (its traceparent and tracestate headers)
// goes with every record of the request: in a topology with
// operators.TraceParent(), a record whose traceparent is sampled is traced
// in the caller's trace, its source span a child of the caller's span.
//
//	t := operators.NewTopology("ingest", operators.TraceParent(), operators.TraceRatio(0))
//	in := operators.Source(t, "ingest", g.Source())
//
//	curl -H 'traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' \
//	     -H 'Content-Type: application/x-ndjson' --data-binary @events.ndjson http://127.0.0.1:8080/ingest
//
// The ingress passes the headers on as received (several traceparent
// headers joined with commas, a value kept to just over the runtime's
// bound); the runtime decodes them and counts the malformed ones in the
// source's OperatorStats.BadTraceParents (docs/tracing.md, Sampling).
//
// # Guarantees
//
// A 2xx response means the records are in the process's memory, not on
// disk. They are processed once if the process keeps running and the job
// ends normally (Close, then the topology drains the buffer); a crash or an
// aborted job loses the records accepted and not yet processed. The ingress
// cannot be replayed, so a topology that reads it cannot take checkpoints
// (operators refuses them): delivery is at-most-once across crashes. For
// exactly-once, write the requests to a durable log first (JetStream, see
// connectors/jetstream) and run the topology from there; or have clients
// send idempotency keys and retry until 2xx, and make the sink drop
// duplicates.
package httpin

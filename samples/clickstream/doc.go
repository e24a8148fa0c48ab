// Package clickstream is the sample of event time with late data: it groups
// a stream of user clicks into sessions by the time the clicks happened,
// not the order they arrive in, and shows what becomes of the clicks that
// arrive out of order, behind the watermark, and too late.
//
// # Basics
//
// A Click has an event time (At). The job takes it with
// operators.Timestamps, whose watermark trails the largest event time seen
// so far by OutOfOrderness (the bound): a watermark at W promises that no
// click at or before W will follow. The clicks are keyed by user, and a
// session window per user holds the clicks that follow each other within a
// gap: a session is [first click, last click + gap), and a click that
// falls between two sessions joins them into one. A session fires (is
// emitted) when the watermark reaches its last instant.
//
//	clicks (source) -> event-time ==hash by user==> sessions (window) x P -> session (map) -> collect (sink)
//	                                                sessions' late output -> late (sink)
//
// Sessionize builds that part of the job; its accumulator, a Visit, keeps
// the clicks (their Seq) and the distinct pages of a session.
//
// # Out of order, behind the watermark, late
//
// The generator (Generate) delays a quarter of the clicks by up to the
// bound: they arrive out of order, but ahead of the watermark, and are
// handled as if they had come in order. A share of the clicks
// (--late-fraction) is delayed by more than the bound; such a click may
// arrive behind the watermark, and then:
//
//   - if its user has a session still open that it overlaps (the session
//     has not fired), it simply joins it;
//   - if the session it joins has fired, but no more than AllowedLateness
//     ago (the window keeps fired sessions that long), the session is
//     updated and emitted again at once: results are updates;
//   - otherwise it is late: counted in the window operator's
//     OperatorStats.Late and sent to the LateTo sink, the side output.
//
// Because results are updates, and a click may join two fired sessions
// into one, Final reduces the results to the sessions as they finally are:
// a result replaces the earlier ones whose clicks it holds.
//
// # Deterministic lateness
//
// Timestamps computes its watermark after each batch of records. The
// sample's topology reads one click per batch (operators.BatchSize(1)), so
// a watermark follows every click, and which clicks are late does not
// depend on timing: Expect computes it with a plain loop over the clicks in
// arrival order, the watermark after each click being the largest event
// time so far less the bound and one nanosecond. With larger batches the
// job is as correct, but a click delayed beyond the bound may or may not
// be late depending on where the batches were cut. Report checks every
// user's results, in order, and the late clicks against Expect.
//
// # Running it
//
//	sluice run clickstream --users 100 --clicks 20000 --seed 1 \
//		--late-fraction 0.02 --out-of-order 5s --gap 30s --lateness 1m
//
// prints the clicks that arrived out of order, behind the watermark and
// late, the number of sessions and results, and the longest sessions. The
// tests run it small under several configurations and compare it with
// Expect, the window's Late count included, and run Sessionize through a
// checkpoint and a crash with operators/optest.
package clickstream

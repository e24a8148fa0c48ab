// Package nexmark is the Nexmark benchmark for sluice: Beam's event
// generator (exact to its rules, with a port of java.util.Random seeded per
// event), the event file format, the queries q0–q9 and q11 as sluice
// topologies, and a single-goroutine reference model of each query that the
// tests compare the topologies with.
//
// # Generator
//
// NewStream(cfg) yields Beam's event stream: cfg.NumEventGenerators
// generators (Beam's GeneratorConfig.split) interleaved round-robin. Every
// event is drawn from a java.util.Random seeded with its event id, so the
// stream is identical on every run and machine and equal to Beam's; a
// generator's position is one integer (Offset/SetOffset), which makes the
// source exactly replayable. Config keeps Beam's knob names and defaults;
// RegisterFlags exposes them as --numEvents, --firstEventRate, ...
// `sluice nexmark gen` writes the stream as JSON lines (AppendJSON); Reader
// reads such files back, naming the line of a malformed event. Source and
// FileSource make the generator and an event file sources of a topology.
//
// # Event time
//
// With OutOfOrderGroupSize n > 1 each generator permutes its events in
// groups of n, and its watermark (Generator.Watermark, Beam's) lags to the
// start of the current group. A sluice source cannot emit its own
// watermark, so the queries' Timestamps allow the generator's largest lag,
// Config.MaxOutOfOrderness (ParamsOf sets it): their watermark is then never
// ahead of the generator's, and no event is late. When n does not divide a
// generator's count, person and auction ids repeat across generators, as in
// Beam (Config.RepeatsIDs); the queries and the models keep the first
// record of each id.
//
// Caveats: event times start at 2015-07-15T00:00:00Z and are synthetic
// (never wall-clock); with Beam's default 100 generators, time advances in
// steps of 100 events; bids and auctions may reference up to 10 persons or
// auctions that do not exist yet.
package nexmark

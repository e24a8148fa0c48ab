package stage

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/connector"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Mark is one sampled record of a Batch: its index in the batch, its id
// and the span context of its last span (the parent of its next). A
// Batch's marks (Batch.Tr) are in increasing order of I; a batch without a
// sampled record has none (a nil slice: nothing is allocated for it).
type Mark struct {
	I  int32
	ID string
	SC trace.SpanContext
	// ctx is the context the SDK returned with the span SC names, while
	// the mark stays in the process that started it: the parent of the
	// next span without building a context for it (two allocations a
	// span). Nil after a decode and in the marks an operator holds
	// (held), which then build one from SC.
	ctx context.Context
	// hops counts the spans ctx wraps (each wraps its parent's): past
	// maxHops the next span's parent is built from SC, so that a record
	// going round a long path holds a few spans at most.
	hops uint8
}

// maxHops bounds the spans a mark's context holds.
const maxHops = 8

// held is m as an operator keeps it beyond the batch (a window's or a
// join's contributors): without the context, which holds the record's
// earlier spans.
func (m Mark) held() Mark {
	m.ctx, m.hops = nil, 0
	return m
}

// parent is the context to start m's next span in.
func (tr *Tracer) parent(m *Mark) context.Context {
	if m.ctx != nil && m.hops < maxHops {
		return m.ctx
	}
	m.hops = 0
	return trace.ContextWithSpanContext(tr.base, m.SC)
}

// Sampling says which records a job traces (docs/tracing.md, Sampling).
type Sampling struct {
	// Ratio is the probability that a source samples a record (0: none).
	Ratio float64
	// Key, when set, samples every record whose key (fmt.Sprint) is Key at
	// the keyed operators.
	Key string
	// Parent samples the records that arrive with a W3C trace context
	// whose sampled flag is set (connector.TraceCarrier): they continue
	// the caller's trace whatever Ratio says. A record whose trace context
	// is not sampled is left to Ratio (and Key).
	Parent bool
}

// Tracer traces the sampled records an instance processes: a source
// samples records (Sampling) and starts a trace for each, and each stage a
// sampled record passes adds a span to its trace (docs/tracing.md).
type Tracer struct {
	t        trace.Tracer
	base     context.Context // the job's: the parent of its traces
	depth    func() int      // the queue depth of the instance's mailbox now
	topology string
	policy   string
	samp     Sampling
	log      *slog.Logger
	now      func() time.Time

	// the source's sampler: the ordinal of the next record read and of
	// the next one sampled, and the generator of the gaps.
	seq, next int64
	rng       uint64
	logq      float64 // log(1 - ratio)

	// the envelope being processed, for the chain head's spans
	head   bool
	edge   string
	ekind  string
	wait   int64 // µs
	queue  int
	remote bool

	// scratch of the spans started on the instance's goroutine (Source,
	// pass): the API copies attributes and options when a span starts.
	attrs []attribute.KeyValue
	opts  []trace.SpanStartOption
	edges map[string]attribute.KeyValue // a chain head's sluice.edge by upstream operator
	tcs   []parentMark                  // the decoded trace contexts of a source's batch
	keyed []int                         // the records of a source's batch with the sampled key
}

// NewTracer traces with t under the job's context base; depth reports the
// instance's mailbox depth, policy is its overflow policy. log hears of
// malformed trace contexts; now is the job's clock, read once per batch
// for the timestamps of its spans (nil: time.Now).
func NewTracer(t trace.Tracer, base context.Context, depth func() int, topology, policy string, s Sampling, log *slog.Logger, now func() time.Time) *Tracer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	return &Tracer{t: t, base: base, depth: depth, topology: topology, policy: policy, samp: s, log: log, now: now}
}

// Parents reports whether the tracer samples by the trace contexts records
// arrive with.
func (tr *Tracer) Parents() bool { return tr != nil && tr.samp.Parent }

// stageTrace is what a stage's spans share, built once per stage instance:
// the attributes every span of it carries, and its open spans.
type stageTrace struct {
	pass, source []attribute.KeyValue // role, topology, operator, kind, instance
	fused        []attribute.KeyValue // the fused edge into it (nil at a chain head)
	spans        []trace.Span         // the spans of the batch being pushed
	end          func()               // ends them: sc.endPass
}

func (tr *Tracer) stage(sc *Ctx) *stageTrace {
	if sc.tc != nil {
		return sc.tc
	}
	st := &stageTrace{pass: tr.common(sc, "pass"), source: tr.common(sc, "source")}
	if sc.Prev != "" {
		st.fused = []attribute.KeyValue{attribute.String("sluice.edge", sc.Prev+"->"+sc.Name), attribute.String("sluice.edge.kind", "fused")}
	}
	st.end = sc.endPass
	sc.tc = st
	return st
}

// endPass ends the spans pass started, at one timestamp.
func (sc *Ctx) endPass() {
	st := sc.tc
	sc.marks = nil
	at := []trace.SpanEndOption{trace.WithTimestamp(sc.Tracer.now())} // one slice for every End
	for i, s := range st.spans {
		s.End(at...)
		st.spans[i] = nil
	}
	st.spans = st.spans[:0]
}

// Keys reports whether the tracer samples by key.
func (tr *Tracer) Keys() bool { return tr != nil && tr.samp.Key != "" }

// Receive notes the envelope the chain head is given: the edge it came by,
// its kind and how long it waited in the mailbox (µs); done forgets it.
func (tr *Tracer) Receive(edge, kind string, remote bool, waitMicros int64) {
	tr.head, tr.edge, tr.ekind, tr.remote, tr.wait = true, edge, kind, remote, waitMicros
}

// Received forgets the envelope Receive noted.
func (tr *Tracer) Received() { tr.head = false }

// splitmix64 is the generator of the sampler's gaps.
func splitmix64(x *uint64) uint64 {
	*x += 0x9e3779b97f4a7c15
	z := *x
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// gap draws the number of records before the next sampled one: geometric
// with parameter ratio, so that each record is sampled with probability
// ratio, independently, at a cost per sampled record rather than per
// record.
func (tr *Tracer) gap() int64 {
	if tr.samp.Ratio >= 1 {
		return 0
	}
	u := (float64(splitmix64(&tr.rng)>>11) + 1) / (1 << 53) // (0, 1]
	g := math.Floor(math.Log(u) / tr.logq)
	if g > 1<<62 {
		return 1 << 62
	}
	return int64(g)
}

// OpenSource starts the source's sampler: seeded by the topology, the
// operator and the instance, so that the same records are sampled on every
// run.
func (tr *Tracer) OpenSource(sc *Ctx) {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%s/%d", tr.topology, sc.Name, sc.Instance)
	tr.rng, tr.seq = h.Sum64(), 0
	if tr.samp.Ratio > 0 {
		tr.logq = math.Log1p(-min(tr.samp.Ratio, 1))
		tr.next = tr.gap()
	} else {
		tr.next = math.MaxInt64
	}
}

// recordID is a record's id: source/instance/ordinal.
func recordID(sc *Ctx, ord int64) string {
	return sc.Name + "/" + strconv.Itoa(sc.Instance) + "/" + strconv.FormatInt(ord, 10)
}

// parentMark is the decoded trace context of record i of a source's batch.
type parentMark struct {
	i  int
	sc trace.SpanContext
}

// parents decodes the trace contexts of the n records a source just read
// (connector.TraceCarrier), counting and logging the malformed ones.
func (tr *Tracer) parents(sc *Ctx, n int, tcs []connector.TraceContext) []parentMark {
	out := tr.tcs[:0]
	last := -1
	for _, tc := range tcs {
		var err error
		var psc trace.SpanContext
		if tc.Index <= last || tc.Index >= n {
			err = fmt.Errorf("%w: the reader gave it for record %d of a batch of %d (after %d)", ErrBadTraceParent, tc.Index, n, last)
		} else {
			last = tc.Index
			psc, err = DecodeTraceParent(tc.TraceParent, tc.TraceState)
		}
		if err != nil {
			if c := sc.C.BadTrace.Add(1); c&(c-1) == 0 { // the 1st, 2nd, 4th, 8th, ...
				tr.log.Warn("sluice: a record's trace context is refused; the record goes on untraced by it",
					"topology", tr.topology, "operator", sc.Name, "instance", sc.Instance, "refused", c, "error", err)
			}
			continue
		}
		out = append(out, parentMark{i: tc.Index, sc: psc})
	}
	tr.tcs = out
	return out
}

// Source marks the sampled records among the n the source just read,
// starting a trace for each, and returns them with the function that ends
// their spans (nil, nil when none is sampled). tcs are the trace contexts
// the records arrived with (connector.TraceCarrier), read when the tracer
// samples by parent; keyOf, when set, gives the key of record i (the
// source's output is a key-by's input), read when the tracer samples by key.
func (tr *Tracer) Source(sc *Ctx, n int, ts []int64, tcs []connector.TraceContext, keyOf func(int) string) ([]Mark, func()) {
	start := tr.seq
	tr.seq += int64(n)
	var ps []parentMark
	if tr.samp.Parent && len(tcs) > 0 {
		ps = tr.parents(sc, n, tcs)
	}
	kx := tr.keyed[:0]
	if keyOf != nil && tr.samp.Key != "" {
		for i := range n {
			if keyOf(i) == tr.samp.Key {
				kx = append(kx, i)
			}
		}
		tr.keyed = kx
	}
	if tr.next >= tr.seq && len(ps) == 0 && len(kx) == 0 {
		return nil, nil
	}
	st := tr.stage(sc)
	if len(st.spans) > 0 { // a source is not re-entered; be safe if it were
		st = &stageTrace{source: st.source}
	}
	var marks []Mark
	var at trace.SpanEventOption
	for pi, ki := 0, 0; ; {
		// the next record sampled by the ratio, by its trace context or by
		// its key, whichever comes first (several may pick the same)
		i, ratio, parent, bykey := n, false, false, false
		if tr.next < tr.seq {
			i, ratio = int(tr.next-start), true
		}
		if pi < len(ps) && ps[pi].i <= i {
			if ps[pi].i < i {
				i, ratio = ps[pi].i, false
			}
			parent = true
		}
		if ki < len(kx) && kx[ki] <= i {
			if kx[ki] < i {
				i, ratio, parent = kx[ki], false, false
			}
			bykey = true
		}
		if i >= n {
			break
		}
		if ratio {
			tr.next += 1 + tr.gap()
		}
		if bykey {
			ki++
		}
		var psc trace.SpanContext
		if parent {
			psc = ps[pi].sc
			pi++
			if !ratio && !bykey && !psc.IsSampled() {
				continue // the caller did not sample it, nor do the ratio and the key
			}
		}
		sampler := "ratio"
		switch {
		case psc.IsSampled():
			sampler = "parent"
		case bykey && !ratio:
			sampler = "key"
		}
		id := recordID(sc, start+int64(i))
		a := append(append(tr.attrs[:0], st.source...), attribute.String("sluice.record.id", id), attribute.String("sluice.sampler", sampler))
		if bykey {
			a = append(a, attribute.String("sluice.key", tr.samp.Key))
		}
		if ts != nil {
			a = append(a, attribute.Int64("sluice.event_time", ts[i]))
		}
		tr.attrs = a
		if at == nil {
			at = trace.WithTimestamp(tr.now())
		}
		ctx := tr.base
		opts := append(tr.opts[:0], at, producer)
		if psc.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, psc)
		} else {
			opts = append(opts, newRoot)
		}
		tr.opts = opts
		sctx, span := tr.t.Start(ctx, sc.Name, opts...)
		if !span.SpanContext().IsSampled() { // the provider's sampler keeps nothing
			span.End(at)
			continue
		}
		span.SetAttributes(a...) // see pass
		marks = append(marks, Mark{I: int32(i), ID: id, SC: span.SpanContext(), ctx: sctx})
		st.spans = append(st.spans, span)
	}
	if len(marks) == 0 {
		return nil, nil
	}
	return marks, func() {
		end := []trace.SpanEndOption{trace.WithTimestamp(tr.now())}
		for i, s := range st.spans {
			s.End(end...)
			st.spans[i] = nil
		}
		st.spans = st.spans[:0]
	}
}

var (
	producer = trace.WithSpanKind(trace.SpanKindProducer)
	newRoot  = trace.WithNewRoot()
	rootOpts = []trace.SpanStartOption{newRoot, producer}
)

func (tr *Tracer) common(sc *Ctx, role string) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("sluice.role", role),
		attribute.String("sluice.topology", tr.topology),
		attribute.String("sluice.operator", sc.Name),
		attribute.String("sluice.kind", sc.Kind),
		attribute.Int("sluice.instance", sc.Instance),
	}
}

// pass starts the span of every marked record at stage sc and moves its
// mark to it; keyOf, when set, gives the key of record i. It returns the
// function that ends the spans. The attributes the spans share are built
// once per stage (and per upstream edge), the spans of a batch start at one
// timestamp and end together, at another.
func (tr *Tracer) pass(sc *Ctx, marks []Mark, ts []int64, keyOf func(i int) string, links func(i int) []trace.Link) func() {
	st := tr.stage(sc)
	nested := len(st.spans) > 0
	if nested { // re-entered with spans open: keep them apart
		st = &stageTrace{pass: st.pass, fused: st.fused}
	}
	var hd [6]attribute.KeyValue
	h := hd[:0]
	if sc.Head && tr.head {
		if tr.depth != nil {
			tr.queue = tr.depth()
		}
		edge, ok := tr.edges[tr.edge]
		if !ok {
			if tr.edges == nil {
				tr.edges = map[string]attribute.KeyValue{}
			}
			edge = attribute.String("sluice.edge", tr.edge+"->"+sc.Name)
			tr.edges[tr.edge] = edge
		}
		h = append(h, edge, attribute.String("sluice.edge.kind", tr.ekind),
			attribute.Int("sluice.queue.depth", tr.queue), attribute.String("sluice.mailbox.policy", tr.policy))
		if tr.wait >= 0 {
			h = append(h, attribute.Int64("sluice.queue.wait_us", tr.wait))
		}
		if tr.remote {
			h = append(h, attribute.Bool("sluice.edge.remote", true))
		}
	} else {
		h = append(h, st.fused...)
	}
	at := trace.WithTimestamp(tr.now())
	for j := range marks {
		m := &marks[j]
		a := append(append(append(tr.attrs[:0], st.pass...), attribute.String("sluice.record.id", m.ID)), h...)
		if ts != nil && int(m.I) < len(ts) {
			a = append(a, attribute.Int64("sluice.event_time", ts[m.I]))
		}
		if keyOf != nil {
			a = append(a, attribute.String("sluice.key", keyOf(int(m.I))))
		}
		tr.attrs = a
		opts := append(tr.opts[:0], at)
		if links != nil {
			if ls := links(int(m.I)); len(ls) > 0 {
				opts = append(opts, trace.WithLinks(ls...))
			}
		}
		tr.opts = opts
		ctx, span := tr.t.Start(tr.parent(m), sc.Name, opts...)
		// Set after the start rather than given to it (WithAttributes):
		// the SDK copies them once instead of three times. The provider's
		// sampler does not see them (docs/tracing.md).
		span.SetAttributes(a...)
		st.spans = append(st.spans, span)
		m.SC, m.ctx = span.SpanContext(), ctx
		m.hops++
	}
	sc.marks = marks
	if nested { // these spans end by a closure of their own
		spans := st.spans
		return func() {
			sc.marks = nil
			end := []trace.SpanEndOption{trace.WithTimestamp(tr.now())}
			for _, s := range spans {
				s.End(end...)
			}
		}
	}
	return st.end
}

// Pass is the helper stages call at the top of Push for a batch with
// marks: it starts their spans and returns the function that ends them
// (nil when the batch has no sampled record).
func (sc *Ctx) Pass(marks []Mark, ts []int64) func() {
	if len(marks) == 0 || sc.Tracer == nil {
		return nil
	}
	return sc.Tracer.pass(sc, marks, ts, nil, nil)
}

// markOf is the mark of record i of the batch the stage is processing,
// nil when it is not sampled.
func (sc *Ctx) markOf(i int) *Mark {
	for j := range sc.marks {
		if int(sc.marks[j].I) == i {
			return &sc.marks[j]
		}
	}
	return nil
}

// KeyString is a key as spans carry it (sluice.key).
func KeyString(k any) string {
	switch k := k.(type) {
	case string:
		return k
	case int:
		return strconv.Itoa(k)
	case int64:
		return strconv.FormatInt(k, 10)
	case int32:
		return strconv.FormatInt(int64(k), 10)
	case uint64:
		return strconv.FormatUint(k, 10)
	}
	return fmt.Sprint(k)
}

// passKeyed is Pass for a keyed stage: spans carry the record's key, and
// a tracer sampling by key starts the trace of each record of the key that
// is not sampled yet (inserting its mark in b.Tr).
func passKeyed[K comparable, T any](sc *Ctx, b *Batch[T], key func(T) K) func() {
	return passLinked(sc, b, key, nil)
}

// passLinked is passKeyed with links (a join's partners) for record i.
func passLinked[K comparable, T any](sc *Ctx, b *Batch[T], key func(T) K, links func(i int) []trace.Link) func() {
	tr := sc.Tracer
	if tr == nil {
		return nil
	}
	if tr.samp.Key != "" {
		sampleKeys(tr, sc, b, func(i int) string { return KeyString(key(b.Vs[i])) })
	}
	if len(b.Tr) == 0 {
		return nil
	}
	return tr.pass(sc, b.Tr, b.Ts, func(i int) string { return KeyString(key(b.Vs[i])) }, links)
}

// sampleKeys starts a trace for the records of b whose key is the
// sampled key and that carry none yet.
func sampleKeys[T any](tr *Tracer, sc *Ctx, b *Batch[T], keyOf func(int) string) {
	var add []Mark
	j := 0
	for i := range b.Vs {
		for j < len(b.Tr) && int(b.Tr[j].I) < i {
			j++
		}
		if j < len(b.Tr) && int(b.Tr[j].I) == i {
			continue
		}
		if keyOf(i) != tr.samp.Key {
			continue
		}
		id := sc.Name + "/" + strconv.Itoa(sc.Instance) + "/key/" + strconv.FormatInt(tr.seq, 10)
		tr.seq++
		// The root is a zero-length span at the operator that found the
		// key: the record's pass span there is its child.
		_, root := tr.t.Start(tr.base, sc.Name+" key", append(rootOpts, trace.WithAttributes(append(tr.common(sc, "source"),
			attribute.String("sluice.record.id", id), attribute.String("sluice.sampler", "key"), attribute.String("sluice.key", tr.samp.Key))...))...)
		root.End()
		if root.SpanContext().IsSampled() {
			add = append(add, Mark{I: int32(i), ID: id, SC: root.SpanContext()})
		}
	}
	if len(add) > 0 {
		b.Tr = mergeMarks(b.Tr, add)
	}
}

// mergeMarks merges two lists of marks in order of I.
func mergeMarks(a, b []Mark) []Mark {
	out := make([]Mark, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if j == len(b) || (i < len(a) && a[i].I < b[j].I) {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	return out
}

// Event adds an event to the spans of the marked records of the stage
// (retry, dead letter): a short span with the event, child of the
// record's last span.
func (sc *Ctx) Event(m *Mark, name string, attrs ...attribute.KeyValue) {
	tr := sc.Tracer
	if tr == nil || m == nil {
		return
	}
	all := append(tr.common(sc, name), attribute.String("sluice.record.id", m.ID))
	_, span := tr.t.Start(tr.parent(m), sc.Name+" "+name, trace.WithAttributes(all...))
	span.AddEvent(name, trace.WithAttributes(attrs...))
	span.End()
}

// linkChunk is how many links one span carries: under the SDK's default
// limit of 128, so that none is cut.
const linkChunk = 100

// maxContributors bounds the sampled contributors a result keeps.
const maxContributors = 10_000

// contributors are the sampled records that went into one result.
type contributors struct {
	marks   []Mark
	dropped int
}

func (c *contributors) add(m Mark) {
	if len(c.marks) < maxContributors {
		c.marks = append(c.marks, m.held())
	} else {
		c.dropped++
	}
}

// emit starts the span of a result made from c's records at stage sc:
// child of the first, linked to all of them (linkChunk to a span, the rest
// in "inputs" child spans). It returns the result's mark and the function
// that ends the spans.
func (tr *Tracer) emit(sc *Ctx, c *contributors, key string, attrs ...attribute.KeyValue) (Mark, func()) {
	first := c.marks[0]
	all := append(tr.common(sc, "emit"), attrs...)
	all = append(all, attribute.String("sluice.record.id", first.ID), attribute.Int("sluice.links", len(c.marks)))
	if key != "" {
		all = append(all, attribute.String("sluice.key", key))
	}
	if c.dropped > 0 {
		all = append(all, attribute.Int("sluice.links.dropped", c.dropped))
	}
	links := func(ms []Mark) []trace.Link {
		ls := make([]trace.Link, len(ms))
		for i, m := range ms {
			ls[i] = trace.Link{SpanContext: m.SC}
		}
		return ls
	}
	// The first contributor is the parent (Jaeger folds a link to the
	// parent into the parent reference): the others are links.
	others := c.marks[1:]
	head := others[:min(linkChunk, len(others))]
	ctx, span := tr.t.Start(tr.parent(&first), sc.Name+" emit",
		trace.WithAttributes(all...), trace.WithLinks(links(head)...))
	for rest := others[len(head):]; len(rest) > 0; {
		chunk := rest[:min(linkChunk, len(rest))]
		rest = rest[len(chunk):]
		_, s := tr.t.Start(ctx, sc.Name+" inputs", trace.WithLinks(links(chunk)...),
			trace.WithAttributes(append(tr.common(sc, "links"), attribute.Int("sluice.links", len(chunk)))...))
		s.End()
	}
	return Mark{ID: first.ID, SC: span.SpanContext(), ctx: ctx}, func() { span.End() }
}

// joinMarks are the sampled records a join holds for one key, by their
// place in its buffers (not checkpointed: a restored join links to none).
type joinMarks struct {
	ls, rs map[int]Mark
}

// links are the links to the marks of one side, linkChunk at most.
func sideLinks(ms map[int]Mark) []trace.Link {
	var ls []trace.Link
	for _, m := range ms {
		if len(ls) == linkChunk {
			break
		}
		ls = append(ls, trace.Link{SpanContext: m.SC})
	}
	return ls
}

// Marked is a payload that may carry sampled records (a *Batch).
type Marked interface {
	Marks() (tr, gone []Mark)
	Forget()
}

// Shed ends the traces of sampled records that did not reach operator
// sc (dropped, spilled or shed at its input, as role says: "drop",
// "spill", "shed"): each gets a short span "<operator> <role>", child of
// its last span, with an event of that name saying why. It returns their
// span contexts, for the overflow episode to link. Safe for concurrent
// use (it reads only what NewTracer set).
func (tr *Tracer) Shed(sc *Ctx, ms []Mark, role, why string) []trace.SpanContext {
	out := make([]trace.SpanContext, 0, len(ms))
	for _, m := range ms {
		attrs := append(tr.common(sc, role), attribute.String("sluice.record.id", m.ID), attribute.String("sluice.reason", why))
		_, span := tr.t.Start(tr.parent(&m), sc.Name+" "+role, trace.WithAttributes(attrs...))
		span.AddEvent(role, trace.WithAttributes(attribute.String("sluice.reason", why)))
		out = append(out, span.SpanContext())
		span.End()
	}
	return out
}

// Episode starts the span of an overflow episode of sc's mailbox, from
// start to the moment End is called, linked to the sampled records the
// episode touched (Touched), linkChunk to a span, as a result's.
func (tr *Tracer) Episode(sc *Ctx, start time.Time) *Episode {
	return &Episode{tr: tr, sc: sc, start: start}
}

// Episode is one overflow episode's trace. Its methods are safe for
// concurrent use: mailboxes report from their senders' goroutines.
type Episode struct {
	tr    *Tracer
	sc    *Ctx
	start time.Time
	mu    sync.Mutex
	c     contributors
}

// Started moves the episode's start back to at (a mailbox reports it
// after its first drops, which began the span at their own time). It
// never moves the start later: a mailbox reports an episode's end and the
// next one's start from different goroutines, outside its lock, so the
// next start can arrive before the end of this episode, and a start after
// this one's is the next episode's (whose span then begins at its first
// drop after this one ends).
func (e *Episode) Started(at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if at.Before(e.start) {
		e.start = at
	}
}

// Touched adds sampled records the episode dropped, spilled or shed.
func (e *Episode) Touched(scs []trace.SpanContext) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, sc := range scs {
		e.c.add(Mark{SC: sc})
	}
}

// End ends the episode's span with attrs (its counts) at end.
func (e *Episode) End(end time.Time, attrs ...attribute.KeyValue) {
	e.mu.Lock()
	defer e.mu.Unlock()
	tr := e.tr
	all := append(tr.common(e.sc, "overflow"), attrs...)
	all = append(all, attribute.Int("sluice.links", len(e.c.marks)))
	if e.c.dropped > 0 {
		all = append(all, attribute.Int("sluice.links.dropped", e.c.dropped))
	}
	head := e.c.marks[:min(linkChunk, len(e.c.marks))]
	ctx, span := tr.t.Start(tr.base, "sluice.overflow", trace.WithNewRoot(), trace.WithTimestamp(e.start),
		trace.WithAttributes(all...), trace.WithLinks(markLinks(head)...))
	for rest := e.c.marks[len(head):]; len(rest) > 0; {
		chunk := rest[:min(linkChunk, len(rest))]
		rest = rest[len(chunk):]
		_, s := tr.t.Start(ctx, e.sc.Name+" inputs", trace.WithTimestamp(e.start), trace.WithLinks(markLinks(chunk)...),
			trace.WithAttributes(append(tr.common(e.sc, "links"), attribute.Int("sluice.links", len(chunk)))...))
		s.End(trace.WithTimestamp(end))
	}
	span.End(trace.WithTimestamp(end))
}

func markLinks(ms []Mark) []trace.Link {
	ls := make([]trace.Link, len(ms))
	for i, m := range ms {
		ls[i] = trace.Link{SpanContext: m.SC}
	}
	return ls
}

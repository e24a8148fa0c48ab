package engine

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/graph"
	"github.com/sluicehq/sluice/internal/stage"
	"github.com/sluicehq/sluice/mailbox"
)

// Unaligned checkpoints (docs/checkpoints.md; FLIP-76). A source sends
// actors.UnalignedBarrier envelopes, which overtake the records queued in
// the receiver's mailbox (mailbox.Urgent). On the first barrier of
// checkpoint n an instance records its state at once and sends the barrier
// on; the records that were sent before barrier n on each input channel
// and that it had not processed are the channel's in-flight state: it
// takes them from its stash and its mailbox (mailbox.Queued) without
// processing them, and from its input as they arrive until the channel's
// barrier (or the end of the channel). It processes all of them as usual
// afterwards. The state recorded does not include them: a job restored
// from the checkpoint processes them first (instance.replay), then its
// inputs, and each is counted once.
//
// Which records of channel c are in flight is decided by sequence numbers:
// upTo[c] is the sequence after the records of c that are in the state or
// recorded, and the barrier of c carries the sequence after the last
// record sent before it (until[c]). The records in [upTo, until) are in
// flight. A barrier overtakes the receiver's queue but not the sender's
// output queue (it waits there behind at most one batch of the sender's
// output, which the receiver's credits let through), so when it arrives
// every record before it is in the receiver's mailbox or stash.
//
// The watermarks among the in-flight records are recorded with them, at
// their place: a watermark envelope's Seq is that of the record sent after
// it, and a sender's watermarks grow on a channel, so recWm[c] (the newest
// watermark of c processed or recorded) tells a new one from one seen
// already, and the barrier's Wm (the sender's last watermark before it,
// untilWm[c]) those before the barrier from those after it at the same
// Seq. A restored instance replays each channel's records and watermarks
// in the order they were sent (restoreChannels), so it judges every
// replayed record (on time or late, which window) against the watermark it
// met in the first run. Idle marks are not recorded (a channel that was
// idle is active again from its first replayed record), nor is the order
// between channels.

// unalignedCp is an unaligned checkpoint an instance is taking.
type unalignedCp struct {
	id     uint64
	states map[string][]byte
	upTo   []uint64   // by channel: the records below are in the state or recorded
	until  []uint64   // by channel: the sequence of its barrier, when seen
	seen   []bool     // by channel: its barrier (or its end) is known
	recs   [][][]byte // by channel: the in-flight envelopes, encoded
	// pre by channel: the restored in-flight envelopes the instance had not
	// replayed yet, encoded (they come first, and their Seq are of the
	// launch that recorded them); recWm the newest watermark processed or
	// recorded, untilWm the last one sent before the channel's barrier,
	// when seen.
	pre            [][][]byte
	recWm, untilWm []int64
	// A Spill input by reference (spillref.go): the range of its queue
	// that holds in-flight records, and by channel the window of their
	// sequence numbers in it, [refLo, refHi).
	ref          mailbox.SpillRange
	refLo, refHi []uint64
	// The watermarks of channel c in the range are those in
	// (refWmLo[c], refWmHi[c]], when refWm[c].
	refWm            []bool
	refWmLo, refWmHi []int64
}

// checkUnaligned refuses a job with unaligned checkpoints that this engine
// cannot take without losing in-flight records.
func checkUnaligned(t *graph.Topology, p *graph.Plan) error {
	cfg := t.Config()
	pol := cfg.CheckpointPolicy
	if !pol.Unaligned && pol.AlignmentTimeout <= 0 {
		return nil
	}
	opt := "UnalignedCheckpoints"
	if !pol.Unaligned {
		opt = "AlignmentTimeout"
	}
	if cfg.CheckpointInterval <= 0 {
		return fmt.Errorf("%s needs Checkpoints(interval)", opt)
	}
	if cfg.Dist != nil {
		return fmt.Errorf("%s: unaligned checkpoints are built for jobs in one process only, not for a distributed job (its barriers cannot overtake records on the wire yet); use aligned checkpoints", opt)
	}
	for _, chain := range p.Chains {
		head := chain[0]
		if in := head.Input(); in != nil && in.Overflow != mailbox.OverflowBlock && in.Overflow != mailbox.OverflowSpill {
			return fmt.Errorf("%s: operator %q has a %s input: its drops would make the in-flight records a checkpoint holds disagree with what the operator processes; give it the Block or Spill policy, or use aligned checkpoints", opt, head.Name(), in.Overflow)
		}
	}
	return nil
}

// channelKey names input channel c of the instance in a checkpoint's
// Channels.
func (in *instance) channelKey(c int) string {
	return in.exec.plan.Chains[in.task][0].Name() + "/" + strconv.Itoa(in.idx) + "/in" + strconv.Itoa(c)
}

// onUnalignedBarrier: the barrier of unaligned checkpoint env.Mark arrived
// on channel env.Channel, ahead of the records queued before it.
func (in *instance) onUnalignedBarrier(env *actors.Envelope) {
	id := uint64(env.Mark)
	switch {
	case id <= in.answered || in.done || in.src != nil:
		return
	case in.ua != nil && in.ua.id > id:
		return // of a checkpoint given up for a later one
	case in.ua != nil && in.ua.id == id:
		in.uaSeen(env.Channel, env.Seq, env.Wm)
		in.uaCollect(in.queued(false), env.Channel)
		in.uaMaybeDone()
		return
	}
	in.startUnaligned(id, env.Channel, env.Seq, env.Wm)
}

// switchUnaligned: the job started checkpoint id unaligned, or switched it
// to unaligned (its alignment timed out). The instance takes it now,
// before any barrier of it arrives: its state then covers only records
// sent before every barrier of the checkpoint (a barrier reaches it before
// the records sent after it: an unaligned one overtakes them, an aligned
// one precedes them), and the records it processes from now until each
// channel's barrier are recorded as in flight. That is also how a
// checkpoint completes while an instance's input is ended by a finished
// source but still queued (its end is in the queue: nothing more comes on
// it).
func (in *instance) switchUnaligned(id uint64) {
	if id <= in.answered || in.done || in.src != nil || (in.ua != nil && in.ua.id >= id) {
		return
	}
	in.switchedTo = max(in.switchedTo, id)
	in.startUnaligned(id, -1, 0, 0)
}

// inQueue is what waits in an instance's input: its stash and its
// mailbox's messages (urgent first), then the encoded messages of its
// mailbox's spill.
type inQueue struct {
	msgs    []any
	spilled [][]byte
	ref     mailbox.SpillRange // the range of the spill queue spilled is, when by reference
}

// queued returns what waits in the instance's input, taken from its
// mailbox in one lock (see mailbox.QueuedAndSpilled); with byRef and
// spill ranges for the job, with the spill's range, pinned
// (mailbox.QueuedAndSpillRange).
func (in *instance) queued(byRef bool) inQueue {
	var q inQueue
	for _, env := range in.stash {
		q.msgs = append(q.msgs, env)
	}
	if mb := in.mb.Load(); mb != nil && byRef && in.exec.spillRefs {
		msgs, spilled, ref, err := mb.QueuedAndSpillRange()
		if err != nil {
			panic(fmt.Errorf("unaligned checkpoint: read the records spilled in the input: %w", err))
		}
		q.msgs, q.spilled, q.ref = append(q.msgs, msgs...), spilled, ref
	} else if mb != nil {
		msgs, spilled, err := mb.QueuedAndSpilled()
		if err != nil {
			panic(fmt.Errorf("unaligned checkpoint: read the records spilled in the input: %w", err))
		}
		q.msgs, q.spilled = append(q.msgs, msgs...), spilled
	}
	return q
}

// startUnaligned starts unaligned checkpoint id, whose barrier arrived on
// channel ch with sequence seq after watermark wm (ch -1: none arrived, the
// job switched it): the state is recorded now, the barrier goes to every
// output, and the in-flight records queued are recorded.
func (in *instance) startUnaligned(id uint64, ch int, seq uint64, wm int64) {
	n := len(in.ins)
	ua := &unalignedCp{id: id, upTo: slices.Clone(in.nextIn), until: make([]uint64, n), seen: make([]bool, n), recs: make([][][]byte, n),
		pre: make([][][]byte, n), recWm: slices.Clone(in.inWm), untilWm: make([]int64, n)}
	// An alignment of this checkpoint becomes unaligned: its channels have
	// delivered their barriers, and what they sent after is held. An older
	// alignment is given up. Either way the held envelopes go back first.
	if in.align.id != 0 {
		if in.align.id == id {
			for c, s := range in.align.seen {
				if s { // its watermarks before the barrier are processed
					ua.seen[c], ua.until[c], ua.untilWm[c] = true, in.align.seqs[c], in.inWm[c]
				}
			}
		}
		in.stash = append(in.align.held, in.stash...)
		in.align = alignment{}
	}
	if in.ua != nil { // an older one, given up for this one
		in.ua = nil
	}
	if ch >= 0 {
		ua.seen[ch], ua.until[ch], ua.untilWm[ch] = true, seq, wm
	}
	in.em.Flush()
	ua.states = in.snapshot(id)
	in.ua = ua
	// Restored in-flight records not yet processed come first on their
	// channels.
	for _, env := range in.replay {
		c := env.Channel
		b, err := in.codec.Encode(env)
		if err != nil {
			panic(fmt.Errorf("unaligned checkpoint %d: record the restored in-flight records of input channel %d: %w", id, c, err))
		}
		ua.pre[c] = append(ua.pre[c], b)
		if env.Kind == actors.Watermark {
			ua.recWm[c] = max(ua.recWm[c], env.Mark)
		}
	}
	q := in.queued(true)
	if !q.ref.Empty() {
		ua.ref, ua.refLo, ua.refHi = q.ref, make([]uint64, n), make([]uint64, n)
		ua.refWm, ua.refWmLo, ua.refWmHi = make([]bool, n), make([]int64, n), make([]int64, n)
		in.spillPins = append(in.spillPins, spillPin{id: id, from: q.ref.From})
	}
	in.uaCollect(q, -1)
	for _, oc := range in.outs {
		in.enqueue(oc, &actors.Envelope{Kind: actors.UnalignedBarrier, Mark: int64(id)})
	}
	in.uaMaybeDone()
}

// uaCollect records the in-flight data among queued messages (on channel
// only, unless it is -1). Barriers of the checkpoint among them (first the
// urgent ones, which overtook the rest) and ends of channels mark where
// their channel's in-flight records stop. Spilled records are kept as the
// spill encoded them (with the same codec), without decoding them.
func (in *instance) uaCollect(q inQueue, only int) {
	for _, msg := range q.msgs {
		if env, ok := msg.(*actors.Envelope); ok && env.Kind == actors.UnalignedBarrier && uint64(env.Mark) == in.ua.id {
			in.uaSeen(env.Channel, env.Seq, env.Wm)
		}
	}
	for _, msg := range q.msgs {
		if env, ok := msg.(*actors.Envelope); ok && (only < 0 || env.Channel == only) {
			in.uaArrived(env)
		}
	}
	for _, data := range q.spilled {
		h, err := stage.DecodeHeader(data)
		if err != nil {
			panic(fmt.Errorf("unaligned checkpoint %d: a spilled envelope: %w", in.ua.id, err))
		}
		if only >= 0 && h.Channel != only {
			continue
		}
		in.uaArrivedHeader(h, data, !q.ref.Empty())
	}
}

// uaArrivedHeader is uaArrived for an encoded envelope; byRef: of the
// spill range the checkpoint refers to, not copied.
func (in *instance) uaArrivedHeader(h stage.Header, data []byte, byRef bool) {
	ua, c := in.ua, h.Channel
	if c < 0 || c >= len(ua.seen) {
		return
	}
	switch h.Kind {
	case actors.Data:
		if h.Seq < ua.upTo[c] || (ua.seen[c] && h.Seq >= ua.until[c]) {
			return
		}
		if byRef {
			if ua.refHi[c] == 0 {
				ua.refLo[c] = h.Seq
			}
			ua.refHi[c] = h.Seq + uint64(h.Count)
		} else {
			ua.recs[c] = append(ua.recs[c], bytes.Clone(data))
		}
		ua.upTo[c] = h.Seq + uint64(h.Count)
	case actors.Watermark:
		if !in.uaWatermark(c, h.Mark) {
			return
		}
		if byRef {
			if !ua.refWm[c] {
				ua.refWm[c], ua.refWmLo[c] = true, ua.recWm[c]
			}
			ua.refWmHi[c] = h.Mark
		} else {
			ua.recs[c] = append(ua.recs[c], bytes.Clone(data))
		}
		ua.recWm[c] = h.Mark
	case actors.Barrier: // in order: what came before it on c is seen
		if uint64(h.Mark) == ua.id {
			in.uaSeen(c, h.Seq, ua.recWm[c])
		}
	case actors.EndOfStream:
		in.uaSeen(c, h.Seq, ua.recWm[c])
	}
}

// uaWatermark says whether watermark wm of channel c is in flight for the
// checkpoint: newer than those processed or recorded, and sent before the
// channel's barrier.
func (in *instance) uaWatermark(c int, wm int64) bool {
	ua := in.ua
	return wm > ua.recWm[c] && (!ua.seen[c] || wm <= ua.untilWm[c])
}

// uaArrived records env if it is in flight for the checkpoint, or notes
// where its channel's in-flight records end.
func (in *instance) uaArrived(env *actors.Envelope) {
	ua, c := in.ua, env.Channel
	if c < 0 || c >= len(ua.seen) {
		return
	}
	switch env.Kind {
	case actors.Data:
		if env.Seq < ua.upTo[c] || (ua.seen[c] && env.Seq >= ua.until[c]) {
			return // in the state, recorded already, or after the barrier
		}
		in.uaEncode(c, env)
		ua.upTo[c] = env.Seq + uint64(env.Count)
	case actors.Watermark:
		if in.uaWatermark(c, env.Mark) {
			in.uaEncode(c, env)
			ua.recWm[c] = env.Mark
		}
	case actors.Barrier: // in order: what came before it on c is seen
		if uint64(env.Mark) == ua.id {
			in.uaSeen(c, env.Seq, ua.recWm[c])
		}
	case actors.EndOfStream:
		in.uaSeen(c, env.Seq, ua.recWm[c])
	}
}

// uaSeen: the barrier of channel c follows the records before seq and the
// watermarks up to wm.
func (in *instance) uaSeen(c int, seq uint64, wm int64) {
	if ua := in.ua; c >= 0 && c < len(ua.seen) && !ua.seen[c] {
		ua.seen[c], ua.until[c], ua.untilWm[c] = true, seq, wm
	}
}

func (in *instance) uaEncode(c int, env *actors.Envelope) {
	b, err := in.codec.Encode(env)
	if err != nil {
		panic(fmt.Errorf("unaligned checkpoint %d: record the in-flight records of input channel %d: %w", in.ua.id, c, err))
	}
	in.ua.recs[c] = append(in.ua.recs[c], b)
}

// uaMaybeDone acknowledges the unaligned checkpoint once every channel's
// in-flight records are recorded.
func (in *instance) uaMaybeDone() {
	ua := in.ua
	if ua == nil {
		return
	}
	for c := range ua.seen {
		if !in.finishedIn[c] && (!ua.seen[c] || ua.upTo[c] < ua.until[c] || ua.recWm[c] < ua.untilWm[c]) {
			return
		}
	}
	in.ua = nil
	in.answered = max(in.answered, ua.id)
	var chans map[string][]byte
	for c, recs := range ua.recs {
		if len(recs) > 0 {
			if chans == nil {
				chans = map[string][]byte{}
			}
			chans[in.channelKey(c)] = encodeChannel(recs)
		}
	}
	for c, pre := range ua.pre {
		if len(pre) > 0 {
			if chans == nil {
				chans = map[string][]byte{}
			}
			chans[in.channelKey(c)+replayedSuffix] = encodeChannel(pre)
		}
	}
	for c := range ua.refHi {
		hi := ua.refHi[c]
		if hi > ua.refLo[c] || ua.refWm[c] {
			if ua.seen[c] {
				hi = max(min(hi, ua.until[c]), ua.refLo[c])
			}
			if chans == nil {
				chans = map[string][]byte{}
			}
			r := spillRef{Range: ua.ref, Lo: ua.refLo[c], Hi: hi}
			if ua.refWm[c] {
				r.WmLo, r.WmHi = ua.refWmLo[c], ua.refWmHi[c]
			}
			chans[in.channelKey(c)+spillRefSuffix] = encodeSpillRef(r)
		}
	}
	in.sendAck(ackOf(in, ua.id, ua.states, chans))
}

// encodeChannel frames the encoded envelopes of a channel's in-flight
// records: each as its length (uvarint) and its bytes.
func encodeChannel(recs [][]byte) []byte {
	n := 0
	for _, r := range recs {
		n += len(r) + binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	for _, r := range recs {
		b = binary.AppendUvarint(b, uint64(len(r)))
		b = append(b, r...)
	}
	return b
}

// errChannelState: a checkpoint's in-flight records do not decode.
var errChannelState = errors.New("malformed in-flight records")

// decodeChannel decodes what encodeChannel wrote, each envelope with the
// receiving task's codec (bounded, it never panics), as records and
// watermarks of input channel c. (Checkpoints written before watermarks
// were recorded hold records only, and decode as they did.)
func decodeChannel(data []byte, codec mailbox.Codec, c int) ([]*actors.Envelope, error) {
	var out []*actors.Envelope
	for off := 0; off < len(data); {
		n, k := binary.Uvarint(data[off:])
		if k <= 0 || n > uint64(len(data)-off-k) {
			return nil, fmt.Errorf("%w: a length at byte %d", errChannelState, off)
		}
		off += k
		msg, err := codec.Decode(data[off : off+int(n)])
		if err != nil {
			return nil, fmt.Errorf("%w: the envelope at byte %d: %w", errChannelState, off, err)
		}
		env, ok := msg.(*actors.Envelope)
		if !ok || env.Kind != actors.Data && env.Kind != actors.Watermark {
			return nil, fmt.Errorf("%w: the envelope at byte %d is neither a batch of records nor a watermark", errChannelState, off)
		}
		env.Channel = c
		out = append(out, env)
		off += int(n)
	}
	return out, nil
}

// replayedSuffix ends the Channels key of a channel's restored in-flight
// envelopes that an instance had not replayed when it took the checkpoint:
// they go first, in their order (their Seq are of an earlier launch).
const replayedSuffix = "/replayed"

// restoreChannels gives every instance the in-flight records the restored
// checkpoint holds for its input channels, to process before its inputs.
// Records for a channel no instance has (the job changed its parallelism
// or its operators) fail the start rather than be lost.
func (x *execution) restoreChannels() error {
	if x.restored == nil || len(x.restored.Channels) == 0 {
		return nil
	}
	used := 0
	for id, chain := range x.plan.Chains {
		if chain[0].Role() == graph.RoleSource {
			continue
		}
		for _, in := range x.instances[id] {
			in.replay = nil
			var byChan [][]*actors.Envelope
			for c := range in.ins {
				fail := func(err error) error {
					return fmt.Errorf("operator %q instance %d: checkpoint %d: input channel %d: %w", chain[0].Name(), in.idx, x.restored.ID, c, err)
				}
				var pre, cur []*actors.Envelope
				if data, ok := x.restored.Channels[in.channelKey(c)+replayedSuffix]; ok {
					used++
					envs, err := decodeChannel(data, in.codec, c)
					if err != nil {
						return fail(err)
					}
					pre = envs
				}
				if data, ok := x.restored.Channels[in.channelKey(c)]; ok {
					used++
					envs, err := decodeChannel(data, in.codec, c)
					if err != nil {
						return fail(err)
					}
					cur = envs
				}
				if data, ok := x.restored.Channels[in.channelKey(c)+spillRefSuffix]; ok {
					used++
					envs, err := x.restoreSpillRef(data, in.codec, c)
					if err != nil {
						return fail(err)
					}
					cur = append(cur, envs...)
				}
				// The copied envelopes and those of the spill range
				// interleave as they were sent: by sequence number, the
				// watermarks sent before a record ahead of it.
				slices.SortStableFunc(cur, sentOrder)
				byChan = append(byChan, append(pre, cur...))
			}
			// The order between channels is not recorded: one envelope of
			// each in turn.
			for more := true; more; {
				more = false
				for c, envs := range byChan {
					if len(envs) > 0 {
						in.replay = append(in.replay, envs[0])
						byChan[c], more = envs[1:], true
					}
				}
			}
		}
	}
	if used != len(x.restored.Channels) {
		var keys []string
		for k := range x.restored.Channels {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return fmt.Errorf("checkpoint %d holds in-flight records for %d input channels (%v), of which this job has %d: restore it with the topology and parallelism that took it", x.restored.ID, len(keys), keys, used)
	}
	return nil
}

// sentOrder orders the envelopes of one channel and launch as their sender
// sent them: a watermark's Seq is that of the record sent after it, and a
// sender's watermarks grow.
func sentOrder(a, b *actors.Envelope) int {
	if c := cmp.Compare(a.Seq, b.Seq); c != 0 {
		return c
	}
	if (a.Kind == actors.Data) != (b.Kind == actors.Data) {
		if a.Kind == actors.Data {
			return 1
		}
		return -1
	}
	return cmp.Compare(a.Mark, b.Mark)
}

// restoreSpillRef reads the records of channel c that a checkpoint's spill
// range names.
func (x *execution) restoreSpillRef(data []byte, codec mailbox.Codec, c int) ([]*actors.Envelope, error) {
	r, err := decodeSpillRef(data)
	if err != nil {
		return nil, err
	}
	st, err := x.sys.SpillStore()
	if err != nil {
		return nil, fmt.Errorf("spill store: %w", err)
	}
	return readSpillRef(st, r, codec, c)
}

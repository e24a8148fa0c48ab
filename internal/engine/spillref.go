package engine

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/stage"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/persistence"
)

// Spill inputs by reference (docs/checkpoints.md, Unaligned). An unaligned
// checkpoint of a job whose checkpoints are in the system's store (the
// same bbolt file as its spill queues) records the records that an
// instance's barrier overtook in its Spill input's queue as the queue's
// range, not as a copy: the Channels entry "<channel key>/spill" holds the
// queue, the range of its messages, the channel's window of sequence
// numbers and the bounds of its watermarks in the range (spillRef). The instance pins the range (mailbox.PinSpill): the
// groups that hold it stay in the store once processed, until a later
// checkpoint completed. Each launch's queues have a name of their own
// (launchTag), so a restarted job's new queues never replace the ones the
// checkpoint it restores refers to; those are deleted once a checkpoint of
// the new launch completed, and any other queue of the job's (left by a
// crash) when it launches.

// spillRefSuffix ends the Channels key of a channel's spill range.
const spillRefSuffix = "/spill"

// spillRef is a channel's in-flight records held in a spill queue: the
// data messages of Range on the channel with sequence numbers in [Lo, Hi),
// and its watermark messages in (WmLo, WmHi] (none when they are equal).
type spillRef struct {
	Range      mailbox.SpillRange
	Lo, Hi     uint64
	WmLo, WmHi int64
}

// The versions of a spill range's encoding: 1 without watermarks (written
// before they were recorded; still read), 2 with them.
const (
	spillRefV1      = 1
	spillRefVersion = 2
)

// encodeSpillRef: version, the queue's name (length and bytes), From, To,
// Lo, Hi (uvarints), WmLo, WmHi (varints).
func encodeSpillRef(r spillRef) []byte {
	b := []byte{spillRefVersion}
	b = binary.AppendUvarint(b, uint64(len(r.Range.Queue)))
	b = append(b, r.Range.Queue...)
	for _, v := range []uint64{r.Range.From, r.Range.To, r.Lo, r.Hi} {
		b = binary.AppendUvarint(b, v)
	}
	b = binary.AppendVarint(b, r.WmLo)
	return binary.AppendVarint(b, r.WmHi)
}

// maxQueueName bounds a queue name read from a checkpoint.
const maxQueueName = 4096

// decodeSpillRef decodes what encodeSpillRef wrote; anything else is an
// error wrapping errChannelState.
func decodeSpillRef(b []byte) (spillRef, error) {
	var r spillRef
	if len(b) == 0 || b[0] != spillRefV1 && b[0] != spillRefVersion {
		return r, fmt.Errorf("%w: a spill range of version %d (this build reads versions 1 and 2)", errChannelState, firstByte(b))
	}
	v2 := b[0] == spillRefVersion
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > maxQueueName || n > uint64(len(b)-k) {
		return r, fmt.Errorf("%w: a spill range's queue name", errChannelState)
	}
	r.Range.Queue, b = string(b[k:k+int(n)]), b[k+int(n):]
	for _, v := range []*uint64{&r.Range.From, &r.Range.To, &r.Lo, &r.Hi} {
		x, k := binary.Uvarint(b)
		if k <= 0 {
			return r, fmt.Errorf("%w: a spill range's bounds", errChannelState)
		}
		*v, b = x, b[k:]
	}
	if v2 {
		for _, v := range []*int64{&r.WmLo, &r.WmHi} {
			x, k := binary.Varint(b)
			if k <= 0 {
				return r, fmt.Errorf("%w: a spill range's watermark bounds", errChannelState)
			}
			*v, b = x, b[k:]
		}
	}
	if len(b) != 0 || r.Range.Queue == "" || r.Range.To < r.Range.From || r.Hi < r.Lo || r.WmHi < r.WmLo {
		return r, fmt.Errorf("%w: a spill range (queue %q, messages %d to %d, records %d to %d, watermarks %d to %d)", errChannelState, r.Range.Queue, r.Range.From, r.Range.To, r.Lo, r.Hi, r.WmLo, r.WmHi)
	}
	return r, nil
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// readSpillRef returns the records and watermarks of channel c that r
// names, decoded with the receiving task's codec, in order. The range is
// read one message at a time (mailbox.SpillStore.EachInRange): only the
// channel's in-flight envelopes are kept, decoded.
func readSpillRef(st *mailbox.SpillStore, r spillRef, codec mailbox.Codec, c int) ([]*actors.Envelope, error) {
	var out []*actors.Envelope
	err := st.EachInRange(r.Range, func(data []byte, _ bool) error {
		h, err := stage.DecodeHeader(data)
		if err != nil {
			return fmt.Errorf("%w: a spilled envelope: %w", errChannelState, err)
		}
		if h.Channel != c {
			return nil
		}
		switch h.Kind {
		case actors.Data:
			if h.Seq < r.Lo || h.Seq >= r.Hi {
				return nil
			}
		case actors.Watermark:
			if h.Mark <= r.WmLo || h.Mark > r.WmHi {
				return nil
			}
		default:
			return nil
		}
		msg, err := codec.Decode(bytes.Clone(data)) // data is the store's, valid during the call only
		if err != nil {
			return fmt.Errorf("%w: a spilled envelope: %w", errChannelState, err)
		}
		env, ok := msg.(*actors.Envelope)
		if !ok {
			return fmt.Errorf("%w: a spilled message is not an envelope", errChannelState)
		}
		env.Channel = c
		out = append(out, env)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// spillQueue names the spill queue of instance idx of operator op.
func (x *execution) spillQueue(op string, idx int) string {
	if x.spillRefs {
		return fmt.Sprintf("%s/%s.%d@%s", url.PathEscape(x.topo.Name()), op, idx, x.launchTag)
	}
	return fmt.Sprintf("%s/%s.%d", x.jobPID.Id, op, idx)
}

// newLaunchTag names the queues of the launch about to be built, and
// deletes the job's queues that the checkpoint it restores does not refer
// to (left in the store by a crash).
func (x *execution) newLaunchTag() error {
	if !x.spillRefs {
		return nil
	}
	x.launchTag = rand.Text()[:12]
	x.oldQueues = true
	keep := map[string]bool{}
	if x.restored != nil {
		for k, v := range x.restored.Channels {
			if strings.HasSuffix(k, spillRefSuffix) {
				if r, err := decodeSpillRef(v); err == nil {
					keep[r.Range.Queue] = true
				}
			}
		}
	}
	return x.deleteQueues(func(q string) bool { return !keep[q] })
}

// dropOldQueues deletes the queues of earlier launches once a checkpoint of
// this one completed (it refers to none of them).
func (x *execution) dropOldQueues() {
	if !x.spillRefs || !x.oldQueues {
		return
	}
	x.oldQueues = false
	suffix := "@" + x.launchTag
	if err := x.deleteQueues(func(q string) bool { return !strings.HasSuffix(q, suffix) }); err != nil {
		x.sys.Logger().Error("delete the spill queues of an earlier run", "job", x.topo.Name(), "err", err)
	}
}

// deleteQueues deletes the job's spill queues (of any launch) that del
// says.
func (x *execution) deleteQueues(del func(queue string) bool) error {
	st, err := x.sys.SpillStore()
	if err != nil {
		return fmt.Errorf("spill store: %w", err)
	}
	names, err := st.QueueNames()
	if err != nil {
		return fmt.Errorf("spill store: %w", err)
	}
	prefix := url.PathEscape(x.topo.Name()) + "/" // escaped: job "a" must not take job "a/b"'s queues
	for _, q := range names {
		rest, ok := strings.CutPrefix(q, prefix)
		if !ok || !strings.Contains(rest, "@") || !del(q) {
			continue
		}
		if err := st.DeleteQueue(q); err != nil {
			return fmt.Errorf("spill store: delete queue %q: %w", q, err)
		}
	}
	return nil
}

// noteRestored records in the statistics the checkpoint the run restored.
func (x *execution) noteRestored(cp *persistence.Checkpoint) {
	refs := 0
	for k := range cp.Channels {
		if strings.HasSuffix(k, spillRefSuffix) {
			refs++
		}
	}
	x.cpStatsMu.Lock()
	x.cpStats.RestoredFrom, x.cpStats.RestoredTime, x.cpStats.RestoredInFlight = cp.ID, cp.Time, len(cp.Channels)
	x.cpStats.RestoredSpillRefs = refs
	x.cpStatsMu.Unlock()
}

// spillPin is the start of a spill range that checkpoint id refers to.
type spillPin struct{ id, from uint64 }

// unpinSpill lets go of the spill ranges of the checkpoints older than id,
// which completed (the store keeps it instead).
func (in *instance) unpinSpill(id uint64) {
	if len(in.spillPins) == 0 {
		return
	}
	in.spillPins = slices.DeleteFunc(in.spillPins, func(p spillPin) bool { return p.id < id })
	var floor uint64
	for _, p := range in.spillPins {
		if floor == 0 || p.from < floor {
			floor = p.from
		}
	}
	if mb := in.mb.Load(); mb != nil {
		mb.PinSpill(floor)
	}
}

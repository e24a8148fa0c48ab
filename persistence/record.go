package persistence

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// The records of the bbolt stores are msgpack arrays whose first element is
// the record format version:
//
//	event:      [1, type string, data bin, unix seconds, nanoseconds]
//	snapshot:   [1, data bin, unix seconds, nanoseconds]
//	checkpoint: [1, id, unix seconds, nanoseconds, {instance: state bin}, {partition: offset}]
//	log entry:  [1, [[persistence id, first seq, [event record bin, ...]], ...]]
//	run:        [1, [event record bin, ...]]
//
// A journal keeps its events in runs of consecutive events (up to runEvents
// of them), each keyed by the sequence number of its first event, so that
// compaction writes a value per run rather than per event. A snapshot's
// sequence number and a checkpoint's id are their records' keys. Keys are
// big-endian.
// A record of a newer version is refused, never misread.
const recordVersion = 1

func appendArrayLen(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x90|byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(dst, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdd), uint32(n))
}

func appendMapLen(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x80|byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(dst, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdf), uint32(n))
}

func appendUint(dst []byte, v uint64) []byte {
	if v < 128 {
		return append(dst, byte(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xcf), v)
}

func appendInt(dst []byte, v int64) []byte {
	if v >= 0 && v < 128 {
		return append(dst, byte(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xd3), uint64(v))
}

func appendStr(dst []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		dst = append(dst, 0xa0|byte(n))
	case n <= 0xff:
		dst = append(dst, 0xd9, byte(n))
	case n <= 0xffff:
		dst = binary.BigEndian.AppendUint16(append(dst, 0xda), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, 0xdb), uint32(n))
	}
	return append(dst, s...)
}

func appendBin(dst []byte, b []byte) []byte {
	switch n := len(b); {
	case n <= 0xff:
		dst = append(dst, 0xc4, byte(n))
	case n <= 0xffff:
		dst = binary.BigEndian.AppendUint16(append(dst, 0xc5), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, 0xc6), uint32(n))
	}
	return append(dst, b...)
}

func appendTime(dst []byte, t time.Time) []byte {
	return appendInt(appendInt(dst, t.Unix()), int64(t.Nanosecond()))
}

func encodeEvent(e Event) []byte { return appendEvent(make([]byte, 0, eventRecordSize(e)), e) }

// eventRecordSize bounds the size of e's record.
func eventRecordSize(e Event) int { return 32 + len(e.Type) + len(e.Data) }

func appendEvent(b []byte, e Event) []byte {
	b = append(appendArrayLen(b, 5), recordVersion)
	b = appendBin(appendStr(b, e.Type), e.Data)
	return appendTime(b, e.Time)
}

func encodeSnapshot(s Snapshot) []byte {
	b := make([]byte, 0, 32+len(s.Data))
	b = append(appendArrayLen(b, 4), recordVersion)
	return appendTime(appendBin(b, s.Data), s.Time)
}

func encodeCheckpoint(cp Checkpoint) []byte {
	size := 64
	for k, v := range cp.States {
		size += 10 + len(k) + len(v)
	}
	for k := range cp.Offsets {
		size += 14 + len(k)
	}
	for k, v := range cp.Channels {
		size += 10 + len(k) + len(v)
	}
	b := make([]byte, 0, size)
	// An aligned checkpoint is the 5 fields of version 1; an unaligned one
	// adds a sixth, its channels (a build without unaligned checkpoints
	// refuses it rather than lose its in-flight records).
	fields := 6
	if len(cp.Channels) > 0 {
		fields = 7
	}
	b = append(appendArrayLen(b, fields), recordVersion)
	b = appendTime(appendUint(b, cp.ID), cp.Time)
	b = appendMapLen(b, len(cp.States))
	for _, k := range slices.Sorted(maps.Keys(cp.States)) {
		b = appendBin(appendStr(b, k), cp.States[k])
	}
	b = appendMapLen(b, len(cp.Offsets))
	for _, k := range slices.Sorted(maps.Keys(cp.Offsets)) {
		b = appendInt(appendStr(b, k), cp.Offsets[k])
	}
	if len(cp.Channels) > 0 {
		b = appendMapLen(b, len(cp.Channels))
		for _, k := range slices.Sorted(maps.Keys(cp.Channels)) {
			b = appendBin(appendStr(b, k), cp.Channels[k])
		}
	}
	return b
}

// Runs hold up to runEvents events or about runBytes bytes.
const (
	runEvents = 256
	runBytes  = 64 << 10
)

// encodeRun encodes the records of consecutive events as a run.
func encodeRun(recs [][]byte) []byte {
	size := 8
	for _, r := range recs {
		size += len(r) + 5
	}
	b := make([]byte, 0, size)
	b = append(appendArrayLen(b, 2), recordVersion)
	b = appendArrayLen(b, len(recs))
	for _, r := range recs {
		b = appendBin(b, r)
	}
	return b
}

// decodeRun returns the event records of a run: slices of data, valid as
// long as data is. Each is checked when it is decoded (decodeEvent).
func decodeRun(data []byte) ([][]byte, error) {
	if err := msgpacksafe.Check(data); err != nil {
		return nil, err
	}
	r := &rawReader{b: data}
	if n := r.arrayLen(); r.err != nil || n != 2 {
		return nil, fmt.Errorf("not a run of events (%d fields, %v)", n, r.err)
	}
	if v := r.uint(); r.err != nil || v != recordVersion {
		if r.err == nil && v > recordVersion {
			return nil, fmt.Errorf("record format version %d is newer than this build reads (%d)", v, recordVersion)
		}
		return nil, fmt.Errorf("run version %d: %v", v, r.err)
	}
	n := r.arrayLen()
	if r.err == nil && n < 1 {
		return nil, errors.New("an empty run")
	}
	if err := withinBudget(int64(n)*sliceHeader, len(data), "a run's records"); err != nil {
		return nil, err
	}
	recs := make([][]byte, 0, max(n, 0))
	for i := 0; i < n && r.err == nil; i++ {
		recs = append(recs, r.bin())
	}
	if r.err != nil {
		return nil, r.err
	}
	if r.i != len(data) {
		return nil, fmt.Errorf("%d bytes after the record", len(data)-r.i)
	}
	return recs, nil
}

// sliceHeader is what one record of a run or log entry costs decoded.
const sliceHeader = int64(unsafe.Sizeof([]byte(nil)))

// withinBudget refuses a decoded size over msgpacksafe's budget for n
// input bytes: the framing's own allocations (a slice header per record)
// are bounded like every other decode.
func withinBudget(size int64, n int, what string) error {
	if b := (msgpacksafe.Limits{}).Budget(n); size > b {
		return fmt.Errorf("%s would take %d bytes decoded, more than the budget of %d for %d input bytes", what, size, b, n)
	}
	return nil
}

// logAppend is one append within a log entry: its events' records, as
// they go into the journal of id.
type logAppend struct {
	id    string
	first uint64
	recs  [][]byte
}

// encodeGroup encodes the appends of a group commit as one log entry.
func encodeGroup(reqs []*appendReq) []byte {
	size := 16
	for _, r := range reqs {
		size += r.size + 16
	}
	b := make([]byte, 0, size)
	b = append(appendArrayLen(b, 2), recordVersion)
	b = appendArrayLen(b, len(reqs))
	for _, r := range reqs {
		b = appendUint(appendStr(appendArrayLen(b, 3), r.id), r.first)
		b = appendArrayLen(b, len(r.recs))
		for _, rec := range r.recs {
			b = appendBin(b, rec)
		}
	}
	return b
}

// decodeGroup decodes a log entry. The event records it returns are slices
// of data, not copies: inside a transaction they are valid until it ends.
// They are checked when they are read from the journal of their id.
func decodeGroup(data []byte) ([]logAppend, error) {
	if err := msgpacksafe.Check(data); err != nil {
		return nil, err
	}
	r := &rawReader{b: data}
	if n := r.arrayLen(); r.err != nil || n != 2 {
		return nil, fmt.Errorf("not a log entry (%d fields, %v)", n, r.err)
	}
	if v := r.uint(); r.err != nil || v != recordVersion {
		if r.err == nil && v > recordVersion {
			return nil, fmt.Errorf("record format version %d is newer than this build reads (%d)", v, recordVersion)
		}
		return nil, fmt.Errorf("log entry version %d: %v", v, r.err)
	}
	n := r.arrayLen()
	spent := int64(n) * int64(unsafe.Sizeof(logAppend{}))
	if err := withinBudget(spent, len(data), "a log entry's appends"); err != nil {
		return nil, err
	}
	apps := make([]logAppend, 0, max(n, 0))
	for i := 0; i < n && r.err == nil; i++ {
		if m := r.arrayLen(); r.err == nil && m != 3 {
			return nil, fmt.Errorf("append %d: %d fields, not 3", i, m)
		}
		a := logAppend{id: string(r.str()), first: r.uint()}
		m := r.arrayLen()
		if r.err != nil {
			break
		}
		if m < 1 || a.first == 0 || a.first+uint64(m-1) < a.first {
			return nil, fmt.Errorf("append %d: %d events from seq %d", i, m, a.first)
		}
		spent += int64(m) * sliceHeader
		if err := withinBudget(spent, len(data), fmt.Sprintf("append %d's records", i)); err != nil {
			return nil, err
		}
		a.recs = make([][]byte, m)
		for k := range m {
			a.recs[k] = r.bin()
		}
		apps = append(apps, a)
	}
	if r.err != nil {
		return nil, r.err
	}
	if r.i != len(data) {
		return nil, fmt.Errorf("%d bytes after the record", len(data)-r.i)
	}
	return apps, nil
}

// rawReader reads the msgpack that this package writes, without copying.
// Run msgpacksafe.Check on the data first. The first error sticks.
type rawReader struct {
	b   []byte
	i   int
	err error
}

func (r *rawReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("byte %d: want %s", r.i, what)
	}
}

// take returns the next n bytes.
func (r *rawReader) take(n int, what string) []byte {
	if r.err != nil || n < 0 || len(r.b)-r.i < n {
		r.fail(what)
		return nil
	}
	r.i += n
	return r.b[r.i-n : r.i]
}

func (r *rawReader) be(n int, what string) uint64 {
	var v uint64
	for _, c := range r.take(n, what) {
		v = v<<8 | uint64(c)
	}
	return v
}

func (r *rawReader) code(what string) byte {
	if c := r.take(1, what); c != nil {
		return c[0]
	}
	return 0
}

func (r *rawReader) arrayLen() int {
	switch c := r.code("an array"); {
	case r.err != nil:
	case c&0xf0 == 0x90:
		return int(c & 0x0f)
	case c == 0xdc:
		return int(r.be(2, "an array length"))
	case c == 0xdd:
		return int(r.be(4, "an array length"))
	default:
		r.i--
		r.fail("an array")
	}
	return 0
}

func (r *rawReader) uint() uint64 {
	switch c := r.code("an unsigned integer"); {
	case r.err != nil:
	case c <= 0x7f:
		return uint64(c)
	case c >= 0xcc && c <= 0xcf:
		return r.be(1<<(c-0xcc), "an unsigned integer")
	default:
		r.i--
		r.fail("an unsigned integer")
	}
	return 0
}

func (r *rawReader) str() []byte {
	switch c := r.code("a string"); {
	case r.err != nil:
	case c&0xe0 == 0xa0:
		return r.take(int(c&0x1f), "a string")
	case c >= 0xd9 && c <= 0xdb:
		return r.take(int(r.be(1<<(c-0xd9), "a string length")), "a string")
	default:
		r.i--
		r.fail("a string")
	}
	return nil
}

func (r *rawReader) bin() []byte {
	switch c := r.code("binary data"); {
	case r.err != nil:
	case c >= 0xc4 && c <= 0xc6:
		return r.take(int(r.be(1<<(c-0xc4), "a binary length")), "binary data")
	default:
		r.i--
		r.fail("binary data")
	}
	return nil
}

// recordReader decodes one record after msgpacksafe.Check has accepted it.
type recordReader struct {
	r   *bytes.Reader
	dec *msgpack.Decoder
}

// openRecord checks data, reads the array header and the version, and
// wants fields more elements.
func openRecord(data []byte, fields int) (*recordReader, error) {
	rr, _, err := openRecordFields(data, fields, fields)
	return rr, err
}

// openRecordFields is openRecord for a record of lo to hi fields; it also
// returns how many it has.
func openRecordFields(data []byte, lo, hi int) (*recordReader, int, error) {
	if err := msgpacksafe.Check(data); err != nil {
		return nil, 0, err
	}
	r := bytes.NewReader(data)
	rr := &recordReader{r: r, dec: msgpack.NewDecoder(r)}
	n, err := rr.dec.DecodeArrayLen()
	if err != nil {
		return nil, 0, fmt.Errorf("not a record: %w", err)
	}
	switch {
	case n == -1:
		return nil, 0, errors.New("not a record: nil")
	case n < 1:
		return nil, 0, errors.New("not a record: an empty array")
	}
	v, err := rr.dec.DecodeUint64()
	if err != nil {
		return nil, 0, fmt.Errorf("record version: %w", err)
	}
	switch {
	case v > recordVersion:
		return nil, 0, fmt.Errorf("record format version %d is newer than this build reads (%d)", v, recordVersion)
	case v == 0:
		return nil, 0, errors.New("record format version 0")
	case lo == hi && n != lo+1:
		return nil, 0, fmt.Errorf("a version %d record has %d fields, not %d", v, n-1, lo)
	case n < lo+1 || n > hi+1:
		return nil, 0, fmt.Errorf("a version %d record has %d fields, not %d to %d", v, n-1, lo, hi)
	}
	return rr, n - 1, nil
}

func (rr *recordReader) time() (time.Time, error) {
	sec, err := rr.dec.DecodeInt64()
	if err != nil {
		return time.Time{}, fmt.Errorf("time: %w", err)
	}
	nsec, err := rr.dec.DecodeInt64()
	if err != nil {
		return time.Time{}, fmt.Errorf("time: %w", err)
	}
	if nsec < 0 || nsec >= 1e9 {
		return time.Time{}, fmt.Errorf("time: %d nanoseconds", nsec)
	}
	return time.Unix(sec, nsec).UTC(), nil
}

// done refuses bytes after the record.
func (rr *recordReader) done() error {
	if rr.r.Len() != 0 {
		return fmt.Errorf("%d bytes after the record", rr.r.Len())
	}
	return nil
}

// decodeEvent decodes an event record; the caller sets Seq from the key.
func decodeEvent(data []byte) (Event, error) {
	rr, err := openRecord(data, 4)
	if err != nil {
		return Event{}, err
	}
	var e Event
	if e.Type, err = rr.dec.DecodeString(); err != nil {
		return Event{}, fmt.Errorf("type: %w", err)
	}
	if e.Data, err = rr.dec.DecodeBytes(); err != nil {
		return Event{}, fmt.Errorf("data: %w", err)
	}
	if e.Time, err = rr.time(); err != nil {
		return Event{}, err
	}
	return e, rr.done()
}

// decodeSnapshot decodes a snapshot record; the caller sets Seq from the key.
func decodeSnapshot(data []byte) (Snapshot, error) {
	rr, err := openRecord(data, 3)
	if err != nil {
		return Snapshot{}, err
	}
	var s Snapshot
	if s.Data, err = rr.dec.DecodeBytes(); err != nil {
		return Snapshot{}, fmt.Errorf("data: %w", err)
	}
	if s.Time, err = rr.time(); err != nil {
		return Snapshot{}, err
	}
	return s, rr.done()
}

func decodeCheckpoint(data []byte) (Checkpoint, error) {
	rr, n, err := openRecordFields(data, 5, 6)
	if err != nil {
		return Checkpoint{}, err
	}
	cp, err := decodeCheckpointFields(rr)
	if err != nil || n == 5 {
		return cp, errors.Join(err, rr.done())
	}
	m, err := rr.dec.DecodeMapLen()
	if err != nil {
		return Checkpoint{}, fmt.Errorf("channels: %w", err)
	}
	cp.Channels = make(map[string][]byte, max(m, 0))
	for range m {
		k, err := rr.dec.DecodeString()
		if err != nil {
			return Checkpoint{}, fmt.Errorf("channels: %w", err)
		}
		if cp.Channels[k], err = rr.dec.DecodeBytes(); err != nil {
			return Checkpoint{}, fmt.Errorf("channel %q: %w", k, err)
		}
	}
	return cp, rr.done()
}

func decodeCheckpointFields(rr *recordReader) (Checkpoint, error) {
	var err error
	var cp Checkpoint
	if cp.ID, err = rr.dec.DecodeUint64(); err != nil {
		return Checkpoint{}, fmt.Errorf("id: %w", err)
	}
	if cp.Time, err = rr.time(); err != nil {
		return Checkpoint{}, err
	}
	n, err := rr.dec.DecodeMapLen()
	if err != nil {
		return Checkpoint{}, fmt.Errorf("states: %w", err)
	}
	cp.States = make(map[string][]byte, max(n, 0))
	for range n {
		k, err := rr.dec.DecodeString()
		if err != nil {
			return Checkpoint{}, fmt.Errorf("states: %w", err)
		}
		if cp.States[k], err = rr.dec.DecodeBytes(); err != nil {
			return Checkpoint{}, fmt.Errorf("state of %q: %w", k, err)
		}
	}
	if n, err = rr.dec.DecodeMapLen(); err != nil {
		return Checkpoint{}, fmt.Errorf("offsets: %w", err)
	}
	cp.Offsets = make(map[string]int64, max(n, 0))
	for range n {
		k, err := rr.dec.DecodeString()
		if err != nil {
			return Checkpoint{}, fmt.Errorf("offsets: %w", err)
		}
		if cp.Offsets[k], err = rr.dec.DecodeInt64(); err != nil {
			return Checkpoint{}, fmt.Errorf("offset of %q: %w", k, err)
		}
	}
	return cp, nil
}

// seqKey is the big-endian key of a sequence number or checkpoint id.
func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq) }

func keySeq(k []byte) (uint64, error) {
	if len(k) != 8 {
		return 0, fmt.Errorf("key %x is not a sequence number", k)
	}
	return binary.BigEndian.Uint64(k), nil
}

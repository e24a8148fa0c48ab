package cluster

import (
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/internal/dist"
	"github.com/sluicehq/sluice/internal/msgpacksafe"
	"github.com/sluicehq/sluice/internal/wire"
)

// The runtime's hot messages between processes, records and credits
// (one per batch of records, one per half window of them), are encoded and
// decoded by hand rather than by msgpack's reflection. The bytes are the
// same msgpack map the reflection encoder writes (the fields by name, the
// integers in their shortest form), so a node of an older version decodes
// them as before, and the hand-written decoders accept the forms an older
// node writes; anything they do not read (another integer or string
// encoding, another field, a field twice) goes to msgpacksafe.Decode, which
// decides, so nothing is accepted here that the general path would refuse
// or read otherwise (FuzzWireRecords, FuzzWireCredit).

// Type URLs of the messages with a hand-written codec (their registered
// names, see registerJobMessages).
const (
	recordsURL = opURL + "records"
	creditURL  = opURL + "credit"
)

// appendRecords appends the msgpack form of r: {Seq, Data}.
func appendRecords(b []byte, r *wire.Records) []byte {
	b = msgpacksafe.AppendMapLen(b, 2)
	b = msgpacksafe.AppendStr(b, "Seq")
	b = msgpacksafe.AppendUint(b, r.Seq)
	b = msgpacksafe.AppendStr(b, "Data")
	return msgpacksafe.AppendBin(b, r.Data)
}

// recordsHead bounds what appendRecords writes before the data: the map
// header, "Seq", the sequence number, "Data" and the binary header.
const recordsHead = 1 + 4 + 9 + 5 + 5

// recordsSize bounds the size of appendRecords' output for r.
func recordsSize(r *wire.Records) int { return recordsHead + len(r.Data) }

// packRecords is appendRecords of the records env encoded by enc, with the
// envelope encoded in place after room for the head, which is written
// right before it: one buffer, one encoding, no copy (dist.RecordsPacker).
func (c *codec) packRecords(seq uint64, size int, enc dist.AppendEncoder, env any) (*anypb.Any, error) {
	buf, err := enc.AppendEncode(make([]byte, recordsHead, recordsHead+size), env)
	if err != nil {
		return nil, err
	}
	var scratch [recordsHead]byte
	head := msgpacksafe.AppendMapLen(scratch[:0], 2)
	head = msgpacksafe.AppendStr(head, "Seq")
	head = msgpacksafe.AppendUint(head, seq)
	head = msgpacksafe.AppendStr(head, "Data")
	head = msgpacksafe.AppendBinHeader(head, len(buf)-recordsHead)
	start := recordsHead - len(head)
	copy(buf[start:], head)
	c.packed.Add(1)
	return &anypb.Any{TypeUrl: recordsURL, Value: buf[start:]}, nil
}

// scanRecords reads what appendRecords writes (the fields in either
// order, each once, the data as binary). Data aliases data. ok is false
// for anything else: the caller decodes it with msgpacksafe.Decode.
func scanRecords(data []byte) (r *wire.Records, ok bool) {
	s := msgpacksafe.NewScanner(data, "")
	if s.MapLen() != 2 {
		return nil, false
	}
	var seq, dat bool
	r = &wire.Records{}
	for range 2 {
		switch string(s.Str()) {
		case "Seq":
			r.Seq, ok = s.Uint(), !seq
			seq = true
		case "Data":
			r.Data, ok = s.Bin(), !dat
			dat = true
		default:
			ok = false
		}
		if !ok || s.Err() != nil {
			return nil, false
		}
	}
	return r, s.End() == nil
}

// appendCredit appends the msgpack form of c: {Out, Total}.
func appendCredit(b []byte, c *wire.Credit) []byte {
	b = msgpacksafe.AppendMapLen(b, 2)
	b = msgpacksafe.AppendStr(b, "Out")
	b = msgpacksafe.AppendInt(b, int64(c.Out))
	b = msgpacksafe.AppendStr(b, "Total")
	return msgpacksafe.AppendInt(b, c.Total)
}

// scanCredit reads what appendCredit writes, as scanRecords does.
func scanCredit(data []byte) (c *wire.Credit, ok bool) {
	s := msgpacksafe.NewScanner(data, "")
	if s.MapLen() != 2 {
		return nil, false
	}
	var out, total bool
	c = &wire.Credit{}
	for range 2 {
		switch string(s.Str()) {
		case "Out":
			v := s.Int()
			c.Out, ok = int(v), !out && int64(int(v)) == v
			out = true
		case "Total":
			c.Total, ok = s.Int(), !total
			total = true
		default:
			ok = false
		}
		if !ok || s.Err() != nil {
			return nil, false
		}
	}
	return c, s.End() == nil
}

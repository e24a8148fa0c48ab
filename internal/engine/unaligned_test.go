package engine

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/stage"
	"github.com/sluicehq/sluice/mailbox"
)

type uaRecord struct {
	Key   string
	Count int64
	Tags  []string
}

// The in-flight records of a channel round-trip through their framing and
// the task's envelope codec, as records of the channel they are restored
// on.
func TestChannelStateRoundTrip(t *testing.T) {
	codec := stage.Codec[uaRecord]{}
	var recs [][]byte
	for i, vs := range [][]uaRecord{{{"a", 1, []string{"x"}}, {"b", 2, nil}}, {{"c", 3, []string{"y", "z"}}}} {
		env := &actors.Envelope{Kind: actors.Data, Channel: 7, Seq: uint64(10 * i), Count: len(vs), Payload: &stage.Batch[uaRecord]{Vs: vs}}
		b, err := codec.Encode(env)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, b)
	}
	envs, err := decodeChannel(encodeChannel(recs), codec, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(envs) != 2 || envs[0].Channel != 2 || envs[1].Count != 1 || envs[1].Seq != 10 {
		t.Fatalf("decoded %+v", envs)
	}
	if got := envs[1].Payload.(*stage.Batch[uaRecord]).Vs; !reflect.DeepEqual(got, []uaRecord{{"c", 3, []string{"y", "z"}}}) {
		t.Fatalf("records %+v", got)
	}
	for _, bad := range [][]byte{{0x05, 1}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, append(encodeChannel(recs), 0x01, 0x00)} {
		if _, err := decodeChannel(bad, codec, 0); !errors.Is(err, errChannelState) {
			t.Errorf("decodeChannel(%x) = %v, want errChannelState", bad, err)
		}
	}
}

// FuzzDecodeChannel: a checkpoint's in-flight records, read back from the
// store, decode into envelopes of records or fail with errChannelState,
// never panic.
func FuzzDecodeChannel(f *testing.F) {
	codec := stage.Codec[uaRecord]{}
	b, _ := codec.Encode(&actors.Envelope{Kind: actors.Data, Seq: 3, Count: 1, Payload: &stage.Batch[uaRecord]{Vs: []uaRecord{{"k", 1, []string{"t"}}}, Ts: []int64{5}}})
	f.Add(encodeChannel([][]byte{b, b}))
	f.Add([]byte{})
	f.Add([]byte{0x02, 0x00, 0x00})
	w, _ := codec.Encode(&actors.Envelope{Kind: actors.Watermark, Seq: 4, Mark: 1 << 50})
	f.Add(encodeChannel([][]byte{b, w, b}))
	f.Fuzz(func(t *testing.T, data []byte) {
		envs, err := decodeChannel(data, codec, 1)
		if err != nil {
			if !errors.Is(err, errChannelState) {
				t.Fatalf("error %v does not wrap errChannelState", err)
			}
			return
		}
		for _, env := range envs {
			if env.Kind != actors.Data && env.Kind != actors.Watermark || env.Channel != 1 {
				t.Fatalf("decoded %+v", env)
			}
		}
	})
}

// The watermarks among a channel's in-flight records round-trip with
// them; a channel that holds any other control envelope is refused.
func TestChannelStateWatermarks(t *testing.T) {
	codec := stage.Codec[uaRecord]{}
	enc := func(env *actors.Envelope) []byte {
		b, err := codec.Encode(env)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	data := enc(&actors.Envelope{Kind: actors.Data, Seq: 4, Count: 1, Payload: &stage.Batch[uaRecord]{Vs: []uaRecord{{"k", 1, nil}}}})
	wm := enc(&actors.Envelope{Kind: actors.Watermark, Seq: 5, Mark: -17})
	envs, err := decodeChannel(encodeChannel([][]byte{data, wm}), codec, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(envs) != 2 || envs[1].Kind != actors.Watermark || envs[1].Mark != -17 || envs[1].Seq != 5 || envs[1].Channel != 3 {
		t.Fatalf("decoded %+v", envs)
	}
	idle := enc(&actors.Envelope{Kind: actors.Idle, Seq: 5})
	if _, err := decodeChannel(encodeChannel([][]byte{data, idle}), codec, 3); !errors.Is(err, errChannelState) {
		t.Fatalf("a channel with an idle mark: %v, want errChannelState", err)
	}
}

// Watermarks sort before the record sent after them, in the order sent;
// the copied envelopes and a spill range's merge so.
func TestSentOrder(t *testing.T) {
	d := func(seq uint64) *actors.Envelope { return &actors.Envelope{Kind: actors.Data, Seq: seq, Count: 2} }
	w := func(seq uint64, m int64) *actors.Envelope {
		return &actors.Envelope{Kind: actors.Watermark, Seq: seq, Mark: m}
	}
	got := []*actors.Envelope{d(4), w(4, 9), d(0), w(6, 12), w(2, 3), w(2, 1), d(2), w(6, 11)}
	slices.SortStableFunc(got, sentOrder)
	want := []*actors.Envelope{d(0), w(2, 1), w(2, 3), d(2), w(4, 9), d(4), w(6, 11), w(6, 12)}
	if !reflect.DeepEqual(got, want) {
		for i := range got {
			t.Logf("%d: %v seq %d mark %d", i, got[i].Kind, got[i].Seq, got[i].Mark)
		}
		t.Fatal("not in the order sent")
	}
}

// A spill range of version 1 (written before watermarks were recorded)
// still decodes, without watermarks; version 2 carries their bounds.
func TestSpillRefVersions(t *testing.T) {
	v1 := []byte{spillRefV1, 3, 'j', '/', 'q', 2, 9, 4, 8}
	r, err := decodeSpillRef(v1)
	if err != nil {
		t.Fatal(err)
	}
	if want := (spillRef{Range: mailbox.SpillRange{Queue: "j/q", From: 2, To: 9}, Lo: 4, Hi: 8}); r != want {
		t.Fatalf("v1 decoded %+v, want %+v", r, want)
	}
	r.WmLo, r.WmHi = -5, 70
	if again, err := decodeSpillRef(encodeSpillRef(r)); err != nil || again != r {
		t.Fatalf("v2 %+v decodes to %+v, %v", r, again, err)
	}
	for _, bad := range [][]byte{{3, 3, 'j', '/', 'q', 2, 9, 4, 8}, append(slices.Clone(v1), 0), encodeSpillRef(spillRef{Range: r.Range, WmLo: 5, WmHi: 4})} {
		if _, err := decodeSpillRef(bad); !errors.Is(err, errChannelState) {
			t.Errorf("decodeSpillRef(%x) = %v, want errChannelState", bad, err)
		}
	}
}

// A checkpoint's spill range decodes to what was encoded; anything else is
// refused with errChannelState, without a panic.
func FuzzDecodeSpillRef(f *testing.F) {
	f.Add(encodeSpillRef(spillRef{Range: mailbox.SpillRange{Queue: "job/count.0@ABC", From: 3, To: 900}, Lo: 17, Hi: 4000}))
	f.Add([]byte{})
	f.Add([]byte{spillRefVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add(encodeSpillRef(spillRef{Range: mailbox.SpillRange{Queue: "job/win.1@XYZ", From: 1, To: 2}, WmLo: -1 << 62, WmHi: 1 << 40}))
	f.Add([]byte{spillRefV1, 3, 'j', '/', 'q', 2, 9, 4, 8})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeSpillRef(data)
		if err != nil {
			if !errors.Is(err, errChannelState) {
				t.Fatalf("error %v does not wrap errChannelState", err)
			}
			return
		}
		if r.Range.Empty() || r.Hi < r.Lo || r.WmHi < r.WmLo {
			t.Fatalf("decoded an empty or inverted range %+v", r)
		}
		if again, err := decodeSpillRef(encodeSpillRef(r)); err != nil || again != r {
			t.Fatalf("re-encoded %+v decodes to %+v, %v", r, again, err)
		}
	})
}

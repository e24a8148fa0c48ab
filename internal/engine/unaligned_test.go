package engine

import (
	"errors"
	"reflect"
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
	f.Fuzz(func(t *testing.T, data []byte) {
		envs, err := decodeChannel(data, codec, 1)
		if err != nil {
			if !errors.Is(err, errChannelState) {
				t.Fatalf("error %v does not wrap errChannelState", err)
			}
			return
		}
		for _, env := range envs {
			if env.Kind != actors.Data || env.Channel != 1 {
				t.Fatalf("decoded %+v", env)
			}
		}
	})
}

// A checkpoint's spill range decodes to what was encoded; anything else is
// refused with errChannelState, without a panic.
func FuzzDecodeSpillRef(f *testing.F) {
	f.Add(encodeSpillRef(spillRef{Range: mailbox.SpillRange{Queue: "job/count.0@ABC", From: 3, To: 900}, Lo: 17, Hi: 4000}))
	f.Add([]byte{})
	f.Add([]byte{spillRefVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeSpillRef(data)
		if err != nil {
			if !errors.Is(err, errChannelState) {
				t.Fatalf("error %v does not wrap errChannelState", err)
			}
			return
		}
		if r.Range.Empty() || r.Hi < r.Lo {
			t.Fatalf("decoded an empty or inverted range %+v", r)
		}
		if again, err := decodeSpillRef(encodeSpillRef(r)); err != nil || again != r {
			t.Fatalf("re-encoded %+v decodes to %+v, %v", r, again, err)
		}
	})
}

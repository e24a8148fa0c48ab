package cluster

import (
	"bytes"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// The pool hands out buffers of the length asked, from tiers of powers of
// two; what it did not hand out (another capacity) it does not keep.
func TestDirtyPoolTiers(t *testing.T) {
	p := newDirtyPool()
	for _, n := range []int{0, 1, 255, 256, 257, 4096, 40_000, 1 << 20, 1<<20 + 1} {
		b := p.Get(n)
		if len(*b) != n {
			t.Fatalf("Get(%d): length %d", n, len(*b))
		}
		if n <= 1<<20 {
			if want := 1 << max(dirtyMinShift, bitsFor(n)); cap(*b) != want {
				t.Fatalf("Get(%d): capacity %d, want %d", n, cap(*b), want)
			}
		}
		p.Put(b)
	}
	odd := make([]byte, 300)
	p.Put(&odd) // not a tier's capacity: dropped
	if b := p.Get(300); cap(*b) != 512 {
		t.Fatalf("Get(300) after a foreign Put: capacity %d", cap(*b))
	}
}

func bitsFor(n int) int {
	s := 0
	for 1<<s < n {
		s++
	}
	return s
}

// A batch of envelopes goes through the codec as through gRPC's: the
// bytes are proto's, and a buffer used before (dirty) leaves nothing of
// its old contents in what is sent or received.
func TestGRPCCodecRoundTrip(t *testing.T) {
	c := newGRPCCodec()
	// Dirty the pool's 32 KiB tier.
	junk := c.pool.Get(20_000)
	for i := range *junk {
		(*junk)[i] = 0xAA
	}
	c.pool.Put(junk)
	big := bytes.Repeat([]byte{7}, 3000)
	msg := &remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: &remote.MessageBatch{
		TypeNames: []string{"google.protobuf.Any"},
		Targets:   []*actor.PID{{Address: "127.0.0.1:1", Id: "x"}},
	}}}
	b := msg.GetMessageBatch()
	for range 6 {
		b.Envelopes = append(b.Envelopes, &remote.MessageEnvelope{MessageData: big})
	}
	want, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	data, err := c.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	if got := data.Materialize(); !bytes.Equal(got, want) {
		t.Fatalf("marshalled %d bytes, proto's are %d and differ", len(got), len(want))
	}
	// Received in two frames, as gRPC hands a message of more than one.
	half := len(want) / 2
	frames := mem.BufferSlice{mem.SliceBuffer(want[:half]), mem.SliceBuffer(want[half:])}
	var got remote.RemoteMessage
	if err := c.Unmarshal(frames, &got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&got, msg) {
		t.Fatal("unmarshalled message differs")
	}
	data.Free()
	// A small message, and refusals of what is not a protobuf message.
	small := &remote.RemoteMessage{MessageType: &remote.RemoteMessage_DisconnectRequest{DisconnectRequest: &remote.DisconnectRequest{}}}
	if d, err := c.Marshal(small); err != nil || d.Len() != proto.Size(small) {
		t.Fatalf("small message: %v, %d bytes", err, d.Len())
	}
	if _, err := c.Marshal(struct{}{}); err == nil {
		t.Fatal("a non-proto value was marshalled")
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{1})}, new(int)); err == nil {
		t.Fatal("unmarshalled into a non-proto value")
	}
	// Damaged bytes are refused by proto, as with gRPC's codec.
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(want[:len(want)-1])}, new(remote.RemoteMessage)); err == nil {
		t.Fatal("a truncated batch unmarshalled")
	}
}

// FuzzGRPCCodecUnmarshal: whatever arrives, in one frame or two, the
// codec decodes it as proto.Unmarshal does (it is gRPC's codec with
// another pool), or refuses it, without a panic.
func FuzzGRPCCodecUnmarshal(f *testing.F) {
	msg := &remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: &remote.MessageBatch{
		TypeNames: []string{"google.protobuf.Any"},
		Targets:   []*actor.PID{{Address: "127.0.0.1:1", Id: "x"}},
		Envelopes: []*remote.MessageEnvelope{{MessageData: []byte("data"), MessageHeader: &remote.MessageHeader{HeaderData: map[string]string{"k": "v"}}}},
	}}}
	seed, _ := proto.Marshal(msg)
	f.Add(seed, 3)
	f.Add([]byte{}, 0)
	c := newGRPCCodec()
	f.Fuzz(func(t *testing.T, data []byte, cut int) {
		frames := mem.BufferSlice{mem.SliceBuffer(data)}
		if cut > 0 && cut < len(data) {
			frames = mem.BufferSlice{mem.SliceBuffer(data[:cut]), mem.SliceBuffer(data[cut:])}
		}
		var got, want remote.RemoteMessage
		err := c.Unmarshal(frames, &got)
		wantErr := proto.Unmarshal(data, &want)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("codec: %v; proto.Unmarshal: %v", err, wantErr)
		}
		if err == nil && !proto.Equal(&got, &want) {
			t.Fatal("the codec decoded otherwise than proto.Unmarshal")
		}
	})
}

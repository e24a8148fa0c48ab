package cluster

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// grpcCodec is gRPC's protobuf codec for the streams of a node's remote
// (protoactor's batches of envelopes, both ways), with its buffers from a
// pool that does not clear them. gRPC's own codec takes them from its
// default pool, which clears the whole capacity of every buffer it hands
// out (32 KiB for a batch of 16 KiB and more): a tenth of the CPU of a
// job's records crossing nodes went there. Clearing is not needed here:
// Marshal hands gRPC exactly the bytes it wrote (it checks that the
// encoding filled the size it asked for), and Unmarshal reads a buffer
// that gRPC filled whole with the received frames before proto.Unmarshal
// copies what it keeps out of it. What is decoded, and how, is gRPC's
// codec's: proto.Unmarshal of the same message types, under the same
// message size limits (gRPC checks them before the codec).
type grpcCodec struct{ pool *dirtyPool }

func newGRPCCodec() grpcCodec { return grpcCodec{pool: newDirtyPool()} }

// options are the server and call options that make a node's remote use
// the codec.
func (c grpcCodec) serverOption() grpc.ServerOption { return grpc.ForceServerCodecV2(c) }
func (c grpcCodec) callOption() grpc.CallOption     { return grpc.ForceCodecV2(c) }

// Name is the content subtype gRPC announces: the same as its own codec's.
func (grpcCodec) Name() string { return "proto" }

// errShortMarshal: the encoding of a message did not take the size
// proto.Size said (it changed concurrently).
var errShortMarshal = errors.New("cluster: a message's encoding differs from its size")

func protoMessage(v any) proto.Message {
	switch m := v.(type) {
	case proto.Message:
		return m
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(m)
	}
	return nil
}

func (c grpcCodec) Marshal(v any) (mem.BufferSlice, error) {
	m := protoMessage(v)
	if m == nil {
		return nil, fmt.Errorf("cluster: marshal %T: not a protobuf message", v)
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // the size just computed
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := c.pool.Get(size)
	out, err := opts.MarshalAppend((*buf)[:0], m)
	if err == nil && (len(out) != size || &out[0] != &(*buf)[0]) {
		err = fmt.Errorf("%w: %d bytes, %d expected", errShortMarshal, len(out), size)
	}
	if err != nil {
		c.pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
}

func (c grpcCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m := protoMessage(v)
	if m == nil {
		return fmt.Errorf("cluster: unmarshal into %T: not a protobuf message", v)
	}
	buf := data.MaterializeToBuffer(c.pool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// dirtyPool is a mem.BufferPool of buffers in powers of two from 256 B to
// 1 MiB that it does not clear: what takes one overwrites the length it
// asked for before reading it (see grpcCodec). Larger ones are allocated
// each time.
type dirtyPool struct {
	tiers [dirtyTiers]sync.Pool
}

const (
	dirtyMinShift = 8
	dirtyMaxShift = 20
	dirtyTiers    = dirtyMaxShift - dirtyMinShift + 1
)

func newDirtyPool() *dirtyPool { return &dirtyPool{} }

// tier is the index of the smallest tier holding n bytes, or -1.
func dirtyTier(n int) int {
	if n > 1<<dirtyMaxShift {
		return -1
	}
	shift := bits.Len(uint(max(n, 1) - 1))
	return max(shift, dirtyMinShift) - dirtyMinShift
}

func (p *dirtyPool) Get(n int) *[]byte {
	t := dirtyTier(n)
	if t < 0 {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.tiers[t].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(t+dirtyMinShift))
	return &b
}

func (p *dirtyPool) Put(b *[]byte) {
	c := cap(*b)
	t := dirtyTier(c)
	if t < 0 || c != 1<<(t+dirtyMinShift) {
		return // not one of the pool's: left to the collector
	}
	p.tiers[t].Put(b)
}

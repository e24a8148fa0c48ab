package cluster

import (
	"sync"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
)

// The guard sits between gRPC and protoactor's endpoint reader. The reader
// looks a message's type name up in the protobuf registry and calls New on
// the result, which panics for a name the binary does not know, and indexes
// the batch's type, target and sender tables without bounds checks: one bad
// batch from the network would take the process down. The guard drops
// every envelope that would, counting it as foreign, before the reader sees
// the batch; protoactor's own messages and anypb.Any (which carries every
// sluice message) pass.

// The guard also serialises the endpoint reader's look-up of a connecting
// node in protoactor's block list, which it reads without the list's lock,
// with the membership's updates of that list (made under topoMu): it holds
// topoMu from the connect request until the reader has answered it.

// guardInterceptor wraps each inbound stream of the remote server.
func (c *codec) guardInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	g := &guardedStream{ServerStream: ss, c: c}
	defer g.release()
	return handler(srv, g)
}

type guardedStream struct {
	grpc.ServerStream
	c      *codec
	holds  bool // topoMu, between a connect request and its answer
	holdMu sync.Mutex
}

func (g *guardedStream) RecvMsg(m any) error {
	g.release()
	if err := g.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if rm, ok := m.(*remote.RemoteMessage); ok {
		if b := rm.GetMessageBatch(); b != nil {
			g.c.filterBatch(b)
		}
		if rm.GetConnectRequest() != nil {
			g.c.topoMu.Lock()
			g.holdMu.Lock()
			g.holds = true
			g.holdMu.Unlock()
		}
	}
	return nil
}

func (g *guardedStream) SendMsg(m any) error {
	err := g.ServerStream.SendMsg(m)
	if rm, ok := m.(*remote.RemoteMessage); ok && rm.GetConnectResponse() != nil {
		g.release()
	}
	return err
}

func (g *guardedStream) release() {
	g.holdMu.Lock()
	defer g.holdMu.Unlock()
	if g.holds {
		g.holds = false
		g.c.topoMu.Unlock()
	}
}

// filterBatch removes the envelopes of b that protoactor cannot handle
// safely.
func (c *codec) filterBatch(b *remote.MessageBatch) {
	for _, pid := range b.Targets {
		if pid == nil {
			c.foreign.Add(uint64(len(b.Envelopes)))
			b.Envelopes = nil
			return
		}
	}
	kept := b.Envelopes[:0]
	for _, e := range b.Envelopes {
		ok := e != nil &&
			e.SerializerId == 0 && // protobuf; the JSON serializer is not accepted
			e.TypeId >= 0 && int(e.TypeId) < len(b.TypeNames) &&
			e.Target >= 0 && int(e.Target) < len(b.Targets) &&
			e.Sender >= 0 && int(e.Sender) <= len(b.Senders) &&
			(e.Sender == 0 || b.Senders[e.Sender-1] != nil) &&
			c.acceptsProto(b.TypeNames[e.TypeId])
		if !ok {
			c.foreign.Add(1)
			if e != nil && e.TypeId >= 0 && int(e.TypeId) < len(b.TypeNames) {
				c.warnOnce("foreign:"+b.TypeNames[e.TypeId], "cluster: remote message of a refused type dropped", "type", b.TypeNames[e.TypeId])
			} else {
				c.warnOnce("foreign:malformed", "cluster: malformed remote envelope dropped")
			}
			continue
		}
		kept = append(kept, e)
	}
	clear(b.Envelopes[len(kept):])
	b.Envelopes = kept
}

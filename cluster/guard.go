package cluster

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
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

// The guard authenticates the peer of each stream and authorizes each of
// its envelopes (see auth.go): it sees the stream's TLS state, the connect
// request that opens it, and every envelope's target, sender and type.

// guard is the inbound side of a node's (or a client's) remote server.
type guard struct {
	c   *codec
	ref *refusals
	// member says whether (name, id, address) is a live member; status
	// whether a non-member peer may read the node's status. A client's
	// guard has neither: it only receives answers to its requests.
	member func(name, id, addr string) bool
	status func(p *streamPeer) bool
	// closing: the node is stopping; it takes no more messages from the
	// network (one for an actor already stopped would make protoactor
	// answer through an endpoint manager that is stopping, and panic).
	closing atomic.Bool
	// streams counts the inbound streams whose handler still runs: the
	// remote's endpoint actors must outlive them (see stopRemote).
	streams activeStreams
}

// activeStreams counts running stream handlers, and lets one wait for
// none to run.
type activeStreams struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0, made by wait
}

func (a *activeStreams) enter() {
	a.mu.Lock()
	a.n++
	a.mu.Unlock()
}

func (a *activeStreams) leave() {
	a.mu.Lock()
	a.n--
	if a.n == 0 && a.idle != nil {
		close(a.idle)
		a.idle = nil
	}
	a.mu.Unlock()
}

// wait returns once no handler runs, or after d.
func (a *activeStreams) wait(d time.Duration) bool {
	a.mu.Lock()
	if a.n == 0 {
		a.mu.Unlock()
		return true
	}
	if a.idle == nil {
		a.idle = make(chan struct{})
	}
	idle := a.idle
	a.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return false
	}
}

// streamPeer is the node at the other end of an inbound stream.
type streamPeer struct {
	secure    bool     // the stream is mutual TLS; names are its certificate's
	names     []string // the DNS SANs of the peer's verified certificate
	connected bool     // a connect request named the peer
	id, name  string   // its member id and the name it carries
	addr      string   // the address it listens on
}

func (p *streamPeer) String() string {
	if !p.connected {
		return "an unidentified peer"
	}
	return fmt.Sprintf("%s (%s at %s)", p.name, p.id, p.addr)
}

// interceptor wraps each inbound stream of the remote server.
func (gd *guard) interceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	g := &guardedStream{ServerStream: ss, c: gd.c, gd: gd}
	if pr, ok := grpcpeer.FromContext(ss.Context()); ok {
		if info, ok := pr.AuthInfo.(credentials.TLSInfo); ok && len(info.State.VerifiedChains) > 0 && len(info.State.VerifiedChains[0]) > 0 {
			g.peer.secure, g.peer.names = true, certNames(info.State.VerifiedChains[0][0])
		}
	}
	gd.streams.enter()
	defer gd.streams.leave()
	defer g.release()
	return handler(srv, g)
}

type guardedStream struct {
	grpc.ServerStream
	c      *codec
	gd     *guard
	peer   streamPeer
	holds  bool // topoMu, between a connect request and its answer
	holdMu sync.Mutex
}

// errRefused ends a stream whose peer is refused.
var errRefused = errors.New("cluster: connection refused")

func (g *guardedStream) RecvMsg(m any) error {
	g.release()
	if err := g.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if rm, ok := m.(*remote.RemoteMessage); ok {
		if b := rm.GetMessageBatch(); b != nil {
			g.c.filterBatch(b)
			g.gd.authorize(&g.peer, b)
		}
		if cr := rm.GetConnectRequest(); cr != nil {
			if err := g.gd.connect(&g.peer, cr); err != nil {
				return err
			}
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

// connect authenticates the peer that a connect request names: with TLS,
// the name its member id carries must be one of its certificate's.
func (gd *guard) connect(p *streamPeer, cr *remote.ConnectRequest) error {
	sc := cr.GetServerConnection()
	if sc == nil || sc.SystemId == "" || sc.Address == "" {
		gd.ref.refuse(refusedConnection, "a connect request without a member id and an address", "peer", p.String())
		return fmt.Errorf("%w: connect request without a member id and an address", errRefused)
	}
	if p.connected {
		if sc.SystemId == p.id && sc.Address == p.addr {
			return nil
		}
		gd.ref.refuse(refusedConnection, "a second identity on one connection", "peer", p.String(), "claims", sc.SystemId+" at "+sc.Address)
		return fmt.Errorf("%w: a second identity on one connection", errRefused)
	}
	name := nameOfID(sc.SystemId)
	if p.secure && !slices.Contains(p.names, name) {
		gd.ref.refuse(refusedCertificate, "a node whose certificate does not carry its name",
			"member id", sc.SystemId, "address", sc.Address, "certificate names", p.names)
		return fmt.Errorf("%w: member id %q names node %q, the certificate names %v", errRefused, sc.SystemId, name, p.names)
	}
	p.connected, p.id, p.name, p.addr = true, sc.SystemId, name, sc.Address
	return nil
}

// authorize removes the envelopes of b that its peer may not send (after
// filterBatch: the indexes are sound), and marks the others with the
// peer's address (fromHeader).
func (gd *guard) authorize(p *streamPeer, b *remote.MessageBatch) {
	if gd.closing.Load() {
		clear(b.Envelopes)
		b.Envelopes = b.Envelopes[:0]
		return
	}
	kept := b.Envelopes[:0]
	for _, e := range b.Envelopes {
		var sender *actor.PID
		if e.Sender > 0 {
			sender = b.Senders[e.Sender-1]
		}
		why, detail, ok := gd.check(p, b.TypeNames[e.TypeId], e.MessageData, sender)
		if !ok {
			gd.ref.refuse(why, detail, "peer", p.String(), "type", b.TypeNames[e.TypeId], "to", b.Targets[e.Target].GetId())
			continue
		}
		if e.MessageHeader == nil || e.MessageHeader.HeaderData == nil {
			e.MessageHeader = &remote.MessageHeader{HeaderData: map[string]string{}}
		}
		e.MessageHeader.HeaderData[fromHeader] = p.addr
		kept = append(kept, e)
	}
	clear(b.Envelopes[len(kept):])
	b.Envelopes = kept
}

// Type URLs of the cluster's own messages.
const (
	internalURL = msgpackURL + internalPrefix
	clusterURL  = internalURL + "cluster."
	opURL       = internalURL + "op."
)

// Heads of the cluster's messages: the fields that name their sender
// (msgpack decodes a struct's fields by name and skips the others).
type (
	pingHead struct {
		From, ID string
	}
	pongHead     struct{ Name, ID, Addr string }
	leaderHead   struct{ Leader string }
	replicaHead  struct{ Replica string }
	claimHead    struct{ Candidate string }
	voterHead    struct{ Voter string }
	jobAddrHead  struct{ JobAddress string }
	instAddrHead struct{ Address string }
)

// check decides one envelope of p's: what it refuses and why, or ok.
func (gd *guard) check(p *streamPeer, typeName string, data []byte, sender *actor.PID) (why refusal, detail string, ok bool) {
	if !p.connected {
		return refusedConnection, "a message before the connect request", false
	}
	if sender != nil && sender.Address != p.addr {
		return refusedSender, "a sender at another address than the peer's: " + sender.Address, false
	}
	switch typeName {
	case "google.protobuf.Any":
	case "actor.DeadLetterResponse":
		return 0, "", true
	case "actor.Watch":
		var w actor.Watch
		if proto.Unmarshal(data, &w) != nil || w.Watcher.GetAddress() != p.addr {
			return refusedNamed, "a watch for a watcher elsewhere", false
		}
		return 0, "", true
	case "actor.Unwatch":
		var w actor.Unwatch
		if proto.Unmarshal(data, &w) != nil || w.Watcher.GetAddress() != p.addr {
			return refusedNamed, "an unwatch for a watcher elsewhere", false
		}
		return 0, "", true
	case "actor.Terminated":
		var w actor.Terminated
		if proto.Unmarshal(data, &w) != nil || w.Who.GetAddress() != p.addr {
			return refusedNamed, "a termination of an actor elsewhere", false
		}
		return 0, "", true
	default: // Stop, PoisonPill, Touch, remote's and cluster's own
		return refusedSystem, "a protoactor message that may not come from another node", false
	}
	url, value := anyParts(data)
	if len(url) <= len(internalURL) || string(url[:len(internalURL)]) != internalURL {
		return 0, "", true // the application's: its actors decide
	}
	member := func() bool { return gd.member == nil || gd.member(p.name, p.id, p.addr) }
	// named decodes the head of the message and compares what it names.
	named := func(head any, same func() bool) (refusal, string, bool) {
		if err := decodeHead(value, head); err != nil {
			return refusedMalformed, "a cluster message that does not decode: " + err.Error(), false
		}
		if !same() {
			return refusedNamed, fmt.Sprintf("a message naming another sender (%+v)", head), false
		}
		return 0, "", true
	}
	switch u := string(url); u {
	case clusterURL + "ping":
		var h pingHead
		return named(&h, func() bool { return h.From == p.addr && h.ID == p.id })
	case clusterURL + "pong":
		var h pongHead
		return named(&h, func() bool { return h.Name == p.name && h.ID == p.id && h.Addr == p.addr })
	case clusterURL + "statusRequest":
		if !member() && (gd.status == nil || !gd.status(p)) {
			return refusedStatus, "a status request from a non-member", false
		}
		return 0, "", true
	case clusterURL + "statusResponse", clusterURL + "spawnResponse", opURL + "deployed", opURL + "changed":
		return 0, "", true // answers: Request takes them from the node it asked only
	case clusterURL + "claimResponse":
		var h voterHead
		return named(&h, func() bool { return h.Voter == p.name })
	}
	if !member() {
		return refusedNotMember, "a cluster message from a non-member", false
	}
	switch string(url) {
	case clusterURL + "appendRequest":
		var h leaderHead
		return named(&h, func() bool { return h.Leader == p.name })
	case clusterURL + "appendResponse":
		var h replicaHead
		return named(&h, func() bool { return h.Replica == p.name })
	case clusterURL + "claimRequest":
		var h claimHead
		return named(&h, func() bool { return h.Candidate == p.name })
	case opURL + "deploy", opURL + "stopGen", opURL + "change":
		var h jobAddrHead
		return named(&h, func() bool { return h.JobAddress == p.addr })
	case opURL + "failed", opURL + "stopped", opURL + "stats":
		var h instAddrHead
		return named(&h, func() bool { return h.Address == p.addr })
	}
	return 0, "", true
}

// anyParts returns the type URL and the value of a marshalled anypb.Any
// without copying them (nil for data that is not one).
func anyParts(data []byte) (url, value []byte) {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return nil, nil
		}
		data = data[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, data)
			if n < 0 {
				return nil, nil
			}
			data = data[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(data)
		if n < 0 {
			return nil, nil
		}
		data = data[n:]
		switch num {
		case 1:
			url = v
		case 2:
			value = v
		}
	}
	return url, value
}

// decodeHead decodes the named fields of a cluster message (the others
// are skipped) with msgpacksafe.Decode.
func decodeHead(data []byte, head any) error {
	return msgpacksafe.Decode(data, head, msgpacksafe.Limits{Source: "the head of a cluster message"})
}

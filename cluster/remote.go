package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// ErrUnreachable: a message could not be delivered: no actor of that name
// on that node, or the node cannot be reached.
var ErrUnreachable = errors.New("cluster: unreachable")

// Props returns props with the node's codec attached (a copy): an actor
// spawned from them, by the node or as a child of another actor, sends
// registered values to other nodes and receives them decoded.
func (n *Node) Props(props *actor.Props) *actor.Props {
	return props.Clone(
		actor.WithSenderMiddleware(n.codec.senderMiddleware),
		actor.WithReceiverMiddleware(n.codec.receiverMiddleware))
}

// Spawn starts a local actor named name, addressable from every node as
// (this node's Address, name). Its mailbox is props' (protoactor's
// unbounded one by default): messages from other nodes are posted from the
// connection's goroutine, so the mailbox must not block.
func (n *Node) Spawn(name string, props *actor.Props) (*actor.PID, error) {
	if n.isStopped() {
		return nil, fmt.Errorf("cluster: spawn %q: %w", name, ErrStopped)
	}
	pid, err := n.root.SpawnNamed(n.Props(props), name)
	if err != nil {
		return nil, fmt.Errorf("cluster: spawn %q: %w", name, err)
	}
	return pid, nil
}

// PID returns the address of the actor named name on the node listening at
// address (a Member's Address).
func (n *Node) PID(address, name string) *actor.PID { return actor.NewPID(address, name) }

// Root returns the node's root context: sends from it go through the codec.
func (n *Node) Root() *actor.RootContext { return n.root }

// Send sends msg to pid. A message for another node must be of a
// registered type: one that is not is refused with ErrUnregistered. To
// carry headers (W3C traceparent), send an *actor.MessageEnvelope with
// Header set. Messages from one sender to one receiver arrive in the order
// they were sent.
func (n *Node) Send(pid *actor.PID, msg any) error {
	if n.isStopped() {
		return ErrStopped
	}
	out, err := n.encodeFor(pid, msg)
	if err != nil {
		return err
	}
	n.root.Send(pid, out)
	return nil
}

// encodeFor packs msg (or the message of an envelope) when pid is remote.
func (n *Node) encodeFor(pid *actor.PID, msg any) (any, error) {
	if pid == nil {
		return nil, fmt.Errorf("cluster: send: nil PID")
	}
	if n.isLocal(pid) {
		return msg, nil
	}
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		m, err := n.codec.outgoing(env.Message)
		if err != nil {
			return nil, fmt.Errorf("cluster: send to %v: %w", pid, err)
		}
		return &actor.MessageEnvelope{Header: env.Header, Message: m, Sender: env.Sender}, nil
	}
	m, err := n.codec.outgoing(msg)
	if err != nil {
		return nil, fmt.Errorf("cluster: send to %v: %w", pid, err)
	}
	return m, nil
}

// Request sends msg to pid and waits for the actor's ctx.Respond, until
// ctx ends or, when ctx has no deadline, Config.RequestTimeout passes. The
// reply is decoded like any message; a reply that cannot be (an
// unregistered type) never arrives, so the request times out.
func (n *Node) Request(ctx context.Context, pid *actor.PID, msg any) (any, error) {
	if n.isStopped() {
		return nil, ErrStopped
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.RequestTimeout)
		defer cancel()
	}
	header := map[string]string(nil)
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		header, msg = env.Header, env.Message
	}
	body, err := n.encodeFor(pid, msg)
	if err != nil {
		return nil, err
	}
	// A short-lived actor receives the reply, so that nothing outlives the
	// call (a protoactor future would hold a timer until its timeout).
	reply := make(chan any, 1)
	var once sync.Once
	tmp := n.root.Spawn(n.Props(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case actor.SystemMessage, actor.AutoReceiveMessage:
		default:
			// The guard marks what comes from another node with the
			// node's address: a reply counts only from the node asked.
			if from := c.MessageHeader().Get(fromHeader); from != "" && from != pid.Address {
				n.refusals.refuse(refusedReply, "a reply from another node than the one asked", "asked", pid.String(), "from", from, "type", fmt.Sprintf("%T", m))
				return
			}
			once.Do(func() { reply <- m })
		}
	})))
	defer n.root.Stop(tmp)
	n.root.Send(pid, &actor.MessageEnvelope{Header: header, Message: body, Sender: tmp})
	select {
	case v := <-reply:
		if dl, ok := v.(*actor.DeadLetterResponse); ok {
			return nil, fmt.Errorf("%w: %v", ErrUnreachable, dl.Target)
		}
		return v, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("cluster: request to %v: %w", pid, context.Cause(ctx))
	}
}

// SpawnOn asks the node listening at address to spawn an actor of one of
// its Config.Kinds under name, and returns its PID.
func (n *Node) SpawnOn(ctx context.Context, address, kind, name string) (*actor.PID, error) {
	r, err := n.Request(ctx, n.PID(address, nodeActorName), &spawnRequest{Kind: kind, Name: name})
	if err != nil {
		return nil, fmt.Errorf("cluster: spawn %s %q on %s: %w", kind, name, address, err)
	}
	resp, ok := r.(*spawnResponse)
	if !ok {
		return nil, fmt.Errorf("cluster: spawn %s %q on %s: unexpected reply %T", kind, name, address, r)
	}
	if resp.Err != "" {
		return nil, fmt.Errorf("cluster: spawn %s %q on %s: %s", kind, name, address, resp.Err)
	}
	return actor.NewPID(resp.Address, resp.ID), nil
}

// nodeActor answers the requests every node serves: membership pings,
// status and remote spawns.
type nodeActor struct{ n *Node }

func (a *nodeActor) Receive(ctx actor.Context) {
	n := a.n
	switch m := ctx.Message().(type) {
	case *ping:
		resp := &pong{Cluster: n.cfg.ClusterName, Name: n.cfg.Name, ID: n.as.ID, Addr: n.Address(), Nonce: m.Nonce}
		if m.Cluster == n.cfg.ClusterName {
			resp.Peers = n.knownPeers()
			resp.Excluded = m.ID != "" && n.wasLost(m.ID)
			resp.Members, resp.To = len(n.Members()), m.ID
			if n.static != nil {
				n.static.learned(m.From)
			}
		}
		ctx.Respond(resp)
	case *statusRequest:
		ctx.Respond(&statusResponse{Stats: n.Stats()})
	case *spawnRequest:
		props, ok := n.cfg.Kinds[m.Kind]
		if !ok {
			ctx.Respond(&spawnResponse{Err: fmt.Sprintf("no kind %q on node %q", m.Kind, n.cfg.Name)})
			return
		}
		pid, err := n.Spawn(m.Name, props)
		if err != nil {
			ctx.Respond(&spawnResponse{Err: err.Error()})
			return
		}
		ctx.Respond(&spawnResponse{Address: n.Address(), ID: pid.Id})
	}
}

func splitHostPort(addr string) (string, int, bool) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, false
	}
	port, err := strconv.Atoi(p)
	return h, port, err == nil
}

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }

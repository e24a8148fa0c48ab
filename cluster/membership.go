package cluster

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pc "github.com/asynkron/protoactor-go/cluster"
)

// staticProvider is the default cluster provider: static seed peers, pinged
// over the node's own remote connection (no second listener, so TLS covers
// it, and nothing binds an address the node was not given). It replaces
// protoactor's automanaged provider, whose health server binds 0.0.0.0 and
// whose goroutines cannot be stopped.
//
// The membership actor pings every peer every FailureTimeout/4 and checks
// every FailureTimeout/10; a peer is a member while its last answer is
// younger than 9/10 of FailureTimeout, so a peer that dies is dropped
// within FailureTimeout of its last answer. Answers carry the peers the
// answering node knows, and a ping makes its sender a peer, so a node
// needs only one live seed to find the whole cluster.
type staticProvider struct {
	n   *Node
	mu  sync.Mutex
	pid *actor.PID
}

var errNoClient = errors.New("cluster: the static-peers provider has no client mode")

func (p *staticProvider) StartMember(c *pc.Cluster) error {
	if err := p.n.startServices(); err != nil {
		return err
	}
	n := p.n
	props := n.Props(actor.PropsFromProducer(func() actor.Actor {
		return &membership{n: n, cl: c, peers: map[string]*peer{}}
	}))
	pid, err := n.root.SpawnNamed(props, membershipActorName)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.pid = pid
	p.mu.Unlock()
	return nil
}

func (p *staticProvider) StartClient(*pc.Cluster) error { return errNoClient }

func (p *staticProvider) Shutdown(bool) error {
	p.mu.Lock()
	pid := p.pid
	p.pid = nil
	p.mu.Unlock()
	if pid != nil {
		return p.n.as.Root.StopFuture(pid).Wait()
	}
	return nil
}

// begin lets the membership actor ping and publish peers (see Start).
func (p *staticProvider) begin() {
	p.mu.Lock()
	pid := p.pid
	p.mu.Unlock()
	if pid != nil {
		p.n.root.Send(pid, beginMsg{})
	}
}

// learned tells the membership actor of an address that pinged this node.
func (p *staticProvider) learned(addr string) {
	p.mu.Lock()
	pid := p.pid
	p.mu.Unlock()
	if pid != nil {
		p.n.root.Send(pid, learnedPeer{addr: addr})
	}
}

type (
	tick        struct{}
	beginMsg    struct{}
	learnedPeer struct{ addr string }
)

type peer struct {
	addr     string
	seed     bool
	id, name string
	lastOK   time.Time // last answer
	lastPing time.Time
	added    time.Time
}

// membership is the static provider's actor.
type membership struct {
	n        *Node
	cl       *pc.Cluster
	peers    map[string]*peer
	self     *pc.Member
	members  []string // the member ids last published, sorted
	timer    *time.Timer
	stopped  bool
	begun    bool          // pinging and publishing peers (see Start)
	interval time.Duration // between pings of a peer
	// excluders: the member ids of peers that declared this node lost
	excluders map[string]bool
	// pings: the nonces of the pings sent and not answered yet, with when
	// they were sent; a pong counts only with one of them
	pings map[uint64]time.Time
}

// maxPeers caps the peers a membership keeps (and the members that may
// exclude it): a peer's answers cannot make it track or dial more.
const maxPeers = 512

func (m *membership) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		host, port, _ := m.n.as.GetHostPort()
		m.self = &pc.Member{Id: m.n.as.ID, Host: host, Port: int32(port), Kinds: m.cl.GetClusterKinds()}
		m.interval = m.n.cfg.FailureTimeout / 4
		now := time.Now()
		for _, addr := range m.n.cfg.Peers {
			m.add(addr, true, now)
		}
		m.publish() // this node alone, until begin
	case beginMsg:
		m.begun = true
		m.tick(ctx)
	case *actor.Stopping:
		m.stopped = true
		if m.timer != nil {
			m.timer.Stop()
		}
	case tick:
		m.tick(ctx)
	case learnedPeer:
		if m.add(msg.addr, false, time.Now()) && m.begun {
			m.pingNow(ctx, m.peers[msg.addr])
		}
	case *pong:
		if m.begun {
			m.pong(ctx, msg)
		}
	}
}

// add adds a peer; it reports whether it is new.
func (m *membership) add(addr string, seed bool, now time.Time) bool {
	if addr == "" || addr == m.n.Address() {
		return false
	}
	if p, ok := m.peers[addr]; ok {
		p.seed = p.seed || seed
		return false
	}
	if len(m.peers) >= maxPeers {
		m.n.refusals.refuse(refusedPeers, "a peer beyond the membership's cap", "peer", addr, "cap", maxPeers)
		return false
	}
	m.peers[addr] = &peer{addr: addr, seed: seed, added: now}
	return true
}

func (m *membership) pingNow(ctx actor.Context, p *peer) {
	p.lastPing = time.Now()
	if m.pings == nil {
		m.pings = map[uint64]time.Time{}
	}
	nonce := rand.Uint64() | 1 // never 0
	m.pings[nonce] = p.lastPing
	ctx.Request(actor.NewPID(p.addr, nodeActorName), &ping{Cluster: m.n.cfg.ClusterName, From: m.n.Address(), ID: m.n.as.ID, Nonce: nonce})
}

func (m *membership) tick(ctx actor.Context) {
	if m.stopped {
		return
	}
	now := time.Now()
	ft := m.n.cfg.FailureTimeout
	for nonce, sent := range m.pings {
		if now.Sub(sent) > 10*ft { // unanswered for long: its answer is refused (a peer that is
			delete(m.pings, nonce) // back answers the pings queued for it meanwhile)
		}
	}
	for addr, p := range m.peers {
		// A learned peer that has been silent for long is forgotten; seeds
		// are pinged for ever.
		if !p.seed && now.Sub(latest(p.lastOK, p.added)) > 10*ft {
			delete(m.peers, addr)
			continue
		}
		if now.Sub(p.lastPing) >= m.interval {
			m.pingNow(ctx, p)
		}
	}
	// Before the peers that went silent leave: the jobs whose copies they
	// are stop before anything restarts them here.
	m.n.checkLeases(now)
	m.publish()
	self := ctx.Self()
	root := m.n.root
	m.timer = time.AfterFunc(ft/10, func() { root.Send(self, tick{}) })
}

func (m *membership) pong(ctx actor.Context, msg *pong) {
	if msg.Cluster != m.n.cfg.ClusterName {
		m.n.codec.warnOnce("cluster:"+msg.Addr, "cluster: a peer belongs to another cluster", "peer", msg.Addr, "its cluster", msg.Cluster)
		return
	}
	// The guard checked that the pong's name, id and address are its
	// sender's; it must also answer a ping of ours (so the node at that
	// address received it).
	if _, ok := m.pings[msg.Nonce]; !ok || msg.To != m.n.as.ID {
		m.n.refusals.refuse(refusedPong, "a pong that answers no ping of this node", "peer", msg.Name, "address", msg.Addr, "excluded", msg.Excluded)
		return
	}
	delete(m.pings, msg.Nonce)
	now := time.Now()
	m.n.noteHeard(msg.ID, now)
	m.add(msg.Addr, false, now)
	p := m.peers[msg.Addr]
	if p == nil { // our own address, or beyond the cap
		return
	}
	p.id, p.name, p.lastOK = msg.ID, msg.Name, now
	for _, addr := range msg.Peers[:min(len(msg.Peers), maxPeers)] {
		if m.add(addr, false, now) {
			m.pingNow(ctx, m.peers[addr])
		}
	}
	if msg.Excluded && m.excludedBy(msg) {
		m.n.markExcluded()
	}
	m.publish()
}

// excludedBy decides whether a peer's Excluded answer stands. After a
// long pause both sides may have declared the other lost; the side that
// yields is the one with fewer members behind it. The peer's members are
// weighed against ours less those that excluded us: it stands when they
// are more, or as many and the peer is one of our members (a peer we
// declared lost ourselves does not exclude us on a tie).
func (m *membership) excludedBy(msg *pong) bool {
	if m.excluders == nil {
		m.excluders = map[string]bool{}
	}
	if len(m.excluders) < maxPeers || m.excluders[msg.ID] {
		m.excluders[msg.ID] = true
	} else {
		m.n.refusals.refuse(refusedPeers, "an excluding peer beyond the membership's cap", "peer", msg.Name, "cap", maxPeers)
	}
	ours := 0
	for _, id := range m.members {
		if !m.excluders[id] {
			ours++
		}
	}
	if msg.Members > ours || msg.Members == ours && slices.Contains(m.members, msg.ID) {
		return true
	}
	m.n.codec.warnOnce("excluded-by:"+msg.ID, "cluster: a peer declared this node lost, with no more members behind it: ignored",
		"peer", msg.Name, "its members", msg.Members, "ours", ours)
	return false
}

// publish hands the live peers to protoactor's member list when they
// changed. A peer is live while its last answer is younger than 9/10 of
// the failure timeout.
func (m *membership) publish() {
	now := time.Now()
	live := m.n.cfg.FailureTimeout * 9 / 10
	members := pc.Members{m.self}
	ids := []string{m.self.Id}
	for _, p := range m.peers {
		if p.id == "" || now.Sub(p.lastOK) >= live || m.n.wasLost(p.id) {
			continue // a member declared lost never comes back (under that id)
		}
		host, port, ok := splitHostPort(p.addr)
		if !ok {
			continue
		}
		members = append(members, &pc.Member{Id: p.id, Host: host, Port: int32(port), Kinds: m.self.Kinds})
		ids = append(ids, p.id)
	}
	slices.Sort(ids)
	if slices.Equal(ids, m.members) {
		return
	}
	m.members = ids
	m.n.codec.topoMu.Lock()
	defer m.n.codec.topoMu.Unlock()
	m.cl.MemberList.UpdateClusterTopology(members)
}

// knownPeers returns the addresses of the live members, for a pong.
func (n *Node) knownPeers() []string {
	var out []string
	for _, m := range n.Members() {
		if m.ID != n.as.ID {
			out = append(out, m.Address)
		}
	}
	return out
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

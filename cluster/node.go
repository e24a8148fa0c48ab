package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pc "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/clock"
)

// Errors of a node, for errors.Is.
var (
	// ErrStopped: the node was stopped.
	ErrStopped = errors.New("cluster: node stopped")
	// ErrInvalidConfig: Start was given a configuration it cannot follow.
	ErrInvalidConfig = errors.New("cluster: invalid configuration")
)

// Provider discovers the members of a cluster: cluster/etcd's (a
// LeasedProvider: it fences a node whose lease runs out), one of
// protoactor-go's cluster providers (wrapped by cluster/consul and
// cluster/k8s: membership only, untested against a server), or nil for
// the static peers of Config.Peers.
type Provider = pc.ClusterProvider

// Defaults of Config's zero fields.
const (
	DefaultHost           = "127.0.0.1"
	DefaultClusterName    = "sluice"
	DefaultFailureTimeout = 5 * time.Second
	DefaultRequestTimeout = 10 * time.Second
	DefaultMaxMessageSize = 64 << 20
)

// Config configures a node. Name is required; everything else has a
// default.
type Config struct {
	// Name identifies the node in the cluster: letters, digits, '.', '_'
	// and '-'. Names are unique among the live members; a node that
	// restarts keeps its name and gets a new member id.
	Name string
	// ClusterName keeps clusters apart: nodes of another cluster name never
	// become members. Default DefaultClusterName.
	ClusterName string
	// Host is the address the node's one listener binds and advertises.
	// Default DefaultHost (loopback). An unspecified address (0.0.0.0, ::)
	// is refused: other nodes could not reach it under that name.
	Host string
	// Port is the listener's port; 0 picks a free one (see Node.Address).
	Port int
	// Peers lists the addresses ("host:port", each a node's Host and Port)
	// of the other nodes, for the static-peers provider. They are seeds:
	// a node learns the rest of the cluster from them, and a node that
	// pings this one becomes a peer too. This node's own address may be in
	// the list (so that every node can share one list). Ignored with a
	// Provider.
	Peers []string
	// Provider replaces the static peers with a discovery service. nil:
	// static peers.
	Provider Provider
	// TLS, when set, secures the listener and every connection to other
	// nodes with mutual TLS: the node presents Certificates[0] as server
	// and as client, verifies servers against RootCAs and clients against
	// ClientCAs (default RootCAs), and refuses clients without a valid
	// certificate. A certificate must name its node's Host (an IP SAN for
	// an IP address), or ServerName must be set, and the node's Name (a
	// DNS SAN): a node's name is bound to its certificate, and peers refuse
	// a connection whose member id names a node the certificate does not.
	TLS *tls.Config
	// Insecure lets a node on a host other than loopback run without TLS:
	// then anything that can reach its port can act as any node. Without
	// TLS and without Insecure, Start refuses a non-loopback Host (and
	// warns on loopback).
	Insecure bool
	// StatusClients may read this node's Stats without being members
	// (Client.Status, `sluice node status`): the names of their
	// certificates with TLS, or "*" for anyone. Default: members only.
	StatusClients []string
	// Logger receives the node's logs. Default: the System's logger.
	Logger *slog.Logger
	// FailureTimeout is how long a peer may stay silent before it is
	// declared lost (static peers: it is pinged every FailureTimeout/4).
	// A lost member is fenced: its member id can never rejoin, the node
	// must restart. Default DefaultFailureTimeout.
	FailureTimeout time.Duration
	// RequestTimeout bounds Node.Request and SpawnOn when their context
	// has no deadline. Default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Registry names the application's message types (see Register). nil:
	// none, only the cluster's own messages travel.
	Registry *Registry
	// Kinds are the actors other nodes may spawn here with SpawnOn, by kind.
	Kinds map[string]*actor.Props
	// Jobs are the topologies this node can run (Run) and host instances
	// of for other nodes: the same on every node.
	Jobs Jobs
	// Leadership, when set, elects each job's coordinator in a
	// coordination service and fences its checkpoint commits there (see
	// Leadership; cluster/etcd's Provider.Leadership). nil: the copies of
	// a job's log elect its coordinator among themselves.
	Leadership Leadership
	// System hosts the node. nil: the node creates its own (with Store and
	// Logger) and stops it in Stop. A given System must not serve remote
	// yet, and must be stopped after the node.
	System *actors.System
	// Store is the store file of the System the node creates (see
	// actors.Config.Store); replicated logs are kept there.
	Store string
	// Clock drives the replication timers (membership runs on real time:
	// its timeouts are the network's). Default clock.Real().
	Clock clock.Clock
	// MaxMessageSize bounds a message on the wire. Default
	// DefaultMaxMessageSize.
	MaxMessageSize int
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func (c Config) withDefaults() Config {
	if c.ClusterName == "" {
		c.ClusterName = DefaultClusterName
	}
	if c.Host == "" {
		c.Host = DefaultHost
	}
	if c.FailureTimeout == 0 {
		c.FailureTimeout = DefaultFailureTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = DefaultMaxMessageSize
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	return c
}

func (c Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: node %q: %s", ErrInvalidConfig, c.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case !nameRE.MatchString(c.Name):
		return bad("the name must be 1 to 64 letters, digits, '.', '_' or '-'")
	case !nameRE.MatchString(c.ClusterName):
		return bad("cluster name %q: 1 to 64 letters, digits, '.', '_' or '-'", c.ClusterName)
	case c.Port < 0 || c.Port > 65535:
		return bad("port %d out of range", c.Port)
	case c.FailureTimeout < 50*time.Millisecond:
		return bad("failure timeout %v: want at least 50ms", c.FailureTimeout)
	case c.RequestTimeout < 0:
		return bad("negative request timeout %v", c.RequestTimeout)
	case c.MaxMessageSize < 1<<20:
		return bad("max message size %d: want at least 1 MiB", c.MaxMessageSize)
	case c.System != nil && c.Store != "":
		return bad("Store is for the System the node creates; the given System has its own")
	}
	if c.TLS == nil && !c.Insecure && !isLoopbackHost(c.Host) {
		return bad("host %s is not loopback: set TLS (mutual TLS between the nodes), or Insecure to run without it", c.Host)
	}
	if c.TLS != nil {
		if err := checkOwnCertificate(c.TLS, c.Name); err != nil {
			return bad("%v", err)
		}
	}
	if ip := net.ParseIP(c.Host); ip != nil && ip.IsUnspecified() {
		return bad("host %s is unspecified: name the address to bind and advertise", c.Host)
	}
	for _, p := range c.Peers {
		if _, _, err := net.SplitHostPort(p); err != nil {
			return bad("peer %q: want host:port", p)
		}
	}
	for k, p := range c.Kinds {
		if k == "" || p == nil {
			return bad("kind %q: empty name or nil props", k)
		}
	}
	return nil
}

// Member is a node in the cluster.
type Member struct {
	// Name is the node's Config.Name.
	Name string
	// ID identifies this run of the node: "name.random" (a Kubernetes
	// label value when the name has at most 40 characters). A restarted
	// node has a new one.
	ID string
	// Address is where the node listens, "host:port".
	Address string
}

// EventKind says what happened to a member.
type EventKind uint8

const (
	// Joined: the member joined the cluster (or this node saw it first).
	Joined EventKind = iota
	// Left: the member left or was declared lost (silent for longer than
	// FailureTimeout).
	Left
	// Excluded: this node was declared lost by the other members; it
	// cannot rejoin under its member id and must restart.
	Excluded
)

func (k EventKind) String() string {
	switch k {
	case Joined:
		return "joined"
	case Left:
		return "left"
	case Excluded:
		return "excluded"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// MemberEvent is a change of membership.
type MemberEvent struct {
	Kind    EventKind
	Member  Member
	Members []Member // the members after the change, by name
	Time    time.Time
}

// Node is a member of a cluster. Start it with Start and stop it with Stop.
type Node struct {
	cfg    Config
	log    *slog.Logger
	sys    *actors.System
	ownSys bool
	as     *actor.ActorSystem
	root   *actor.RootContext
	codec  *codec
	guard  *guard
	// refusals counts what the guard and the handlers refused from
	// other nodes (see auth.go).
	refusals refusals
	cl       *pc.Cluster
	static   *staticProvider
	sub      *eventstream.Subscription

	gossipStopped          bool
	services               sync.Once
	nodePID, replicaPID    *actor.PID
	jobsPID                *actor.PID
	servicesErr            error
	replicas               *replicaEndpoint
	logsOnce               sync.Once
	logStore               *logStore
	logsErr                error
	dispatchStop, dispDone chan struct{}
	wake                   chan struct{}

	mu       sync.Mutex
	stopped  bool
	members  []Member
	pending  []MemberEvent
	subs     map[int]func(MemberEvent)
	nextSub  int
	excluded bool
	// fencedBy: why a LeasedProvider fenced this node (its lease ran out)
	fencedBy error
	stores   []*ReplicatedCheckpointStore
	// lost holds the ids of the members that left: they cannot rejoin
	// (protoactor blocks them). Kept here because protoactor's block list
	// is read without its lock.
	lost map[string]bool
	// heard: when each member id last answered a ping (see lease.go)
	heard map[string]heardFrom
	// hosted: the generations of distributed jobs hosted here
	hosted []HostedGeneration
	// suspects: addresses whose last connection event was a failure; the
	// placement of distributed jobs avoids them
	suspects map[string]bool
	connSub  func()

	jobStoreMu sync.Mutex
	jobStore   *ReplicatedCheckpointStore // the default of Run

	// life ends when Stop begins: the goroutines of failover (elections,
	// watchers of runs) end with it, and lifeWG waits for them.
	life       context.Context
	lifeCancel context.CancelFunc
	lifeMu     sync.Mutex // orders lifeWG.Add with Stop's Wait
	lifeWG     sync.WaitGroup
	jobReg     jobRegistry
	leads      leaderships // with a Leadership (leadership_node.go)
}

// Names of the node's own actors.
const (
	nodeActorName       = "sluice-node"
	membershipActorName = "sluice-membership"
	replicaActorName    = "sluice-replica"
)

// Start starts a node: its listener, the membership and the actors every
// node runs. It returns once the node listens; other members appear as
// they are found (see Members, Subscribe, AwaitMembers).
func Start(ctx context.Context, cfg Config) (n *Node, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	sys, own := cfg.System, false
	if sys == nil {
		sys, err = actors.NewSystem(actors.Config{Name: cfg.Name, Logger: cfg.Logger, Store: cfg.Store})
		if err != nil {
			return nil, fmt.Errorf("cluster: node %q: %w", cfg.Name, err)
		}
		own = true
	}
	fail := func(err error) (*Node, error) {
		if own {
			_ = sys.Stop(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	as := sys.ActorSystem()
	if as.Address() != "nonhost" {
		return fail(fmt.Errorf("cluster: node %q: the actor system serves remote at %s already", cfg.Name, as.Address()))
	}
	log := cfg.Logger
	if log == nil {
		log = sys.Logger()
	}
	log = log.With("node", cfg.Name)
	// The member id carries the node's name, so that every provider's
	// members can be named. It is set before anything reads it.
	as.ID = cfg.Name + "." + as.ID
	n = &Node{cfg: cfg, log: log, sys: sys, ownSys: own, as: as, subs: map[int]func(MemberEvent){}, lost: map[string]bool{},
		dispatchStop: make(chan struct{}), dispDone: make(chan struct{}), wake: make(chan struct{}, 1)}
	n.life, n.lifeCancel = context.WithCancel(context.WithoutCancel(ctx))
	if n.codec, err = newCodec(cfg.Registry, log, n.isLocal); err != nil {
		return fail(err)
	}
	n.refusals.log = log
	n.guard = &guard{c: n.codec, ref: &n.refusals, member: n.isMember, status: n.statusAllowed}
	n.root = actor.NewRootContext(as, nil, n.codec.senderMiddleware)
	serverCreds, clientCreds, err := transportCredentials(cfg.TLS)
	if err != nil {
		return fail(fmt.Errorf("cluster: node %q: %w", cfg.Name, err))
	}
	if cfg.TLS == nil {
		log.Warn("cluster: running without TLS: any process that reaches the port can act as any node (set Config.TLS)", "host", cfg.Host)
	}
	wc := newGRPCCodec() // the streams' buffers, not cleared (grpccodec.go)
	serverOpts := []grpc.ServerOption{grpc.StreamInterceptor(n.guard.interceptor), grpc.MaxRecvMsgSize(cfg.MaxMessageSize), wc.serverOption()}
	dialOpts := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.MaxMessageSize), grpc.MaxCallSendMsgSize(cfg.MaxMessageSize))}
	if serverCreds != nil {
		serverOpts = append(serverOpts, grpc.Creds(serverCreds))
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(clientCreds))
	} else {
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(insecureCreds()))
	}
	rc := remote.Configure(cfg.Host, cfg.Port, remote.WithServerOptions(serverOpts...), remote.WithDialOptions(dialOpts...),
		remote.WithCallOptions(wc.callOption()))
	// One connection attempt per endpoint (protoactor sleeps 2 s after a
	// failed one, blocking the endpoint); membership retries on its own.
	rc.MaxRetryCount = 1
	provider := cfg.Provider
	if provider == nil {
		n.static = &staticProvider{n: n}
		provider = n.static
	}
	if lp, ok := provider.(LeasedProvider); ok {
		lp.Bind(ProviderHooks{Publish: n.publishMembers, Fence: n.fence, Logger: log})
	}
	ccfg := pc.Configure(cfg.ClusterName, provider, disthash.New(), rc,
		pc.WithRequestTimeout(cfg.RequestTimeout),
		// Gossip heartbeats block members too; leave failure detection to
		// the provider, which is faster.
		pc.WithHeartbeatExpiration(max(20*time.Second, 4*cfg.FailureTimeout)))
	n.cl = pc.New(as, ccfg)
	n.sub = as.EventStream.Subscribe(n.onEvent)
	go n.dispatch()
	if err := n.startMember(); err != nil {
		n.shutdown(context.WithoutCancel(ctx))
		return fail(fmt.Errorf("cluster: node %q: start: %w", cfg.Name, err))
	}
	// protoactor's gossip reads the member list and the block list
	// without their locks while the provider updates them (data races),
	// and its heartbeats would block members on their own: membership is
	// the provider's alone. It stops before any peer becomes a member, so
	// no gossip ever flows between sluice nodes.
	n.cl.Gossip.Shutdown()
	n.gossipStopped = true
	if n.static != nil {
		n.static.begin()
	} else if lp, ok := provider.(LeasedProvider); ok {
		lp.Begin()
	}
	if err := n.startServices(); err != nil {
		n.shutdown(context.WithoutCancel(ctx))
		return fail(fmt.Errorf("cluster: node %q: start: %w", cfg.Name, err))
	}
	n.log.Info("node started", "address", n.Address(), "id", as.ID, "cluster", cfg.ClusterName, "tls", cfg.TLS != nil)
	return n, nil
}

// startMember runs protoactor's StartMember, which panics on errors.
func (n *Node) startMember() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	n.cl.StartMember()
	return nil
}

// startServices spawns the actors every node runs. It is called once
// remote has started (so that their PIDs carry the node's address): by the
// static provider as it starts, else after StartMember.
func (n *Node) startServices() error {
	n.services.Do(func() {
		n.replicas = newReplicaEndpoint(n)
		props := n.Props(actor.PropsFromProducer(func() actor.Actor { return &nodeActor{n: n} }))
		if n.nodePID, n.servicesErr = n.root.SpawnNamed(props, nodeActorName); n.servicesErr != nil {
			return
		}
		props = n.Props(actor.PropsFromProducer(func() actor.Actor { return n.replicas }))
		if n.replicaPID, n.servicesErr = n.root.SpawnNamed(props, replicaActorName); n.servicesErr != nil {
			return
		}
		n.connSub = n.watchConnections(n.noteConnection)
		props = n.Props(actor.PropsFromProducer(func() actor.Actor { return &jobsActor{n: n} }))
		n.jobsPID, n.servicesErr = n.root.SpawnNamed(props, jobsActorName)
	})
	return n.servicesErr
}

// Stop leaves the cluster and stops the node: replication (waiting writes
// fail with ErrStopped), membership, its actors and its listener, and the
// System if the node created it. Stop is idempotent.
func (n *Node) Stop(ctx context.Context) error {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return nil
	}
	n.stopped = true
	stores := slices.Clone(n.stores)
	n.mu.Unlock()
	n.lifeMu.Lock()
	n.lifeCancel()
	n.lifeMu.Unlock()
	n.lifeWG.Wait() // elections and takeovers in progress end
	for _, j := range n.Jobs() {
		if j.From != "" { // taken over: the node's own
			_ = j.Run.Stop(ctx)
		}
	}
	for _, s := range stores {
		s.stop()
	}
	n.shutdown(ctx)
	n.log.Info("node stopped")
	if n.ownSys {
		return n.sys.Stop(ctx)
	}
	return ctx.Err()
}

// shutdown stops what Start started, in reverse order, without stopping
// the actor system (protoactor's Cluster.Shutdown would).
func (n *Node) shutdown(ctx context.Context) {
	n.guard.closing.Store(true)
	wait := func(pid *actor.PID) {
		if pid != nil {
			_ = n.as.Root.StopFuture(pid).Wait()
		}
	}
	if n.static != nil {
		_ = n.static.Shutdown(true)
	} else if n.as.Address() != "nonhost" {
		_ = n.cl.Config.ClusterProvider.Shutdown(true)
	}
	if n.cl.Remote != nil && n.as.Address() != "nonhost" { // remote started
		if !n.gossipStopped {
			n.cl.Gossip.Shutdown()
		}
		if n.cl.IdentityLookup != nil {
			n.cl.IdentityLookup.Shutdown()
		}
		wait(n.as.NewLocalPID(pc.PubSubDeliveryName))
		wait(n.nodePID)
		wait(n.replicaPID)
		wait(n.jobsPID)
		stopRemote(n.as, n.cl.Remote, n.guard)
	}
	n.as.EventStream.Unsubscribe(n.sub)
	if n.connSub != nil {
		n.connSub()
	}
	close(n.dispatchStop)
	<-n.dispDone
}

// stopRemote stops protoactor's remote without its graceful Shutdown,
// which clears the endpoint manager's connection map while the receive
// goroutines of closing connections still read it (a data race and a nil
// map dereference). The server stops first, so that no message comes in
// whose dead-letter answer would open a new outbound endpoint; then the
// endpoint actors stop, closing their connections — once the handlers of
// the inbound streams have returned: a handler still delivering a batch it
// had read would ask the stopped endpoint supervisor for an endpoint, get
// nothing and panic in protoactor (endpointLazy.connect; seen in CI when a
// cut-off node's messages arrived at a node that was stopping).
func stopRemote(as *actor.ActorSystem, r *remote.Remote, gd *guard) {
	r.Shutdown(false)
	if gd != nil && !gd.streams.wait(5*time.Second) {
		as.Logger().Warn("cluster: inbound streams still running 5s after the server stopped; stopping the endpoints anyway")
	}
	for _, name := range []string{"EndpointSupervisor", "activator"} {
		_ = as.Root.StopFuture(as.NewLocalPID(name)).Wait()
	}
}

// System returns the System hosting the node.
func (n *Node) System() *actors.System { return n.sys }

// Name returns the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// ID returns the node's member id.
func (n *Node) ID() string { return n.as.ID }

// Address returns where the node listens, "host:port".
func (n *Node) Address() string { return n.as.Address() }

// Self returns the node as a Member.
func (n *Node) Self() Member { return Member{Name: n.cfg.Name, ID: n.as.ID, Address: n.Address()} }

// Logger returns the node's logger.
func (n *Node) Logger() *slog.Logger { return n.log }

func (n *Node) isLocal(pid *actor.PID) bool {
	return pid.Address == n.as.Address() || pid.Address == "nonhost"
}

// isMember says whether a live member has that name, member id and
// address.
func (n *Node) isMember(name, id, addr string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.ContainsFunc(n.members, func(m Member) bool { return m.ID == id && m.Name == name && m.Address == addr })
}

// statusAllowed says whether a peer that is not a member may read the
// node's status (Config.StatusClients).
func (n *Node) statusAllowed(p *streamPeer) bool {
	return slices.Contains(n.cfg.StatusClients, "*") || p.secure && slices.Contains(n.cfg.StatusClients, p.name)
}

// wasLost says whether the member id left the cluster (and so can never
// rejoin).
func (n *Node) wasLost(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lost[id]
}

func (n *Node) isStopped() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stopped
}

// Members returns the members of the cluster as this node sees them, this
// node included, sorted by name.
func (n *Node) Members() []Member {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.members)
}

// Member returns the live member named name.
func (n *Node) Member(name string) (Member, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	i := slices.IndexFunc(n.members, func(m Member) bool { return m.Name == name })
	if i < 0 {
		return Member{}, false
	}
	return n.members[i], true
}

// Subscribe calls fn with every membership change from now on, in order,
// on a goroutine of the node's (one at a time; fn must not block for
// long). The returned function unsubscribes.
func (n *Node) Subscribe(fn func(MemberEvent)) (cancel func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	id := n.nextSub
	n.nextSub++
	n.subs[id] = fn
	return func() {
		n.mu.Lock()
		delete(n.subs, id)
		n.mu.Unlock()
	}
}

// AwaitMembers waits until the cluster has at least count members and
// returns them, or returns ctx's error.
func (n *Node) AwaitMembers(ctx context.Context, count int) ([]Member, error) {
	changed := make(chan struct{}, 1)
	cancel := n.Subscribe(func(MemberEvent) {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	defer cancel()
	for {
		if ms := n.Members(); len(ms) >= count {
			return ms, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: node %q: waiting for %d members, have %d: %w", n.cfg.Name, count, len(n.Members()), context.Cause(ctx))
		}
	}
}

// memberOf converts protoactor's member. Its Id is the node's actor
// system id ("name.random"); protoactor's etcd provider prefixes it with
// the cluster's name ("cluster@name.random"), which the Member does not
// carry, so that a member has one id whatever the provider.
func memberOf(m *pc.Member) Member {
	id := m.Id
	if i := strings.LastIndexByte(id, '@'); i >= 0 {
		id = id[i+1:]
	}
	name := id
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		name = name[:i]
	}
	return Member{Name: name, ID: id, Address: m.Address()}
}

// onEvent receives the actor system's events: topology changes become
// membership events.
func (n *Node) onEvent(evt any) {
	t, ok := evt.(*pc.ClusterTopology)
	if !ok {
		return
	}
	members := make([]Member, 0, len(t.Members))
	for _, m := range t.Members {
		members = append(members, memberOf(m))
	}
	slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.Name+"\x00"+a.ID, b.Name+"\x00"+b.ID) })
	now := time.Now()
	n.mu.Lock()
	n.members = members
	for _, m := range t.Left {
		n.lost[m.Id] = true
		n.pending = append(n.pending, MemberEvent{Kind: Left, Member: memberOf(m), Members: members, Time: now})
	}
	for _, m := range t.Joined {
		n.pending = append(n.pending, MemberEvent{Kind: Joined, Member: memberOf(m), Members: members, Time: now})
	}
	n.mu.Unlock()
	n.notify()
}

// markExcluded records that the other members declared this node lost.
func (n *Node) markExcluded() {
	n.mu.Lock()
	if n.excluded {
		n.mu.Unlock()
		return
	}
	n.excluded = true
	n.pending = append(n.pending, MemberEvent{Kind: Excluded, Member: n.Self(), Members: slices.Clone(n.members), Time: time.Now()})
	n.mu.Unlock()
	n.log.Error("this node was declared lost by the cluster: restart it to rejoin")
	n.notify()
}

func (n *Node) notify() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// dispatch delivers membership events to the log, the replicated stores
// and the subscribers, in order.
func (n *Node) dispatch() {
	defer close(n.dispDone)
	for {
		select {
		case <-n.wake:
		case <-n.dispatchStop:
			return
		}
		for {
			n.mu.Lock()
			if len(n.pending) == 0 {
				n.mu.Unlock()
				break
			}
			ev := n.pending[0]
			n.pending = n.pending[1:]
			subs := make([]func(MemberEvent), 0, len(n.subs))
			for id := 0; id < n.nextSub; id++ {
				if fn, ok := n.subs[id]; ok {
					subs = append(subs, fn)
				}
			}
			stores := slices.Clone(n.stores)
			n.mu.Unlock()
			if ev.Member.ID != n.as.ID {
				n.log.Info("member "+ev.Kind.String(), "member", ev.Member.Name, "id", ev.Member.ID, "address", ev.Member.Address, "members", len(ev.Members))
			}
			for _, s := range stores {
				s.memberEvent(ev)
			}
			for _, fn := range subs {
				fn(ev)
			}
		}
	}
}

// Stats is a snapshot of a node.
type Stats struct {
	Name, ID, Address string
	Members           []Member
	// Excluded: the other members declared this node lost.
	Excluded bool
	Codec    CodecStats
	// Auth counts what the node refused from other nodes: connections
	// whose certificate does not name their node, and messages that their
	// sender may not send (see AuthStats).
	Auth AuthStats
	// Replication has the state of every replicated log this node leads.
	Replication []LogStatus
	// Held lists the replicated logs this node holds, led or replicated.
	Held []HeldLog
	// Coordinates lists the jobs this node coordinates now; TakenOver
	// those it took over from a lost coordinator, by job.
	Coordinates []string
	TakenOver   map[string]string
}

// Stats returns a snapshot of the node's state.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	st := Stats{Name: n.cfg.Name, ID: n.as.ID, Address: n.Address(), Members: slices.Clone(n.members), Excluded: n.excluded}
	stores := slices.Clone(n.stores)
	n.mu.Unlock()
	st.Codec = n.codec.stats()
	st.Auth = n.refusals.stats()
	for _, s := range stores {
		st.Replication = append(st.Replication, s.Status()...)
	}
	if logs, err := n.logs(); err == nil {
		st.Held, _ = logs.held()
	}
	for _, j := range n.Jobs() {
		st.Coordinates = append(st.Coordinates, j.Job)
		if j.From != "" {
			if st.TakenOver == nil {
				st.TakenOver = map[string]string{}
			}
			st.TakenOver[j.Job] = j.From
		}
	}
	return st
}

// Status asks the node listening at address for its Stats.
func (n *Node) Status(ctx context.Context, address string) (Stats, error) {
	r, err := n.Request(ctx, actor.NewPID(address, nodeActorName), &statusRequest{})
	if err != nil {
		return Stats{}, fmt.Errorf("cluster: status of %s: %w", address, err)
	}
	resp, ok := r.(*statusResponse)
	if !ok {
		return Stats{}, fmt.Errorf("cluster: status of %s: unexpected reply %T", address, r)
	}
	return resp.Stats, nil
}

// Package etcd runs a sluice cluster's membership on etcd: each node
// registers under a lease of its own, the registrations are the members,
// and a node whose lease runs out is fenced exactly as static peers fence
// a node they declared lost.
//
// It is a module of its own (github.com/sluicehq/sluice/cluster/etcd), so
// that sluice's module never depends on etcd's client:
//
//	p, err := etcd.New(etcd.Config{Endpoints: []string{"10.0.0.1:2379", "10.0.0.2:2379", "10.0.0.3:2379"}})
//	n, err := cluster.Start(ctx, cluster.Config{Name: "n1", Host: "10.0.0.5", Port: 7001, Provider: p, TLS: tlsConfig})
//
// # Registrations
//
// A node writes one key, BaseKey/ClusterName/members/<member id>, with its
// member id, Host and Port (msgpack, decoded through sluice's bounded
// decoder on the way back), attached to a lease of LeaseTTL that it
// renews every LeaseTTL/6 (renewals run side by side, each with half the
// TTL to be confirmed; after a failed one, another follows within 0.2 s). It lists and watches the prefix: the keys are
// the membership, and a key that goes (its lease expired, or the node
// stopped and revoked it) is a member that left, whose id never comes
// back (the others block it, as with static peers).
//
// # Fencing
//
// A node counts its lease as valid until the time it sent the last
// confirmed renewal plus the TTL etcd granted: etcd cannot have expired it
// earlier, whatever the network did to the answer. When that time is a
// third of the TTL away and no later renewal was confirmed (the node was
// paused, or cannot reach a majority of etcd's members), or when etcd says
// the lease is gone, the provider fences the node (cluster.LeasedProvider):
// it reports Excluded, stops the jobs it coordinates and the instances it
// hosts, and must restart with a new member id. So a paused or cut-off
// coordinator stops its job's sources and sinks a third of a TTL before
// any other node can see its key go and take the job over (given clocks
// whose rates agree, and a stop that takes less than that).
//
// # When etcd is down
//
// Nothing expires while etcd has no leader (its leases are extended when a
// leader is elected), so no member leaves and nothing is taken over until
// etcd is back. Running jobs go on through an outage shorter than two
// thirds of LeaseTTL (a leader's re-election, a member's restart); a node
// that has had no renewal confirmed for longer cannot tell an outage from
// its own partition, and fences itself.
//
// # Security
//
// Set Config.Client's TLS (and Username, Password) to reach etcd over
// TLS with credentials: whoever may write under BaseKey can add members,
// though a member added that way still needs a certificate of the
// cluster's CA to exchange anything with the nodes (Config.TLS of the
// node). Nothing listens besides the node's own port.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	pc "github.com/asynkron/protoactor-go/cluster"
	"github.com/vmihailenco/msgpack/v5"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// Defaults of Config's zero fields.
const (
	DefaultBaseKey  = "/sluice"
	DefaultLeaseTTL = 10 * time.Second
)

// Config configures the provider.
type Config struct {
	// Endpoints of the etcd cluster (host:port, or URLs). Default
	// 127.0.0.1:2379.
	Endpoints []string
	// BaseKey is the prefix of the cluster's keys. Default DefaultBaseKey.
	BaseKey string
	// LeaseTTL is the registration's lease: a node that has had no renewal
	// confirmed for two thirds of it fences itself, and the others see it
	// leave once etcd expires the lease (after LeaseTTL). Whole seconds,
	// rounded up; at least 2 s. Default DefaultLeaseTTL. It should exceed
	// the time etcd takes to elect a leader (its election timeout, about
	// twice) by a good margin: see docs/deployment.md.
	LeaseTTL time.Duration
	// Client is etcd's client configuration (TLS, Username and Password,
	// DialTimeout, ...); Endpoints overrides its Endpoints when both are
	// set.
	Client *clientv3.Config
	// Clock tells the time for the lease's validity and paces the renewals
	// and retries. Default clock.Real().
	Clock clock.Clock
}

// ErrInvalidConfig: New was given a configuration it cannot follow.
var ErrInvalidConfig = errors.New("etcd provider: invalid configuration")

// Provider is the etcd membership (a cluster.LeasedProvider). Pass it as
// cluster.Config.Provider of one node; it is not reusable.
type Provider struct {
	cfg    Config
	cc     clientv3.Config
	ttl    time.Duration
	clk    clock.Clock
	prefix string // BaseKey/ClusterName/members/

	hooks cluster.ProviderHooks
	log   *slog.Logger

	mu          sync.Mutex
	client      *clientv3.Client
	lease       clientv3.LeaseID
	self        *pc.Member
	members     map[string]*pc.Member // by member id, this node included
	state       leaseState
	fenceT      func() bool // stops the pending fence check
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	sess        *concurrency.Session // for the elections (leadership.go)
	sessCtx     context.Context
	clusterName string
	started     bool
	begun       bool // publishing the others (see cluster.LeasedProvider)
	down        bool
}

var _ cluster.LeasedProvider = (*Provider)(nil)

// New returns a provider for one node. It does not connect yet: the node's
// Start does, and fails if etcd cannot be reached.
func New(cfg Config) (*Provider, error) {
	cc := clientv3.Config{DialTimeout: 5 * time.Second}
	if cfg.Client != nil {
		cc = *cfg.Client
	}
	if len(cfg.Endpoints) > 0 {
		cc.Endpoints = cfg.Endpoints
	}
	if len(cc.Endpoints) == 0 {
		cc.Endpoints = []string{"127.0.0.1:2379"}
	}
	if cfg.BaseKey == "" {
		cfg.BaseKey = DefaultBaseKey
	}
	if !strings.HasPrefix(cfg.BaseKey, "/") || strings.HasSuffix(cfg.BaseKey, "/") {
		return nil, fmt.Errorf("%w: base key %q: want a path like /sluice (a leading /, no trailing /)", ErrInvalidConfig, cfg.BaseKey)
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	ttl := (cfg.LeaseTTL + time.Second - 1).Truncate(time.Second)
	if ttl < 2*time.Second {
		return nil, fmt.Errorf("%w: lease TTL %v: want at least 2s (etcd refuses shorter ones)", ErrInvalidConfig, cfg.LeaseTTL)
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real()
	}
	return &Provider{cfg: cfg, cc: cc, ttl: ttl, clk: clk, members: map[string]*pc.Member{}, log: slog.New(slog.DiscardHandler)}, nil
}

// Bind implements cluster.LeasedProvider: the node calls it from Start.
func (p *Provider) Bind(h cluster.ProviderHooks) {
	p.hooks = h
	if h.Logger != nil {
		p.log = h.Logger.With("provider", "etcd")
	}
}

// memberRecord is a registration's value.
type memberRecord struct {
	ID   string `msgpack:"id"`
	Host string `msgpack:"host"`
	Port int32  `msgpack:"port"`
}

// maxRecord bounds a registration's value.
const maxRecord = 4096

var idRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}\.[A-Za-z0-9_-]{1,64}$`)

// decodeRecord decodes and checks a registration: its value must decode
// within bounds and name the member id its key ends with, a valid host
// and port. Every error names the key.
func decodeRecord(key string, value []byte, prefix string) (memberRecord, error) {
	id, ok := strings.CutPrefix(key, prefix)
	if !ok || !idRE.MatchString(id) {
		return memberRecord{}, fmt.Errorf("etcd provider: key %q: not a member id under %s", key, prefix)
	}
	if len(value) > maxRecord {
		return memberRecord{}, fmt.Errorf("etcd provider: key %q: a registration of %d bytes (at most %d)", key, len(value), maxRecord)
	}
	r, err := msgpacksafe.DecodeAs[memberRecord](value, msgpacksafe.Limits{Source: "etcd"})
	if err != nil {
		return memberRecord{}, fmt.Errorf("etcd provider: key %q: %w", key, err)
	}
	switch {
	case r.ID != id:
		return memberRecord{}, fmt.Errorf("etcd provider: key %q: the registration names member %q", key, r.ID)
	case r.Host == "" || strings.ContainsAny(r.Host, "/ ") || net.ParseIP(r.Host) == nil && !validHostname(r.Host):
		return memberRecord{}, fmt.Errorf("etcd provider: key %q: host %q", key, r.Host)
	case r.Port <= 0 || r.Port > 65535:
		return memberRecord{}, fmt.Errorf("etcd provider: key %q: port %d", key, r.Port)
	}
	return r, nil
}

var hostRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$`)

func validHostname(h string) bool { return hostRE.MatchString(h) }

// StartMember registers this node and starts watching the members.
func (p *Provider) StartMember(c *pc.Cluster) error {
	p.mu.Lock()
	if p.started {
		p.mu.Unlock()
		return errors.New("etcd provider: started twice (one Provider per node)")
	}
	p.started = true
	p.mu.Unlock()
	if p.hooks.Publish == nil {
		return errors.New("etcd provider: not bound to a node (pass it as cluster.Config.Provider)")
	}
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return fmt.Errorf("etcd provider: %w", err)
	}
	id := c.ActorSystem.ID
	p.prefix = p.cfg.BaseKey + "/" + c.Config.Name + "/members/"
	rec, err := msgpack.Marshal(memberRecord{ID: id, Host: host, Port: int32(port)})
	if err != nil {
		return err
	}
	client, err := clientv3.New(p.cc)
	if err != nil {
		return fmt.Errorf("etcd provider: connect to %v: %w", p.cc.Endpoints, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fail := func(err error) error {
		cancel()
		client.Close()
		return err
	}
	rctx, rcancel := context.WithTimeout(ctx, p.cc.DialTimeout+p.ttl)
	defer rcancel()
	sent := p.clk.Now()
	g, err := client.Grant(rctx, int64(p.ttl/time.Second))
	if err != nil {
		return fail(fmt.Errorf("etcd provider: grant a lease at %v: %w", p.cc.Endpoints, err))
	}
	if _, err := client.Put(rctx, p.prefix+id, string(rec), clientv3.WithLease(g.ID)); err != nil {
		return fail(fmt.Errorf("etcd provider: register %s: %w", p.prefix+id, err))
	}
	self := &pc.Member{Id: id, Host: host, Port: int32(port), Kinds: c.GetClusterKinds()}
	p.mu.Lock()
	p.client, p.lease, p.self, p.cancel, p.sessCtx, p.clusterName = client, g.ID, self, cancel, ctx, c.Config.Name
	p.members[id] = self
	p.state = leaseState{ttl: p.ttl}
	p.state.renewed(sent, time.Duration(g.TTL)*time.Second)
	p.armFence()
	p.mu.Unlock()
	// The members there are now, before Start returns.
	rev, err := p.list(rctx)
	if err != nil {
		p.mu.Lock()
		p.fenceT()
		p.mu.Unlock()
		return fail(err)
	}
	p.wg.Add(2)
	go p.keepAlive(ctx)
	go p.watch(ctx, rev)
	p.log.Info("registered in etcd", "key", p.prefix+id, "lease", fmt.Sprintf("%x", int64(g.ID)), "ttl", p.ttl)
	return nil
}

// Begin implements cluster.LeasedProvider: the node's gossip is stopped,
// the other members may be published.
func (p *Provider) Begin() {
	p.mu.Lock()
	p.begun = true
	p.mu.Unlock()
	p.publish()
}

// StartClient is not offered: a node is always a member.
func (p *Provider) StartClient(*pc.Cluster) error {
	return errors.New("etcd provider: no client mode")
}

// Shutdown revokes the lease (the others see this node leave at once) and
// stops the provider's goroutines and client.
func (p *Provider) Shutdown(bool) error {
	p.mu.Lock()
	if p.down || p.client == nil {
		p.down = true
		p.mu.Unlock()
		return nil
	}
	p.down = true
	cancel, client, lease, sess := p.cancel, p.client, p.lease, p.sess
	if p.fenceT != nil {
		p.fenceT()
	}
	p.mu.Unlock()
	cancel()
	if sess != nil {
		sess.Orphan() // its keys go with the lease, revoked below
	}
	p.wg.Wait()
	ctx, c2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer c2()
	_, err := client.Revoke(ctx, lease)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		p.log.Warn("etcd provider: revoke the lease", "err", err)
	}
	return client.Close()
}

// retryAfter is the time before another renewal after one failed.
const retryAfter = 200 * time.Millisecond

// renewEvery is the time between renewals.
func (p *Provider) renewEvery() time.Duration { return p.ttl / 6 }

// wait waits d on the provider's clock; false when ctx ends first.
func (p *Provider) wait(ctx context.Context, d time.Duration) bool {
	ch := make(chan struct{})
	stop := p.clk.AfterFunc(d, func() { close(ch) })
	defer stop()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// keepAlive renews the lease every renewEvery until the provider stops or
// the lease is gone. Each renewal has half the TTL to be confirmed and
// runs on its own (up to three at once): one stuck on a connection to an
// etcd member that died does not hold up the next, and a late
// confirmation still counts from its send time.
func (p *Provider) keepAlive(ctx context.Context) {
	defer p.wg.Done()
	type renewal struct {
		sent time.Time
		resp *clientv3.LeaseKeepAliveResponse
		err  error
	}
	const maxInFlight = 3
	results := make(chan renewal, maxInFlight)
	tick := make(chan struct{}, 1)
	tick <- struct{}{}
	inFlight := 0
	stopTick := func() bool { return false }
	defer func() { stopTick() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			stopTick()
			stopTick = p.clk.AfterFunc(p.renewEvery(), func() {
				select {
				case tick <- struct{}{}:
				default:
				}
			})
			if inFlight >= maxInFlight {
				continue
			}
			inFlight++
			p.wg.Add(1)
			go func(sent time.Time) {
				defer p.wg.Done()
				rctx, cancel := context.WithTimeout(ctx, p.ttl/2)
				resp, err := p.client.KeepAliveOnce(rctx, p.lease)
				cancel()
				results <- renewal{sent, resp, err}
			}(p.clk.Now())
		case r := <-results:
			inFlight--
			if ctx.Err() != nil {
				return
			}
			switch {
			case errors.Is(r.err, rpctypes.ErrLeaseNotFound) || r.err == nil && r.resp.TTL <= 0:
				p.fence(fmt.Errorf("etcd says lease %x is gone (expired)", int64(p.lease)))
				return
			case r.err != nil:
				p.log.Warn("etcd provider: renew the lease", "err", r.err, "sent", r.sent, "valid until", p.validUntil())
				// Try again soon rather than at the next beat: etcd that
				// elects a leader refuses renewals until it has one, and
				// the first renewal sent after counts from its send time.
				stopTick()
				stopTick = p.clk.AfterFunc(min(p.renewEvery(), retryAfter), func() {
					select {
					case tick <- struct{}{}:
					default:
					}
				})
			default:
				p.mu.Lock()
				p.state.renewed(r.sent, time.Duration(r.resp.TTL)*time.Second)
				if !p.state.fenced {
					p.armFence()
				}
				fenced := p.state.fenced
				p.mu.Unlock()
				if fenced {
					return
				}
			}
		}
	}
}

func (p *Provider) validUntil() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state.validUntil
}

// armFence sets the fence check at the lease's fence time (p.mu held).
func (p *Provider) armFence() {
	if p.fenceT != nil {
		p.fenceT()
	}
	at := p.state.fenceAt()
	p.fenceT = p.clk.AfterFunc(at.Sub(p.clk.Now()), func() {
		p.mu.Lock()
		due := p.state.due(p.clk.Now()) && !p.down
		until := p.state.validUntil
		p.mu.Unlock()
		if due {
			p.fence(fmt.Errorf("no renewal of its etcd lease confirmed since %v; the lease may expire at %v", until.Add(-p.ttl).Format(time.RFC3339Nano), until.Format(time.RFC3339Nano)))
		}
	})
}

// fence fences the node, once.
func (p *Provider) fence(reason error) {
	p.mu.Lock()
	if p.state.fenced || p.down {
		p.mu.Unlock()
		return
	}
	p.state.fenced = true
	if p.fenceT != nil {
		p.fenceT()
	}
	p.mu.Unlock()
	p.log.Error("etcd provider: fenced", "reason", reason)
	if p.hooks.Fence != nil {
		p.hooks.Fence(reason)
	}
}

// list reads every registration and publishes them; it returns the
// revision read.
func (p *Provider) list(ctx context.Context) (int64, error) {
	resp, err := p.client.Get(ctx, p.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("etcd provider: list %s: %w", p.prefix, err)
	}
	p.mu.Lock()
	members := map[string]*pc.Member{p.self.Id: p.self}
	for _, kv := range resp.Kvs {
		if m := p.member(kv); m != nil {
			members[m.Id] = m
		}
	}
	p.members = members
	p.mu.Unlock()
	p.publish()
	return resp.Header.Revision, nil
}

// member decodes a registration; nil (logged) when it does not decode.
func (p *Provider) member(kv *mvccpb.KeyValue) *pc.Member {
	r, err := decodeRecord(string(kv.Key), kv.Value, p.prefix)
	if err != nil {
		p.log.Warn("etcd provider: a registration ignored", "err", err)
		return nil
	}
	if r.ID == p.self.Id {
		return p.self
	}
	return &pc.Member{Id: r.ID, Host: r.Host, Port: r.Port, Kinds: p.self.Kinds}
}

// watch follows the registrations from revision rev on; after a broken
// watch (etcd lost its leader, the revision was compacted) it lists them
// again.
func (p *Provider) watch(ctx context.Context, rev int64) {
	defer p.wg.Done()
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range p.client.Watch(wctx, p.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if wr.Err() != nil {
				p.log.Info("etcd provider: the watch broke; listing again", "err", wr.Err())
				break
			}
			p.mu.Lock()
			for _, ev := range wr.Events {
				id := strings.TrimPrefix(string(ev.Kv.Key), p.prefix)
				switch {
				case id == p.self.Id:
					// this node's own key: it is a member while not fenced
				case ev.Type == clientv3.EventTypeDelete:
					delete(p.members, id)
				default:
					if m := p.member(ev.Kv); m != nil {
						p.members[m.Id] = m
					}
				}
			}
			rev = wr.Header.Revision
			p.mu.Unlock()
			p.publish()
		}
		cancel()
		for ctx.Err() == nil {
			lctx, lcancel := context.WithTimeout(ctx, p.renewEvery())
			r, err := p.list(lctx)
			lcancel()
			if err == nil {
				rev = r
				break
			}
			if !p.wait(ctx, p.renewEvery()) {
				return
			}
		}
	}
}

// publish hands the members to the node.
func (p *Provider) publish() {
	p.mu.Lock()
	ms := make([]*pc.Member, 0, len(p.members))
	for _, m := range p.members {
		if p.begun || m == p.self {
			ms = append(ms, m)
		}
	}
	down := p.down
	p.mu.Unlock()
	if down {
		return
	}
	slices.SortFunc(ms, func(a, b *pc.Member) int { return strings.Compare(a.Id, b.Id) })
	p.hooks.Publish(ms)
}

// leaseState decides when a node must fence itself: its lease is valid
// until the send time of the last confirmed renewal plus the TTL etcd
// granted then (etcd cannot have expired it earlier), and the node
// fences itself a third of its TTL before that.
type leaseState struct {
	ttl        time.Duration // the lease's TTL, as asked
	validUntil time.Time
	fenced     bool
}

// renewed records a renewal sent at sent and confirmed with granted.
func (l *leaseState) renewed(sent time.Time, granted time.Duration) {
	if v := sent.Add(granted); v.After(l.validUntil) {
		l.validUntil = v
	}
}

// fenceAt is when the node fences itself without a later renewal.
func (l *leaseState) fenceAt() time.Time { return l.validUntil.Add(-l.ttl / 3) }

// due reports whether the node must fence itself at now.
func (l *leaseState) due(now time.Time) bool { return !now.Before(l.fenceAt()) }

func (p *Provider) String() string {
	return "etcd provider at " + strings.Join(p.cc.Endpoints, ",") + " (lease " + strconv.Itoa(int(p.ttl/time.Second)) + "s)"
}

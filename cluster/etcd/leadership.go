package etcd

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// Leadership returns the provider's cluster.Leadership: one etcd election
// per job, under BaseKey/ClusterName/jobs/<job>/election, on the node's
// own lease (the one its registration holds, so that a node that is
// fenced loses its terms with it), and the job's latest committed
// checkpoint under BaseKey/ClusterName/jobs/<job>/checkpoint. Pass it as
// cluster.Config.Leadership of the node this provider serves:
//
//	p, err := etcd.New(etcd.Config{Endpoints: endpoints})
//	n, err := cluster.Start(ctx, cluster.Config{Name: "n1", Provider: p, Leadership: p.Leadership(), ...})
//
// A term's fencing token is the revision at which its candidate key was
// created, and its commit is a transaction that writes the pointer only
// if that key still exists with that revision: a leader whose key went
// with its lease, or that resigned, cannot pass it.
func (p *Provider) Leadership() cluster.Leadership { return leadership{p} }

type leadership struct{ p *Provider }

var jobRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// session returns the provider's session on its lease, made on first use.
func (p *Provider) session() (*concurrency.Session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil || p.down {
		return nil, errors.New("etcd provider: not started (or stopped): start the node first")
	}
	if p.sess == nil {
		s, err := concurrency.NewSession(p.client, concurrency.WithLease(p.lease), concurrency.WithContext(p.sessCtx))
		if err != nil {
			return nil, fmt.Errorf("etcd provider: a session on the lease: %w", err)
		}
		p.sess = s
	}
	return p.sess, nil
}

func (p *Provider) jobKey(job string) string {
	return p.cfg.BaseKey + "/" + p.clusterName + "/jobs/" + job
}

func (l leadership) Campaign(ctx context.Context, job string) (cluster.Term, error) {
	if !jobRE.MatchString(job) {
		return nil, fmt.Errorf("etcd provider: job name %q: letters, digits, '.', '_' and '-' only", job)
	}
	s, err := l.p.session()
	if err != nil {
		return nil, err
	}
	e := concurrency.NewElection(s, l.p.jobKey(job)+"/election")
	if err := e.Campaign(ctx, l.p.self.Id); err != nil {
		return nil, fmt.Errorf("etcd provider: campaign for job %q: %w", job, err)
	}
	t := &term{p: l.p, job: job, e: e, s: s, resigned: make(chan struct{}), done: make(chan struct{})}
	go func() { // Done: the session's end or a resignation
		select {
		case <-s.Done():
		case <-t.resigned:
		}
		close(t.done)
	}()
	l.p.log.Info("etcd provider: elected", "job", job, "key", e.Key(), "token", e.Rev())
	return t, nil
}

type term struct {
	p        *Provider
	job      string
	e        *concurrency.Election
	s        *concurrency.Session
	once     sync.Once
	resigned chan struct{}
	done     chan struct{}
}

// pointerRecord is the value of a job's checkpoint key.
type pointerRecord struct {
	Checkpoint uint64 `msgpack:"checkpoint"`
	Token      int64  `msgpack:"token"`  // of the term that committed it
	Leader     string `msgpack:"leader"` // its member id
}

// decodePointer decodes a job's checkpoint pointer (bounded; every error
// names the key).
func decodePointer(key string, value []byte) (pointerRecord, error) {
	if len(value) > maxRecord {
		return pointerRecord{}, fmt.Errorf("etcd provider: key %q: a pointer of %d bytes (at most %d)", key, len(value), maxRecord)
	}
	r, err := msgpacksafe.DecodeAs[pointerRecord](value, msgpacksafe.Limits{Source: "etcd"})
	if err != nil {
		return pointerRecord{}, fmt.Errorf("etcd provider: key %q: %w", key, err)
	}
	if r.Token <= 0 {
		return pointerRecord{}, fmt.Errorf("etcd provider: key %q: token %d", key, r.Token)
	}
	return r, nil
}

func (t *term) Token() uint64 { return uint64(t.e.Rev()) }

func (t *term) Commit(ctx context.Context, checkpoint uint64) error {
	v, err := msgpack.Marshal(pointerRecord{Checkpoint: checkpoint, Token: t.e.Rev(), Leader: t.p.self.Id})
	if err != nil {
		return err
	}
	key := t.p.jobKey(t.job) + "/checkpoint"
	resp, err := t.p.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(t.e.Key()), "=", t.e.Rev())).
		Then(clientv3.OpPut(key, string(v))).
		Commit()
	if err != nil {
		return fmt.Errorf("etcd provider: commit checkpoint %d of job %q: %w", checkpoint, t.job, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcd provider: commit checkpoint %d of job %q: %w: term %d no longer leads (its key %s is gone)",
			checkpoint, t.job, cluster.ErrFenced, t.e.Rev(), t.e.Key())
	}
	return nil
}

func (t *term) Latest(ctx context.Context) (uint64, error) {
	key := t.p.jobKey(t.job) + "/checkpoint"
	resp, err := t.p.client.Get(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("etcd provider: read %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	r, err := decodePointer(key, resp.Kvs[0].Value)
	if err != nil {
		return 0, err
	}
	return r.Checkpoint, nil
}

func (t *term) Done() <-chan struct{} { return t.done }

func (t *term) Resign(ctx context.Context) error {
	t.once.Do(func() { close(t.resigned) })
	if err := t.e.Resign(ctx); err != nil {
		return fmt.Errorf("etcd provider: resign job %q: %w", t.job, err)
	}
	return nil
}

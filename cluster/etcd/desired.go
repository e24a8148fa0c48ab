package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/clock"
)

// DesiredConfig configures WatchDesired.
type DesiredConfig struct {
	// Endpoints and Client are as in Config.
	Endpoints []string
	Client    *clientv3.Config
	// Key holds the desired-state document (JSON, as for
	// admin.Server.WatchFile). Required.
	Key string
	// Clock paces the retries while etcd cannot be reached (one a
	// second). Default clock.Real().
	Clock clock.Clock
}

// WatchDesired applies the desired-state document stored under cfg.Key in
// etcd to srv now and at every change of the key, as srv.WatchFile does
// for a file: each new version applied whole or rejected whole. Every
// process that watches the key (one per node) applies each version to the
// jobs it runs, so a change reaches every node as soon as etcd's watch
// tells them. A deleted key changes nothing (the last good version stays).
// stop ends the watch and waits for a document being applied.
func WatchDesired(ctx context.Context, cfg DesiredConfig, srv *admin.Server) (stop func() error, err error) {
	if cfg.Key == "" {
		return nil, errors.New("etcd: desired state: no Key")
	}
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
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("etcd: desired state: %w", err)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	source := "etcd:" + cfg.Key
	ctx, cancel := context.WithCancel(ctx)
	get := func() (int64, error) {
		resp, err := cli.Get(ctx, cfg.Key)
		if err != nil {
			return 0, err
		}
		if len(resp.Kvs) > 0 {
			_ = srv.ApplyDocument(ctx, source, resp.Kvs[0].Value) // a rejection is in srv's status
		}
		return resp.Header.Revision, nil
	}
	rev, err := get()
	if err != nil {
		cancel()
		cli.Close()
		return nil, fmt.Errorf("etcd: desired state: read %s: %w", cfg.Key, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned: stop cancels it and waits
		defer wg.Done()
		for ctx.Err() == nil {
			wch := cli.Watch(clientv3.WithRequireLeader(ctx), cfg.Key, clientv3.WithRev(rev+1))
			for resp := range wch {
				if err := resp.Err(); err != nil {
					break // compacted or lost the leader: read the key again below
				}
				for _, ev := range resp.Events {
					if ev.Type == clientv3.EventTypePut {
						_ = srv.ApplyDocument(ctx, source, ev.Kv.Value)
					}
					rev = ev.Kv.ModRevision
				}
			}
			if ctx.Err() != nil {
				return
			}
			if r, err := get(); err == nil {
				rev = r
			} else {
				again := make(chan struct{})
				stopTimer := cfg.Clock.AfterFunc(time.Second, func() { close(again) })
				select { // etcd unreachable: look again in a moment
				case <-ctx.Done():
					stopTimer()
					return
				case <-again:
				}
			}
		}
	}()
	return func() error {
		cancel()
		wg.Wait()
		return cli.Close()
	}, nil
}

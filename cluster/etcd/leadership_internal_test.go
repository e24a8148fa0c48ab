package etcd

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	pc "github.com/asynkron/protoactor-go/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/cluster"
)

// A stale leader cannot commit: A leads the job and commits checkpoint 1;
// its lease goes (revoked here, as etcd expires it after a pause); B, who
// campaigned meanwhile, is elected, finds checkpoint 1 committed and
// commits 2; A's commit of 2 is fenced, and A's term is over.
func TestStaleLeaderCannotCommit(t *testing.T) {
	eps := []string{"127.0.0.1:2379", "127.0.0.1:22379", "127.0.0.1:32379"}
	if c, err := net.DialTimeout("tcp", eps[0], time.Second); err != nil {
		if os.Getenv("SLUICE_REQUIRE_ETCD") == "1" || os.Getenv("SLUICE_REQUIRE_SERVICES") == "1" {
			t.Fatalf("etcd at %s: %v (bash .ci/services starts it)", eps[0], err)
		}
		t.Skipf("no etcd at %s: %v", eps[0], err)
	} else {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := "stale-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	mk := func(id string) *Provider {
		p, err := New(Config{Endpoints: eps, BaseKey: "/sluice-test"})
		if err != nil {
			t.Fatal(err)
		}
		cc := p.cc
		cc.Logger = zap.NewNop()
		cli, err := clientv3.New(cc)
		if err != nil {
			t.Fatal(err)
		}
		g, err := cli.Grant(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		p.client, p.lease, p.self, p.sessCtx, p.clusterName = cli, g.ID, &pc.Member{Id: id}, ctx, cl
		t.Cleanup(func() {
			if p.sess != nil {
				p.sess.Orphan()
			}
			_, _ = cli.Revoke(context.Background(), g.ID)
			cli.Close()
		})
		return p
	}
	a, b := mk("a.1"), mk("b.1")
	ta, err := a.Leadership().Campaign(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := ta.Commit(ctx, 1); err != nil {
		t.Fatalf("the leader's commit: %v", err)
	}
	elected := make(chan cluster.Term, 1)
	failed := make(chan error, 1)
	go func() {
		tb, err := b.Leadership().Campaign(ctx, "job")
		if err != nil {
			failed <- err
			return
		}
		elected <- tb
	}()
	if _, err := a.client.Revoke(ctx, a.lease); err != nil {
		t.Fatal(err)
	}
	var tb cluster.Term
	select {
	case tb = <-elected:
	case err := <-failed:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("b was not elected after a's lease went")
	}
	if tb.Token() <= ta.Token() {
		t.Errorf("b's token %d is not greater than a's %d", tb.Token(), ta.Token())
	}
	if got, err := tb.Latest(ctx); err != nil || got != 1 {
		t.Fatalf("b found checkpoint %d committed (%v), want 1", got, err)
	}
	if err := ta.Commit(ctx, 2); !errors.Is(err, cluster.ErrFenced) {
		t.Fatalf("the stale leader's commit: %v, want ErrFenced", err)
	}
	if err := tb.Commit(ctx, 2); err != nil {
		t.Fatalf("the new leader's commit: %v", err)
	}
	if got, _ := tb.Latest(ctx); got != 2 {
		t.Fatalf("latest %d, want 2", got)
	}
	select {
	case <-ta.Done():
	case <-ctx.Done():
		t.Fatal("a's term did not end with its lease")
	}
	if err := tb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	<-tb.Done()
}

// FuzzDecodePointer: any bytes under a job's checkpoint key decode to a
// pointer with a positive token, or an error that names the key.
func FuzzDecodePointer(f *testing.F) {
	f.Add([]byte{0x83, 0xaa, 'c', 'h', 'e', 'c', 'k', 'p', 'o', 'i', 'n', 't', 0x07, 0xa5, 't', 'o', 'k', 'e', 'n', 0x2a, 0xa6, 'l', 'e', 'a', 'd', 'e', 'r', 0xa3, 'a', '.', '1'})
	f.Add([]byte{0xc1})
	f.Fuzz(func(t *testing.T, value []byte) {
		const key = "/sluice/c/jobs/j/checkpoint"
		r, err := decodePointer(key, value)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(key)) {
				t.Fatalf("the error does not name the key: %v", err)
			}
			return
		}
		if r.Token <= 0 {
			t.Fatalf("accepted token %d", r.Token)
		}
	})
}

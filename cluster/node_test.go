package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/cluster"
)

// TestClusterForms: three nodes that know only one seed find each other,
// and each sees all three.
func TestClusterForms(t *testing.T) {
	t.Parallel()
	start := time.Now()
	a := startChild(t, childConfig{Name: "a", Cluster: "forms", Replicas: -1})
	b := startChild(t, childConfig{Name: "b", Cluster: "forms", Peers: []string{a.Address}, Replicas: -1})
	c := startChild(t, childConfig{Name: "c", Cluster: "forms", Peers: []string{a.Address}, Replicas: -1})
	p := parent(t)
	t.Logf("started at %v", time.Since(start))
	want := []string{"a", "b", "c"}
	for _, ch := range []*child{a, b, c} {
		var names []string
		deadline := time.Now().Add(15 * time.Second)
		for { // a bounded poll: the other process has no event to wait on
			st, err := p.Status(timeout(t), ch.Address)
			if err != nil {
				t.Fatal(err)
			}
			names = names[:0]
			for _, m := range st.Members {
				names = append(names, m.Name)
			}
			if slices.Equal(names, want) || time.Now().After(deadline) {
				break
			}
			awaitTick()
		}
		if !slices.Equal(names, want) {
			t.Errorf("%s sees %v, want %v", ch.Cfg.Name, names, want)
		}
		t.Logf("%s sees %v at %v", ch.Cfg.Name, names, time.Since(start))
	}
}

// awaitTick waits one poll interval.
func awaitTick() { <-time.After(100 * time.Millisecond) }

func TestRequestAcrossNodes(t *testing.T) {
	t.Parallel()
	p := parent(t)
	b := startChild(t, childConfig{Name: "b", Cluster: "req", Replicas: -1})
	r, err := p.Request(timeout(t), p.PID(b.Address, "echo"), Greet{Name: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := r.(*Greeting); !ok || g.Text != "echo ann" {
		t.Fatalf("reply %#v, want *Greeting echo ann", r)
	}
	// And back: the child asks the parent's echo, spawned here.
	echoReq := fresh("echo-req") // the parent node outlives the test (-count)
	if _, err := p.Spawn(echoReq, echoProps()); err != nil {
		t.Fatal(err)
	}
	b.Send(fmt.Sprintf("request %s %s bob", p.Address(), echoReq))
	if f := b.Expect(10*time.Second, "REPLY"); strings.Join(f[1:], " ") != "echo bob" {
		t.Errorf("child's reply %v", f)
	}
	if st := p.Stats().Codec; st.Packed == 0 || st.Unpacked == 0 {
		t.Errorf("codec stats %+v: want packed and unpacked counts", st)
	}
	// No actor of that name: a dead letter comes back at once.
	if _, err := p.Request(timeout(t), p.PID(b.Address, "nobody"), Greet{}); !errors.Is(err, cluster.ErrUnreachable) {
		t.Errorf("Request to nobody = %v, want ErrUnreachable", err)
	}
	// An actor that never answers: the context's deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := p.Request(ctx, p.PID(b.Address, "sink"), Greet{Name: "x", Seq: 1}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Request to a mute actor = %v, want deadline exceeded", err)
	}
}

func TestUnregisteredRefused(t *testing.T) {
	t.Parallel()
	p := parent(t)
	before := p.Stats().Codec.Unregistered
	pid := p.PID("127.0.0.1:1", "nobody")
	if err := p.Send(pid, secret{Key: "x"}); !errors.Is(err, cluster.ErrUnregistered) {
		t.Errorf("Send(unregistered) = %v, want ErrUnregistered", err)
	}
	if _, err := p.Request(timeout(t), pid, &secret{}); !errors.Is(err, cluster.ErrUnregistered) {
		t.Errorf("Request(unregistered) = %v, want ErrUnregistered", err)
	}
	if n := p.Stats().Codec.Unregistered - before; n != 2 {
		t.Errorf("unregistered counted %d, want 2", n)
	}
	// Locally, any value goes.
	got := make(chan secret, 1)
	local, err := p.Spawn(fresh("local-secret"), actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(secret); ok {
			got <- m
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Send(local, secret{Key: "local"}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m.Key != "local" {
			t.Errorf("got %+v", m)
		}
	case <-timeout(t).Done():
		t.Fatal("local message not delivered")
	}
}

// TestOrderPerSender: messages from one sender to one receiver on another
// node arrive in the order they were sent, also while another sender (in
// another process) interleaves its own.
func TestOrderPerSender(t *testing.T) {
	t.Parallel()
	p := parent(t)
	b := startChild(t, childConfig{Name: "b", Cluster: "order", Replicas: -1})
	c := startChild(t, childConfig{Name: "c", Cluster: "order", Replicas: -1})
	const n = 5000
	sink := p.PID(b.Address, "sink")
	c.Send(fmt.Sprintf("send %s sink from-c %d", b.Address, n))
	for i := 1; i <= n; i++ {
		if err := p.Send(sink, Greet{Name: "from-parent", Seq: i}); err != nil {
			t.Fatal(err)
		}
	}
	c.Expect(20*time.Second, "SENT")
	var got *Counted
	deadline := time.Now().Add(20 * time.Second)
	for { // bounded poll: the sink's count is the event
		r, err := p.Request(timeout(t), sink, Count{})
		if err != nil {
			t.Fatal(err)
		}
		got = r.(*Counted)
		if got.N >= 2*n || time.Now().After(deadline) {
			break
		}
		awaitTick()
	}
	if got.N != 2*n || len(got.Disorder) > 0 {
		t.Fatalf("the sink counted %d of %d messages; out of order: %v", got.N, 2*n, got.Disorder)
	}
}

func TestHeadersPassThrough(t *testing.T) {
	t.Parallel()
	p := parent(t)
	b := startChild(t, childConfig{Name: "b", Cluster: "headers", Replicas: -1})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	env := &actor.MessageEnvelope{Header: map[string]string{"traceparent": tp}, Message: Greet{Name: "t"}}
	r, err := p.Request(timeout(t), p.PID(b.Address, "echo"), env)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.(*Greeting).Text; got != "echo t traceparent="+tp {
		t.Errorf("reply %q: the traceparent did not reach the other node", got)
	}
}

func TestSpawnOn(t *testing.T) {
	t.Parallel()
	p := parent(t)
	// Only members may spawn: b joins the parent's cluster.
	b := startChild(t, childConfig{Name: "b-spawn", Cluster: "parent", Peers: []string{p.Address()}, Replicas: -1})
	awaitMember(t, p, "b-spawn", true)
	// The child spawns one of the parent's kinds on the parent.
	name := fresh("spawned-echo") // the parent node outlives the test (-count)
	pid, err := p.SpawnOn(timeout(t), p.Address(), "echo", name)
	if err != nil {
		t.Fatal(err)
	}
	if pid.Address != p.Address() || pid.Id != name {
		t.Errorf("spawned %v, want %s/%s", pid, p.Address(), name)
	}
	b.Send(fmt.Sprintf("request %s %s z", p.Address(), name))
	if f := b.Expect(10*time.Second, "REPLY"); strings.Join(f[1:], " ") != "echo z" {
		t.Errorf("reply from the spawned actor: %v", f)
	}
	if _, err := p.SpawnOn(timeout(t), b.Address, "nope", "n"); err == nil || !strings.Contains(err.Error(), `no kind "nope"`) {
		t.Errorf("SpawnOn of an unknown kind = %v", err)
	}
}

func TestConfigRefused(t *testing.T) {
	bad := []cluster.Config{
		{},
		{Name: "a b"},
		{Name: "a", Host: "0.0.0.0"},
		{Name: "a", Peers: []string{"nohost"}},
		{Name: "a", FailureTimeout: time.Millisecond},
		{Name: "a", Port: 70000},
	}
	for _, cfg := range bad {
		if n, err := cluster.Start(context.Background(), cfg); !errors.Is(err, cluster.ErrInvalidConfig) {
			if n != nil {
				n.Stop(context.Background())
			}
			t.Errorf("Start(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

package cluster_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/internal/wire"
)

// forger speaks protoactor's wire protocol to one node over a raw gRPC
// stream, with a certificate of its own (or none), and sends crafted
// messages: what a process holding a cluster certificate, but not a
// member, can do.
type forger struct {
	t      *testing.T
	conn   *grpc.ClientConn
	stream remote.Remoting_ReceiveClient
	addr   string // the address it claims to listen on
}

// dialForger connects to the node at target as member id id listening at
// addr; tc nil: without TLS. It returns the connect request's outcome.
func dialForger(t *testing.T, target string, tc *tls.Config, id, addr string) (*forger, error) {
	t.Helper()
	creds := insecure.NewCredentials()
	if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stream, err := remote.NewRemotingClient(conn).Receive(timeout(t))
	if err != nil {
		return nil, err
	}
	err = stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
		ConnectionType: &remote.ConnectRequest_ServerConnection{ServerConnection: &remote.ServerConnection{SystemId: id, Address: addr}}}}})
	if err != nil {
		return nil, err
	}
	if _, err := stream.Recv(); err != nil {
		return nil, err
	}
	return &forger{t: t, conn: conn, stream: stream, addr: addr}, nil
}

// send sends one protobuf message to target, from sender (nil: none).
func (f *forger) Send(target, sender *actor.PID, msg proto.Message) {
	f.t.Helper()
	data, err := proto.Marshal(msg)
	if err != nil {
		f.t.Fatal(err)
	}
	b := &remote.MessageBatch{TypeNames: []string{string(proto.MessageName(msg))}, Targets: []*actor.PID{target},
		Envelopes: []*remote.MessageEnvelope{{TypeId: 0, MessageData: data, Target: 0}}}
	if sender != nil {
		b.Senders, b.Envelopes[0].Sender = []*actor.PID{sender}, 1
	}
	if err := f.stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: b}}); err != nil {
		f.t.Fatal(err)
	}
}

// sendAs sends v (a struct or a map of field names) msgpack-encoded under
// a registered name, as the codec would.
func (f *forger) sendAs(target, sender *actor.PID, name string, v any) {
	f.t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		f.t.Fatal(err)
	}
	f.Send(target, sender, &anypb.Any{TypeUrl: "sluice.msgpack/" + name, Value: b})
}

// authCounts asks a child for its refusal counters.
func authCounts(c *child) map[string]int {
	c.T().Helper()
	c.Send("auth")
	f := c.Expect(10*time.Second, "AUTH")
	out := map[string]int{}
	for _, kv := range f[2:] {
		k, v, _ := strings.Cut(kv, "=")
		out[k], _ = strconv.Atoi(v)
	}
	return out
}

// refusedLines counts the REFUSED lines of reason among lines, and those
// at WARN.
func refusedLines(lines []string, reason string) (all, warn int) {
	for _, l := range lines {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "REFUSED" && f[1] == reason {
			all++
			if f[2] == "WARN" {
				warn++
			}
		}
	}
	return all, warn
}

// TestForgedMessagesRefused: three nodes with mutual TLS run a counting
// job; a process with a certificate of the cluster's CA (for "mallory",
// not a member) connects to each and sends, twice each, one row of
// forgeries per subtest: a status request, pongs declaring the node
// excluded, protoactor's Stop and PoisonPill to the node actor, an append
// to a replica, a stale append answer and an ack to the job log's leader,
// a claim of the job's log, a deployment, a failure notice to the job
// actor. Each is refused and counted under its reason, the first of a
// reason is logged as a warning and the next ones are not, and the job
// finishes with the exact result and no restart, every node a member.
func TestForgedMessagesRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	ca := newCA(t, "cluster CA")
	cl := "forged-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	node := func(name string, peers ...string) childConfig {
		caf, cert, key := ca.issue(t, name, nil)
		return childConfig{Name: name, Cluster: cl, Peers: peers, CA: caf, Cert: cert, Key: key, Store: storeIn(t, name),
			FailureTimeout: procFailureTimeout, Replicas: -1, PrivateStatus: true}
	}
	a := startChild(t, node("a"))
	b := startChild(t, node("b", a.Address))
	cc := node("c", a.Address)
	cc.HoldSource = true // the job (and its job actor) runs until the forgeries are refused
	c := startChild(t, cc)
	a.AwaitAll(10*time.Second, "EVENT joined b", "EVENT joined c")
	b.AwaitAll(10*time.Second, "EVENT joined c")
	c.AwaitAll(10*time.Second, "EVENT joined b")

	caf, cert, key := ca.issue(t, "mallory", nil)
	mtls, err := loadTLS(caf, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	const self = "127.0.0.1:1" // mallory's claimed address: nothing listens there
	forge := func(to *child) *forger {
		f, err := dialForger(t, to.Address, mtls, "mallory.f1", self)
		if err != nil {
			t.Fatalf("mallory's connection to %s: %v", to.Cfg.Name, err)
		}
		return f
	}
	fa, fb, fc := forge(a), forge(b), forge(c)

	base := map[*child]map[string]int{a: authCounts(a), b: authCounts(b), c: authCounts(c)}
	want := wantCounts(jobRecords)
	c.Send(fmt.Sprintf("run counting %d %s", jobRecords, t.TempDir()))
	c.Until(30*time.Second, "the job's placement", func(lines []string) bool {
		return slicesContainsPrefix(lines, "PLACED") || slicesContainsPrefix(lines, "JOBERROR")
	})
	expected := map[*child]map[string]int{a: {}, b: {}, c: {}}
	const log = "checkpoints/counting"
	jobActor := actor.NewPID(c.Address, c.Expect(30*time.Second, "JOBACTOR")[1])

	rows := []struct {
		name   string
		at     *child
		reason string
		forge  func()
	}{
		{"status from a non-member", a, "status", func() {
			fa.sendAs(actor.NewPID(a.Address, "sluice-node"), actor.NewPID(self, "ear"), "sluice.cluster.statusRequest", map[string]any{})
		}},
		{"pong excluding the node, in another's name", a, "named-sender", func() {
			fa.sendAs(actor.NewPID(a.Address, "sluice-membership"), nil, "sluice.cluster.pong", map[string]any{
				"Cluster": cl, "Name": "b", "ID": b.ID, "Addr": b.Address, "Excluded": true, "Members": 9, "To": a.ID, "Nonce": 1})
		}},
		{"pong excluding the node, answering no ping", a, "pong", func() {
			fa.sendAs(actor.NewPID(a.Address, "sluice-membership"), nil, "sluice.cluster.pong", map[string]any{
				"Cluster": cl, "Name": "mallory", "ID": "mallory.f1", "Addr": self, "Excluded": true, "Members": 9, "To": a.ID, "Nonce": 1})
		}},
		{"remote Stop to sluice-node", a, "system-message", func() {
			fa.Send(actor.NewPID(a.Address, "sluice-node"), nil, &actor.Stop{})
		}},
		{"remote PoisonPill to sluice-node", a, "system-message", func() {
			fa.Send(actor.NewPID(a.Address, "sluice-node"), nil, &actor.PoisonPill{})
		}},
		{"append to sluice-replica", b, "not-member", func() {
			fb.sendAs(actor.NewPID(b.Address, "sluice-replica"), nil, "sluice.cluster.appendRequest", map[string]any{
				"Log": log, "Leader": "c", "Epoch": uint64(1) << 40, "Seq": 1, "Prev": 0, "PrevEpoch": 0, "Commit": 1,
				"Entries": []map[string]any{{"Index": 1, "Epoch": uint64(1) << 40, "Data": []byte("poison")}}})
		}},
		{"stale append answer to the leader", c, "not-member", func() {
			fc.sendAs(actor.NewPID(c.Address, "sluice-leader/"+log), nil, "sluice.cluster.appendResponse", map[string]any{
				"Log": log, "Replica": "b", "Result": 2, "Epoch": uint64(1) << 40, "Seq": 1})
		}},
		{"ack to the leader", c, "not-member", func() {
			fc.sendAs(actor.NewPID(c.Address, "sluice-leader/"+log), nil, "sluice.cluster.appendResponse", map[string]any{
				"Log": log, "Replica": "b", "Result": 0, "Epoch": 1, "Seq": 1, "Match": uint64(1) << 40})
		}},
		{"claim of the job's log", b, "not-member", func() {
			fb.sendAs(actor.NewPID(b.Address, "sluice-replica"), nil, "sluice.cluster.claimRequest", map[string]any{
				"Log": log, "Epoch": uint64(1) << 40, "Candidate": "mallory", "LastIndex": uint64(1) << 40, "LastEpoch": uint64(1) << 40})
		}},
		{"deployment to sluice-jobs", b, "not-member", func() {
			fb.sendAs(actor.NewPID(b.Address, "sluice-jobs"), nil, "sluice.op.deploy", &wire.Deploy{
				Job: "counting", JobAddress: c.Address, JobID: jobActor.Id, Gen: 7, Placement: []string{b.Address}})
		}},
		{"failure notice to the job actor", c, "not-member", func() {
			fc.sendAs(jobActor, nil, "sluice.op.failed", &wire.Failed{Gen: 0, Address: b.Address, ID: "x", Operator: "count", Message: "forged"})
		}},
		// From a member, over its own authenticated connection: messages
		// that speak for the job's source instance (number 0, task 0),
		// which runs on c, the coordinator, never on b.
		{"a member's checkpoint acknowledgement for an instance it does not host", c, "instance", func() {
			memberForge(t, b, c.Address, jobActor.Id, "sluice.op.ack", `{"Gen":0,"ID":1,"Instance":0,"Offsets":{"numbers":999999}}`)
		}},
		{"a member's statistics for an instance it does not host", c, "instance", func() {
			memberForge(t, b, c.Address, jobActor.Id, "sluice.op.stats",
				fmt.Sprintf(`{"Gen":0,"Address":%q,"Instances":[{"Task":0,"Instance":0,"Ops":[{"Out":1000000000000}]}]}`, b.Address))
		}},
		{"a member's finished notice for an instance it does not host", c, "instance", func() {
			memberForge(t, b, c.Address, jobActor.Id, "sluice.op.finished", `{"Task":0,"Instance":0,"Gen":0}`)
		}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before, _ := refusedLines(row.at.SeenLines(), row.reason)
			row.forge()
			row.forge()
			row.at.Until(10*time.Second, "two refusals of "+row.reason, func(lines []string) bool {
				n, _ := refusedLines(lines, row.reason)
				return n >= before+2
			})
			expected[row.at][row.reason] += 2
		})
	}
	c.Send("open source")
	// The nodes are up, members, not excluded; the job ends exactly.
	for _, n := range []*child{a, b, c} {
		b.Send("status " + n.Address)
		if f := b.Expect(10*time.Second, "STATUS"); f[1] != n.Cfg.Name || f[2] != "3" || f[3] != "false" {
			t.Errorf("status of %s through b: %v", n.Cfg.Name, f)
		}
	}
	c.Until(2*time.Minute, "the job's end", func(lines []string) bool {
		return slicesContainsPrefix(lines, "RESULT") || slicesContainsPrefix(lines, "JOBERROR")
	})
	for _, l := range c.SeenLines() {
		f := strings.Fields(l)
		switch {
		case len(f) > 0 && f[0] == "JOBERROR":
			t.Fatalf("the job failed: %s", l)
		case len(f) == 3 && f[0] == "RESTARTS" && f[1] != "0":
			t.Errorf("the job restarted: %s", l)
		case len(f) > 0 && f[0] == "RESULT" && (len(f) != 2 || f[1] != want):
			t.Errorf("result %v, want the plain loop's %s", f, want)
		}
	}
	for _, n := range []*child{a, b, c} {
		got := authCounts(n)
		for reason, k := range expected[n] {
			if d := got[reason] - base[n][reason]; d != k {
				t.Errorf("%s refused %d for %s, want %d", n.Cfg.Name, d, reason, k)
			}
			if _, warn := refusedLines(n.SeenLines(), reason); warn != 1 {
				t.Errorf("%s logged %d warnings for %s, want 1", n.Cfg.Name, warn, reason)
			}
		}
		for _, l := range n.SeenLines() {
			if strings.HasPrefix(l, "EVENT excluded") || strings.HasPrefix(l, "EVENT left") {
				t.Errorf("%s: %s", n.Cfg.Name, l)
			}
		}
		t.Logf("%s refused %v", n.Cfg.Name, got)
	}
}

// memberForge has member m send, over its own connection, a message of
// type typ crafted from the JSON object js to actor id at addr.
func memberForge(t *testing.T, m *child, addr, id, typ, js string) {
	t.Helper()
	m.Send(fmt.Sprintf("forge %s %s %s %s", addr, id, typ, js))
	m.Expect(10*time.Second, "FORGED")
}

func slicesContainsPrefix(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

// TestCertificateForAnotherName: a process with a valid certificate of
// the cluster's CA for "mallory" that claims to be node b is refused at
// its connect request, counted and logged; with its own name it is
// accepted as a connection (though not as a member). A node whose own
// certificate does not carry its name does not start.
func TestCertificateForAnotherName(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	ca := newCA(t, "cluster CA")
	caf, cert, key := ca.issue(t, "a", nil)
	a := startChild(t, childConfig{Name: "a", Cluster: "names", CA: caf, Cert: cert, Key: key, Replicas: -1})
	caf, cert, key = ca.issue(t, "mallory", nil)
	mtls, err := loadTLS(caf, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dialForger(t, a.Address, mtls, "b.x1", "127.0.0.1:1"); err == nil {
		t.Fatal("a connection as b with mallory's certificate was accepted")
	} else {
		t.Logf("as b: %v", err)
	}
	a.Expect(10*time.Second, "REFUSED certificate WARN")
	if _, err := dialForger(t, a.Address, mtls, "mallory.x2", "127.0.0.1:1"); err != nil {
		t.Errorf("mallory's own connection: %v", err)
	}
	if got := authCounts(a); got["certificate"] != 1 {
		t.Errorf("refusals %v, want one for the certificate", got)
	}

	_, err = cluster.Start(context.Background(), cluster.Config{Name: "b", TLS: mtls, Logger: logger()})
	if !errors.Is(err, cluster.ErrInvalidConfig) || !strings.Contains(err.Error(), "mallory") {
		t.Errorf("Start of b with mallory's certificate: %v, want ErrInvalidConfig naming the certificate's names", err)
	}
}

// TestInsecureRefusedOffLoopback: without TLS a node on a host that is
// not loopback does not start unless Insecure says so; on loopback it
// warns once.
func TestInsecureRefusedOffLoopback(t *testing.T) {
	_, err := cluster.Start(context.Background(), cluster.Config{Name: "n", Host: "192.0.2.7", Logger: logger()})
	if !errors.Is(err, cluster.ErrInvalidConfig) || !strings.Contains(err.Error(), "Insecure") {
		t.Errorf("Start on 192.0.2.7 without TLS: %v, want ErrInvalidConfig mentioning Insecure", err)
	}
	if testing.Short() {
		return
	}
	c := startChild(t, childConfig{Name: "plain", Cluster: "plain", Replicas: -1})
	c.Send("auth") // after the start: its warnings are printed
	c.Expect(10*time.Second, "AUTH")
	if n := strings.Count(strings.Join(c.SeenLines(), "\n"), "NOTLS"); n != 1 {
		t.Errorf("%d warnings about running without TLS, want 1", n)
	}
}

// TestForgedByAMember: a member (m, with its own valid certificate) sends,
// over its authenticated connections, messages that name another node or
// answer nothing it was asked: pongs in b's name and answering no ping,
// an append in the coordinator's name, append answers in b's name, to no
// append sent and stale without a newer epoch, a claim in b's name and
// one of a log m holds no copy of, a deployment for the coordinator's
// job, a failure notice and stats of b's instances. Each is refused and
// counted, the first of a reason logged as a warning; the job a
// coordinates finishes exactly, without a restart.
func TestForgedByAMember(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	ca := newCA(t, "cluster CA")
	cl := "insider-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	node := func(name string, peers ...string) childConfig {
		caf, cert, key := ca.issue(t, name, nil)
		return childConfig{Name: name, Cluster: cl, Peers: peers, CA: caf, Cert: cert, Key: key, Store: storeIn(t, name),
			FailureTimeout: procFailureTimeout, Replicas: -1, PrivateStatus: true}
	}
	a := startChild(t, node("a"))
	b := startChild(t, node("b", a.Address))
	m := startChild(t, node("m", a.Address))
	a.AwaitAll(10*time.Second, "EVENT joined b", "EVENT joined m")
	b.AwaitAll(10*time.Second, "EVENT joined m")
	m.AwaitAll(10*time.Second, "EVENT joined b")
	base := map[*child]map[string]int{a: authCounts(a), b: authCounts(b)}
	want := wantCounts(jobRecords)
	a.Send(fmt.Sprintf("run counting %d %s", jobRecords, t.TempDir()))
	a.Until(30*time.Second, "the job's placement", func(lines []string) bool {
		return slicesContainsPrefix(lines, "CHECKPOINT") || slicesContainsPrefix(lines, "JOBERROR")
	})
	const log = "checkpoints/counting"
	leader, jobActor := "sluice-leader/"+log, "job-counting-1"
	rows := []struct {
		name, reason string
		at           *child
		to, actor    string
		typ, body    string
	}{
		{"pong in b's name", "named-sender", a, a.Address, "sluice-membership", "sluice.cluster.pong",
			fmt.Sprintf(`{"Cluster":%q,"Name":"b","ID":%q,"Addr":%q,"Excluded":true,"Members":9,"To":%q,"Nonce":1}`, cl, b.ID, b.Address, a.ID)},
		{"pong answering no ping", "pong", a, a.Address, "sluice-membership", "sluice.cluster.pong",
			fmt.Sprintf(`{"Cluster":%q,"Name":"m","ID":%q,"Addr":%q,"Excluded":true,"Members":9,"To":%q,"Nonce":12345}`, cl, m.ID, m.Address, a.ID)},
		{"append in a's name", "named-sender", b, b.Address, "sluice-replica", "sluice.cluster.appendRequest",
			fmt.Sprintf(`{"Log":%q,"Leader":"a","Epoch":1099511627776,"Seq":1,"Commit":1}`, log)},
		{"stale answer in b's name", "named-sender", a, a.Address, leader, "sluice.cluster.appendResponse",
			fmt.Sprintf(`{"Log":%q,"Replica":"b","Result":2,"Epoch":1099511627776,"Seq":1}`, log)},
		{"stale answer without a newer epoch", "append-answer", a, a.Address, leader, "sluice.cluster.appendResponse",
			fmt.Sprintf(`{"Log":%q,"Replica":"m","Result":2,"Epoch":1,"Seq":1}`, log)},
		{"ack of no append sent", "append-answer", a, a.Address, leader, "sluice.cluster.appendResponse",
			fmt.Sprintf(`{"Log":%q,"Replica":"m","Result":0,"Epoch":1,"Seq":1000000000,"Match":3}`, log)},
		{"claim in b's name", "named-sender", b, b.Address, "sluice-replica", "sluice.cluster.claimRequest",
			fmt.Sprintf(`{"Log":%q,"Epoch":1099511627776,"Candidate":"b","LastIndex":1099511627776,"LastEpoch":1099511627776}`, log)},
		{"claim of a log it holds no copy of", "claim", b, b.Address, "sluice-replica", "sluice.cluster.claimRequest",
			`{"Log":"checkpoints/elsewhere","Epoch":7,"Candidate":"m","LastIndex":1,"LastEpoch":1}`},
		{"deployment for a's job", "named-sender", b, b.Address, "sluice-jobs", "sluice.op.deploy",
			fmt.Sprintf(`{"Job":"counting","JobAddress":%q,"JobID":%q,"Gen":7,"Placement":[%q]}`, a.Address, jobActor, b.Address)},
		{"failure of b's instance", "named-sender", a, a.Address, jobActor, "sluice.op.failed",
			fmt.Sprintf(`{"Gen":0,"Address":%q,"ID":"x","Operator":"count","Message":"forged"}`, b.Address)},
		{"stats of b's instances", "named-sender", a, a.Address, jobActor, "sluice.op.stats",
			fmt.Sprintf(`{"Gen":0,"Address":%q,"Final":true}`, b.Address)},
	}
	expected := map[*child]map[string]int{a: {}, b: {}}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before, _ := refusedLines(row.at.SeenLines(), row.reason)
			for range 2 {
				m.Send(strings.Join([]string{"forge", row.to, row.actor, row.typ, row.body}, " "))
				if f := m.AwaitLine(10*time.Second, "the forgery sent", func(f []string) bool { return f[0] == "FORGED" || f[0] == "ERROR" }); f[0] != "FORGED" {
					t.Fatalf("m: %v", f)
				}
			}
			row.at.Until(10*time.Second, "two refusals of "+row.reason, func(lines []string) bool {
				n, _ := refusedLines(lines, row.reason)
				return n >= before+2
			})
			expected[row.at][row.reason] += 2
		})
	}
	a.Until(2*time.Minute, "the job's end", func(lines []string) bool {
		return slicesContainsPrefix(lines, "RESULT") || slicesContainsPrefix(lines, "JOBERROR")
	})
	for _, l := range a.SeenLines() {
		f := strings.Fields(l)
		switch {
		case len(f) > 0 && f[0] == "JOBERROR":
			t.Fatalf("the job failed: %s", l)
		case len(f) == 3 && f[0] == "RESTARTS" && f[1] != "0":
			t.Errorf("the job restarted: %s", l)
		case len(f) > 0 && f[0] == "RESULT" && (len(f) != 2 || f[1] != want):
			t.Errorf("result %v, want the plain loop's %s", f, want)
		}
	}
	for _, n := range []*child{a, b} {
		got := authCounts(n)
		for reason, k := range expected[n] {
			if d := got[reason] - base[n][reason]; d != k {
				t.Errorf("%s refused %d for %s, want %d", n.Cfg.Name, d, reason, k)
			}
			if _, warn := refusedLines(n.SeenLines(), reason); warn != 1 {
				t.Errorf("%s logged %d warnings for %s, want 1", n.Cfg.Name, warn, reason)
			}
		}
		for _, l := range n.SeenLines() {
			if strings.HasPrefix(l, "EVENT excluded") || strings.HasPrefix(l, "EVENT left") {
				t.Errorf("%s: %s", n.Cfg.Name, l)
			}
		}
		t.Logf("%s refused %v", n.Cfg.Name, got)
	}
}

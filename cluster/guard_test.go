package cluster_test

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestHostileRemoteMessages speaks protoactor's wire protocol to the node
// with a raw gRPC client and sends what would crash an unguarded
// protoactor node (a type name the binary does not know, envelopes that
// point outside their batch), and what the codec must refuse (an
// unregistered type URL, bytes that do not decode, a protobuf type other
// than protoactor's own). The node survives, counts each, and delivers
// the good message sent last on the same connection.
func TestHostileRemoteMessages(t *testing.T) {
	p := parent(t)
	got := make(chan any, 10)
	guarded := fresh("guarded") // the parent node outlives the test (-count)
	if _, err := p.Spawn(guarded, actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case actor.SystemMessage, actor.AutoReceiveMessage:
		default:
			got <- m
		}
	})); err != nil {
		t.Fatal(err)
	}
	before := p.Stats().Codec

	conn, err := grpc.NewClient(p.Address(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := remote.NewRemotingClient(conn).Receive(timeout(t))
	if err != nil {
		t.Fatal(err)
	}
	err = stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
		ConnectionType: &remote.ConnectRequest_ServerConnection{ServerConnection: &remote.ServerConnection{SystemId: "mallory", Address: "127.0.0.1:1"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	target := &actor.PID{Address: p.Address(), Id: guarded}
	send := func(typeName string, msg proto.Message, edit func(*remote.MessageEnvelope)) {
		t.Helper()
		data, err := proto.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		env := &remote.MessageEnvelope{TypeId: 0, MessageData: data, Target: 0}
		if edit != nil {
			edit(env)
		}
		err = stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: &remote.MessageBatch{
			TypeNames: []string{typeName}, Targets: []*actor.PID{target}, Envelopes: []*remote.MessageEnvelope{env}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	anyOf := func(url string, v any) *anypb.Any {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return &anypb.Any{TypeUrl: url, Value: b}
	}
	// Foreign: refused at the connection.
	send("evil.Unknown", wrapperspb.String("x"), nil)                                                           // unknown to the binary: protoactor would panic
	send("google.protobuf.StringValue", wrapperspb.String("x"), nil)                                            // known, but not accepted
	send("google.protobuf.Any", wrapperspb.String("x"), func(e *remote.MessageEnvelope) { e.TypeId = 3 })       // no such type
	send("google.protobuf.Any", wrapperspb.String("x"), func(e *remote.MessageEnvelope) { e.Target = 9 })       // no such target
	send("google.protobuf.Any", wrapperspb.String("x"), func(e *remote.MessageEnvelope) { e.Sender = 4 })       // no such sender
	send("google.protobuf.Any", wrapperspb.String("x"), func(e *remote.MessageEnvelope) { e.SerializerId = 1 }) // JSON
	// Refused by the codec at the actor.
	send("google.protobuf.Any", anyOf("sluice.msgpack/test.Nope", Greet{}), nil)
	send("google.protobuf.Any", &anypb.Any{TypeUrl: "sluice.msgpack/test.Greet", Value: []byte{0xdd, 0xff, 0xff, 0xff, 0xff}}, nil)
	send("google.protobuf.Any", &anypb.Any{TypeUrl: "type.googleapis.com/google.protobuf.StringValue"}, nil)
	// And then a good one.
	send("google.protobuf.Any", anyOf("sluice.msgpack/test.Greet", Greet{Name: "ok", Seq: 1}), nil)

	select {
	case m := <-got:
		if g, ok := m.(Greet); !ok || g.Name != "ok" {
			t.Fatalf("the actor received %#v, want only the good Greet", m)
		}
	case <-timeout(t).Done():
		t.Fatal("the good message never arrived")
	}
	after := p.Stats().Codec
	if d := after.Foreign - before.Foreign; d != 6 {
		t.Errorf("foreign: %d, want 6", d)
	}
	if d := after.Unknown - before.Unknown; d != 2 {
		t.Errorf("unknown: %d, want 2", d)
	}
	if d := after.Undecodable - before.Undecodable; d != 1 {
		t.Errorf("undecodable: %d, want 1", d)
	}
}

// TestListensOnLoopbackOnly: every socket the process listens on (this
// one, with its node) and a child's are bound to 127.0.0.1, read from
// /proc/net/tcp{,6} and each process's file descriptors.
func TestListensOnLoopbackOnly(t *testing.T) {
	if _, err := os.Stat("/proc/self/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp")
	}
	p := parent(t)
	c := startChild(t, childConfig{Name: "l", Cluster: "listen", Replicas: -1})
	for _, proc := range []struct {
		name string
		pid  int
		addr string
	}{{"this process", os.Getpid(), p.Address()}, {"the child", c.Pid(), c.Address}} {
		addrs := listening(t, proc.pid)
		found := false
		for _, a := range addrs {
			if !strings.HasPrefix(a, "127.0.0.1:") {
				t.Errorf("%s listens on %s", proc.name, a)
			}
			found = found || a == proc.addr
		}
		if !found {
			t.Errorf("%s's node address %s is not among its listening sockets %v", proc.name, proc.addr, addrs)
		}
		t.Logf("%s listens on %v", proc.name, addrs)
	}
}

// listening returns the addresses of the listening TCP sockets of process pid.
func listening(t *testing.T, pid int) []string {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] { // 0A: LISTEN
				continue
			}
			out = append(out, hexAddr(t, fields[1]))
		}
		f.Close()
	}
	return out
}

// hexAddr decodes /proc/net/tcp's "0100007F:1F90" (IPv4 or IPv6 in host
// byte order, 4 bytes at a time) into "127.0.0.1:8080".
func hexAddr(t *testing.T, s string) string {
	ipHex, portHex, _ := strings.Cut(s, ":")
	port, _ := strconv.ParseUint(portHex, 16, 16)
	var ip []byte
	for i := 0; i+8 <= len(ipHex); i += 8 {
		w, err := strconv.ParseUint(ipHex[i:i+8], 16, 32)
		if err != nil {
			t.Fatal(err)
		}
		ip = append(ip, byte(w), byte(w>>8), byte(w>>16), byte(w>>24))
	}
	if len(ip) == 16 && strings.HasPrefix(ipHex, "0000000000000000FFFF0000") {
		ip = ip[12:] // IPv4-mapped
	}
	if len(ip) == 4 {
		return fmt.Sprintf("%d.%d.%d.%d:%d", ip[0], ip[1], ip[2], ip[3], port)
	}
	return fmt.Sprintf("[%x]:%d", ip, port)
}

var _ = time.Second

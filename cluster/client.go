package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// Host is the loopback or other address the client listens on for
	// replies. Default DefaultHost.
	Host string
	// TLS is the client's certificate and CAs when the cluster uses TLS.
	TLS *tls.Config
	// Logger receives protoactor's logs. Default: discarded.
	Logger *slog.Logger
	// Name is the name the client gives the nodes: with TLS, one of its
	// certificate's DNS SANs (default the first); the nodes answer a
	// status request of a client only when their Config.StatusClients
	// name it (or "*"). Default "client" without TLS.
	Name string
}

// Client talks to nodes without joining a cluster: a remote endpoint of
// its own (it listens on ClientOptions.Host for the replies) with the
// codec, for tools such as `sluice node status`. Use it from a process
// that runs no node: protoactor's remote sets gRPC's global logger on
// every start. Close it when done.
type Client struct {
	n *Node
	r *remote.Remote
}

// Dial starts a Client.
func Dial(o ClientOptions) (c *Client, err error) {
	if o.Host == "" {
		o.Host = DefaultHost
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	as := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return o.Logger }))
	n := &Node{cfg: Config{Name: "client", RequestTimeout: DefaultRequestTimeout}, as: as, log: o.Logger}
	if n.codec, err = newCodec(nil, o.Logger, n.isLocal); err != nil {
		return nil, err
	}
	n.refusals.log = o.Logger
	// The nodes it asks check that its member id carries a name of its
	// certificate.
	name := o.Name
	if name == "" {
		name = "client"
		if leaf, err := ownCertificate(o.TLS); err == nil && leaf != nil && len(certNames(leaf)) > 0 {
			name = certNames(leaf)[0]
		}
	}
	as.ID = name + "." + as.ID
	n.guard = &guard{c: n.codec, ref: &n.refusals}
	n.root = actor.NewRootContext(as, nil, n.codec.senderMiddleware)
	serverCreds, clientCreds, err := transportCredentials(o.TLS)
	if err != nil {
		return nil, fmt.Errorf("cluster: client: %w", err)
	}
	wc := newGRPCCodec() // the streams' buffers, not cleared (grpccodec.go)
	serverOpts := []grpc.ServerOption{grpc.StreamInterceptor(n.guard.interceptor), grpc.MaxRecvMsgSize(DefaultMaxMessageSize), wc.serverOption()}
	dialOpts := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(DefaultMaxMessageSize))}
	if serverCreds != nil {
		serverOpts = append(serverOpts, grpc.Creds(serverCreds))
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(clientCreds))
	} else {
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(insecureCreds()))
	}
	rc := remote.Configure(o.Host, 0, remote.WithServerOptions(serverOpts...), remote.WithDialOptions(dialOpts...),
		remote.WithCallOptions(wc.callOption()))
	rc.MaxRetryCount = 1
	r := remote.NewRemote(as, rc)
	if err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("%v", p)
			}
		}()
		r.Start()
		return nil
	}(); err != nil {
		as.Shutdown()
		return nil, fmt.Errorf("cluster: client: %w", err)
	}
	return &Client{n: n, r: r}, nil
}

// Status asks the node listening at address for its Stats.
func (c *Client) Status(ctx context.Context, address string) (Stats, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultRequestTimeout)
		defer cancel()
	}
	return c.n.Status(ctx, address)
}

// Close stops the client.
func (c *Client) Close() {
	c.n.guard.closing.Store(true)
	stopRemote(c.n.as, c.r, c.n.guard)
	c.n.as.Shutdown()
}

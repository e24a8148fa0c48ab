package jetstream

import (
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// servers describes a NATS URL (one or several, comma-separated) for error
// messages: schemes, hosts and ports, never user names, passwords or
// tokens.
func servers(u string) string {
	if u == "" {
		u = nats.DefaultURL
	}
	var hosts []string
	for _, part := range strings.Split(u, ",") {
		part = strings.TrimSpace(part)
		p, err := url.Parse(part)
		if err != nil || p.Host == "" {
			// Not a URL we can take apart: show only what follows the
			// last '@', which holds no credentials.
			if i := strings.LastIndex(part, "@"); i >= 0 {
				part = part[i+1:]
			}
			hosts = append(hosts, part)
			continue
		}
		hosts = append(hosts, p.Scheme+"://"+p.Host)
	}
	return strings.Join(hosts, ",")
}

// connect opens a connection to the servers of u, with the caller's options
// after sluice's defaults (so that they win).
func connect(u, name string, opts []nats.Option) (*nats.Conn, error) {
	if u == "" {
		u = nats.DefaultURL
	}
	all := append([]nats.Option{
		nats.Name(name),
		nats.Timeout(5 * time.Second),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
	}, opts...)
	return nats.Connect(u, all...)
}

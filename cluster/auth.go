package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/dist"
)

// Authentication and authorization of peers.
//
// With Config.TLS, a peer's name is bound to its certificate: every
// inbound connection starts with protoactor's connect request, which names
// the dialling node's member id ("name.random"); the name must be a DNS
// SAN of the certificate the connection was verified with, or the
// connection is refused. The connect request also names the address the
// peer listens on: every envelope of the connection must come from an
// actor at that address, and every message that names its sender (a ping's
// address, a pong's name, an append's leader, an answer's replica, a
// claim's candidate, a deployment's coordinator, a failure's instance)
// must name the connection's peer. Most of the cluster's own messages are
// accepted from members only (the triple name, member id and address of a
// live member); pings and pongs, through which a node joins, from anyone,
// and a pong only when it answers a ping this node sent. protoactor's
// system messages are refused, except Watch, Unwatch and Terminated (of
// actors at the peer's address) and DeadLetterResponse.
//
// Without TLS nothing is authenticated: the names and addresses a peer
// gives are taken as they come, and the checks only stop messages that
// contradict them. Config.Insecure says so explicitly for a node on a
// non-loopback host.

// fromHeader is the header the guard sets on every envelope from another
// node: the address of the connection's peer (any header of that name the
// peer sent is replaced). Node.Request accepts a reply only from the node
// it asked.
const fromHeader = dist.FromHeader

// refusal is why a message or a connection was refused.
type refusal uint8

const (
	refusedCertificate refusal = iota // the member id's name is not in the peer's certificate
	refusedConnection                 // no connect request before messages, or a second identity
	refusedSender                     // the envelope's sender is not at the peer's address
	refusedSystem                     // a protoactor system message that may not come from the network
	refusedNotMember                  // a cluster message from a peer that is not a member
	refusedNamed                      // the message names a sender other than the peer
	refusedStatus                     // a status request from a non-member
	refusedPong                       // a pong that answers no ping of this node
	refusedReply                      // a reply from another node than the one asked
	refusedAppend                     // an append answer that answers no append of this epoch
	refusedClaim                      // a claim or vote from a node that holds no copy of the log
	refusedPeers                      // a peer beyond the membership's cap
	refusedMalformed                  // a cluster message whose sender fields do not decode
	refusedInstance                   // a job's message speaking for an instance its sender does not host
	refusalCount
)

var refusalNames = [refusalCount]string{
	"certificate", "connection", "sender", "system-message", "not-member", "named-sender",
	"status", "pong", "reply", "append-answer", "claim", "peer-cap", "malformed", "instance",
}

func (r refusal) String() string {
	if r < refusalCount {
		return refusalNames[r]
	}
	return fmt.Sprintf("refusal(%d)", uint8(r))
}

// AuthStats counts what a node refused from other nodes.
type AuthStats struct {
	// Refused is the total.
	Refused uint64
	// ByReason counts them by reason: certificate (a member id whose name
	// the peer's certificate does not carry), connection, sender (an
	// envelope from an actor at another address than the peer's),
	// system-message (protoactor's Stop, PoisonPill, ...), not-member,
	// named-sender (a message naming another sender than the peer), status
	// (from a non-member), pong (answering no ping of this node), reply
	// (from another node than the one asked), append-answer (answering no
	// append of the leader's epoch), claim (from a node holding no copy of
	// the log), peer-cap, malformed, instance (a distributed job's message
	// speaking for an instance, a channel or the job actor that the member
	// it came from does not host). Reasons with no refusal are left out.
	ByReason map[string]uint64
}

// refusals counts refusals and logs the first of each reason at Warn, the
// next ones at Debug, and a Warn with the count again at most once a
// minute.
type refusals struct {
	log    *slog.Logger
	counts [refusalCount]atomic.Uint64
	mu     sync.Mutex
	warned [refusalCount]time.Time
	quiet  [refusalCount]uint64 // refused since the last Warn
}

// refuse counts one refusal and logs it.
func (r *refusals) refuse(why refusal, msg string, args ...any) {
	n := r.counts[why].Add(1)
	if r.log == nil {
		return
	}
	now := time.Now()
	r.mu.Lock()
	warn := r.warned[why].IsZero() || now.Sub(r.warned[why]) >= time.Minute
	quiet := r.quiet[why]
	if warn {
		r.warned[why], r.quiet[why] = now, 0
	} else {
		r.quiet[why]++
	}
	r.mu.Unlock()
	args = append(args, "reason", why.String(), "refused", n)
	if warn {
		if quiet > 0 {
			args = append(args, "not logged since the last warning", quiet)
		}
		r.log.Warn("cluster: refused: "+msg, args...)
		return
	}
	r.log.Debug("cluster: refused: "+msg, args...)
}

func (r *refusals) stats() AuthStats {
	var st AuthStats
	for i := range r.counts {
		if n := r.counts[i].Load(); n > 0 {
			if st.ByReason == nil {
				st.ByReason = map[string]uint64{}
			}
			st.ByReason[refusal(i).String()] = n
			st.Refused += n
		}
	}
	return st
}

// nameOfID returns the node name a member id carries ("name.random").
func nameOfID(id string) string {
	if i := strings.LastIndexByte(id, '.'); i > 0 {
		return id[:i]
	}
	return id
}

// certNames returns the names a certificate vouches for: its DNS SANs.
func certNames(c *x509.Certificate) []string {
	if c == nil {
		return nil
	}
	return c.DNSNames
}

// ownCertificate returns the leaf of the node's own certificate, when it
// is given as Certificates[0].
func ownCertificate(cfg *tls.Config) (*x509.Certificate, error) {
	if cfg == nil || len(cfg.Certificates) == 0 || len(cfg.Certificates[0].Certificate) == 0 {
		return nil, nil
	}
	if leaf := cfg.Certificates[0].Leaf; leaf != nil {
		return leaf, nil
	}
	return x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
}

// checkOwnCertificate refuses a certificate that does not name the node:
// the others would refuse its connections.
func checkOwnCertificate(cfg *tls.Config, name string) error {
	leaf, err := ownCertificate(cfg)
	if err != nil {
		return fmt.Errorf("TLS: parse the node's certificate: %w", err)
	}
	if leaf != nil && !slices.Contains(certNames(leaf), name) {
		return fmt.Errorf("TLS: the node's certificate names %v, not the node %q (its name must be a DNS SAN: peers refuse it otherwise)", certNames(leaf), name)
	}
	return nil
}

// isLoopbackHost says whether host is a loopback address or "localhost".
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

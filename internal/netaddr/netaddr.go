// Package netaddr holds the address rules sluice's HTTP servers (the admin
// API, the dashboard and the metrics endpoint) share: what a listen
// address a user wrote means, and the host name a request's Host header
// names. Each server keeps its own policy of which hosts it answers to;
// the parsing is here once.
//
//	listen, loopback, err := netaddr.Listen("8080") // "127.0.0.1:8080", true
//	host := netaddr.Host("[::1]:8080")               // "::1"
package netaddr

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ErrAddress is wrapped by Listen's error for an address it cannot read.
var ErrAddress = errors.New("bad listen address")

// Listen resolves a listen address as a user wrote it: a port alone
// ("8080" or ":8080") means loopback, 127.0.0.1:PORT, never every
// interface; a host written out is kept as written. Loopback reports
// whether the result is reachable from this machine only (localhost or a
// loopback IP).
func Listen(addr string) (listen string, loopback bool, err error) {
	if _, perr := strconv.Atoi(addr); perr == nil {
		addr = ":" + addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", false, fmt.Errorf("%w %q: want HOST:PORT or PORT", ErrAddress, addr)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	loopback = host == "localhost"
	if ip := net.ParseIP(host); ip != nil {
		loopback = ip.IsLoopback()
	}
	return net.JoinHostPort(host, port), loopback, nil
}

// Host is the host a Host header (or an URL's host) names, without the
// port, IPv6 brackets or a trailing dot, in lower case; "" when there is
// none.
func Host(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	return strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
}

// Loopback says whether host (as Host returns it) is localhost or a
// loopback IP.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Package servicetest finds the NATS and PostgreSQL servers that the
// connectors' tests run against, and decides what a test does when one is
// down: it skips with a message that says how to start it, unless the
// environment variable SLUICE_REQUIRE_SERVICES is 1 (CI sets it), in which
// case it fails.
//
// The servers are found at nats://127.0.0.1:4222 and
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable, or where
// SLUICE_NATS_URL and SLUICE_PG_DSN say. .ci/services starts both.
package servicetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Defaults, overridden by SLUICE_NATS_URL and SLUICE_PG_DSN.
const (
	DefaultNATSURL = "nats://127.0.0.1:4222"
	DefaultPGDSN   = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
)

// NATSURL is the URL of the NATS server with JetStream that tests use.
func NATSURL() string {
	if u := os.Getenv("SLUICE_NATS_URL"); u != "" {
		return u
	}
	return DefaultNATSURL
}

// PGDSN is the DSN of the PostgreSQL database that tests use.
func PGDSN() string {
	if d := os.Getenv("SLUICE_PG_DSN"); d != "" {
		return d
	}
	return DefaultPGDSN
}

// Required says whether a missing server fails the test rather than
// skipping it.
func Required() bool { return os.Getenv("SLUICE_REQUIRE_SERVICES") == "1" }

func unavailable(tb testing.TB, what string, err error) {
	tb.Helper()
	msg := what + " is unreachable (" + err.Error() + "); start it with .ci/services"
	if Required() {
		tb.Fatal(msg + " (SLUICE_REQUIRE_SERVICES=1: failing instead of skipping)")
	}
	tb.Skip(msg)
}

// NATS returns the NATS URL, or skips (fails under SLUICE_REQUIRE_SERVICES=1)
// when nothing listens there.
func NATS(tb testing.TB) string {
	tb.Helper()
	u := NATSURL()
	host := "127.0.0.1:4222"
	if p, err := url.Parse(u); err == nil && p.Host != "" {
		host = p.Host
	}
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		unavailable(tb, "NATS at "+host, err)
		return ""
	}
	c.Close()
	return u
}

// PG returns the PostgreSQL DSN, or skips (fails under
// SLUICE_REQUIRE_SERVICES=1) when the database does not answer.
func PG(tb testing.TB) string {
	tb.Helper()
	dsn := PGDSN()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		unavailable(tb, "PostgreSQL", err)
		return ""
	}
	conn.Close(ctx)
	return dsn
}

// Suffix returns a random suffix of 12 lower-case hex digits for the names
// of streams, subjects and tables that belong to one test.
func Suffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

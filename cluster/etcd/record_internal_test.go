package etcd

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

const testPrefix = "/sluice/c/members/"

// FuzzDecodeRecord: any bytes under any key in etcd give a registration
// that names the key's member id, a valid host and port, or an error that
// names the key; never a panic.
func FuzzDecodeRecord(f *testing.F) {
	good, _ := msgpack.Marshal(memberRecord{ID: "a.x1", Host: "127.0.0.1", Port: 7001})
	f.Add(testPrefix+"a.x1", good)
	f.Add(testPrefix+"b.x1", good)
	f.Add(testPrefix+"a.x1", []byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add("/elsewhere/a.x1", good)
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		r, err := decodeRecord(key, value, testPrefix)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(key)) {
				t.Fatalf("the error does not name the key %q: %v", key, err)
			}
			return
		}
		if testPrefix+r.ID != key || r.Port <= 0 || r.Port > 65535 || r.Host == "" {
			t.Fatalf("accepted %+v under %q", r, key)
		}
	})
}

func TestDecodeRecordRefuses(t *testing.T) {
	enc := func(r memberRecord) []byte { b, _ := msgpack.Marshal(r); return b }
	for _, tc := range []struct {
		name, key string
		value     []byte
		want      string
	}{
		{"another id", testPrefix + "a.x1", enc(memberRecord{ID: "b.x1", Host: "127.0.0.1", Port: 1}), `names member "b.x1"`},
		{"no port", testPrefix + "a.x1", enc(memberRecord{ID: "a.x1", Host: "127.0.0.1"}), "port 0"},
		{"bad host", testPrefix + "a.x1", enc(memberRecord{ID: "a.x1", Host: "a b", Port: 1}), `host "a b"`},
		{"not an id", testPrefix + "a", enc(memberRecord{ID: "a", Host: "127.0.0.1", Port: 1}), "not a member id"},
		{"garbage", testPrefix + "a.x1", []byte{0xc1}, "a.x1"},
		{"too long", testPrefix + "a.x1", make([]byte, maxRecord+1), "bytes (at most"},
	} {
		if _, err := decodeRecord(tc.key, tc.value, testPrefix); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	if r, err := decodeRecord(testPrefix+"a.x1", enc(memberRecord{ID: "a.x1", Host: "node-1.example", Port: 7001}), testPrefix); err != nil || r.Port != 7001 {
		t.Errorf("a good registration: %+v, %v", r, err)
	}
}

// The lease is valid until the send time of the last confirmed renewal
// plus the TTL granted; the node fences itself a third of the TTL before.
// A late answer to an early renewal does not extend it.
func TestLeaseState(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	l := leaseState{ttl: 6 * time.Second}
	l.renewed(t0, 6*time.Second)
	if got := l.fenceAt(); !got.Equal(t0.Add(4 * time.Second)) {
		t.Fatalf("fence at %v, want t0+4s", got.Sub(t0))
	}
	if l.due(t0.Add(3999 * time.Millisecond)) {
		t.Fatal("due before the fence time")
	}
	if !l.due(t0.Add(4 * time.Second)) {
		t.Fatal("not due at the fence time")
	}
	l.renewed(t0.Add(time.Second), 6*time.Second)
	l.renewed(t0, 6*time.Second) // a late answer to an earlier renewal
	if got := l.fenceAt(); !got.Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("fence at %v after a renewal sent at t0+1s, want t0+5s", got.Sub(t0))
	}
}

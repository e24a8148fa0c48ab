package supervision

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/internal/store"
)

func letter(job, op string, i int) DeadLetter {
	payload, _ := EncodePayload([]any{i, fmt.Sprintf("rec-%d", i)}) // not a map: its encoding must be stable
	return DeadLetter{
		Job: job, Operator: op, Instance: i % 3, Error: fmt.Sprintf("status 400 for %d", i), Attempts: 1 + i%5,
		Time: time.Date(2025, 3, 1, 12, 0, i, 0, time.UTC), TraceID: fmt.Sprintf("%032x", i), Payload: payload,
	}
}

func sameLetter(a, b DeadLetter) bool {
	return a.Seq == b.Seq && a.Job == b.Job && a.Operator == b.Operator && a.Instance == b.Instance && a.Error == b.Error &&
		a.Attempts == b.Attempts && a.Time.Equal(b.Time) && a.TraceID == b.TraceID && bytes.Equal(a.Payload, b.Payload)
}

// testDeadLetterStore is the conformance suite every DeadLetterStore
// passes. open returns an empty store.
func testDeadLetterStore(t *testing.T, open func(t *testing.T) DeadLetterStore) {
	t.Run("add get list", func(t *testing.T) {
		s := open(t)
		var want []DeadLetter
		for i := range 6 {
			d := letter([]string{"orders", "billing"}[i%2], []string{"post", "enrich", "post"}[i%3], i)
			d.Seq = 999 // ignored
			seq, err := s.Add(d)
			if err != nil {
				t.Fatal(err)
			}
			if seq != uint64(i+1) {
				t.Fatalf("Add %d: seq %d, want %d", i, seq, i+1)
			}
			d.Seq = seq
			want = append(want, d)
		}
		for _, w := range want {
			got, err := s.Get(w.Seq)
			if err != nil || !sameLetter(got, w) {
				t.Fatalf("Get(%d) = %+v, %v; want %+v", w.Seq, got, err, w)
			}
		}
		all, err := s.List(Filter{}, 0)
		if err != nil || len(all) != 6 {
			t.Fatalf("List all: %d, %v", len(all), err)
		}
		for i := range all {
			if !sameLetter(all[i], want[i]) {
				t.Errorf("List[%d] = %+v, want %+v", i, all[i], want[i])
			}
		}
		seqs := func(ds []DeadLetter) (out []uint64) {
			for _, d := range ds {
				out = append(out, d.Seq)
			}
			return out
		}
		cases := []struct {
			f     Filter
			limit int
			want  string
		}{
			{Filter{Job: "orders"}, 0, "[1 3 5]"},
			{Filter{Operator: "post"}, 0, "[1 3 4 6]"},
			{Filter{Job: "orders", Operator: "post"}, 0, "[1 3]"},
			{Filter{Job: "billing", Operator: "enrich"}, 0, "[2]"},
			{Filter{Job: "nope"}, 0, "[]"},
			{Filter{}, 2, "[1 2]"},
			{Filter{Operator: "post"}, 3, "[1 3 4]"},
		}
		for _, c := range cases {
			got, err := s.List(c.f, c.limit)
			if err != nil || fmt.Sprint(seqs(got)) != c.want {
				t.Errorf("List(%+v, %d) = %v, %v; want %s", c.f, c.limit, seqs(got), err, c.want)
			}
		}
		if n, err := s.Len(); n != 6 || err != nil {
			t.Errorf("Len = %d, %v", n, err)
		}
	})
	t.Run("copies", func(t *testing.T) {
		s := open(t)
		d := letter("j", "o", 1)
		seq, _ := s.Add(d)
		d.Payload[0] ^= 0xff // the caller's buffer changes after Add
		got, _ := s.Get(seq)
		got.Payload[1] ^= 0xff // and the returned one is changed
		again, _ := s.Get(seq)
		if !bytes.Equal(again.Payload, letter("j", "o", 1).Payload) {
			t.Error("the store shares payload memory with its callers")
		}
	})
	t.Run("delete purge and sequence", func(t *testing.T) {
		s := open(t)
		for i := range 5 {
			if _, err := s.Add(letter([]string{"a", "b"}[i%2], "op", i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Delete(5); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(5); !errors.Is(err, ErrNotFound) {
			t.Errorf("second Delete(5) = %v, want ErrNotFound", err)
		}
		if _, err := s.Get(5); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "5") {
			t.Errorf("Get(5) after delete = %v, want ErrNotFound naming 5", err)
		}
		// Sequence numbers are never reused.
		if seq, _ := s.Add(letter("a", "op", 9)); seq != 6 {
			t.Errorf("Add after delete: seq %d, want 6", seq)
		}
		n, err := s.Purge(Filter{Job: "a"})
		if n != 3 || err != nil { // 1, 3, 6 (5 is gone)
			t.Errorf("Purge job a = %d, %v; want 3", n, err)
		}
		if l, _ := s.Len(); l != 2 {
			t.Errorf("Len after purge = %d, want 2", l)
		}
		if n, _ := s.Purge(Filter{}); n != 2 {
			t.Errorf("Purge all = %d, want 2", n)
		}
		if seq, _ := s.Add(letter("a", "op", 10)); seq != 7 {
			t.Errorf("Add after purge: seq %d, want 7", seq)
		}
		if _, err := s.Get(0); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(0) = %v", err)
		}
	})
}

func TestMemoryDeadLetters(t *testing.T) {
	testDeadLetterStore(t, func(t *testing.T) DeadLetterStore {
		s, err := NewMemoryDeadLetters(0)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
	s, _ := NewMemoryDeadLetters(2)
	for i := range 2 {
		if _, err := s.Add(letter("j", "o", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Add(letter("j", "o", 3)); !errors.Is(err, ErrFull) {
		t.Errorf("Add beyond capacity: %v, want ErrFull", err)
	}
	if _, err := NewMemoryDeadLetters(-1); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("negative capacity: %v", err)
	}
}

func openBolt(t *testing.T, path string) *BoltDeadLetters {
	t.Helper()
	s, err := OpenDeadLetters(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestBoltDeadLetters(t *testing.T) {
	testDeadLetterStore(t, func(t *testing.T) DeadLetterStore {
		return openBolt(t, filepath.Join(t.TempDir(), "sluice.db"))
	})
}

func TestBoltDeadLettersSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.db")
	s := openBolt(t, path)
	for i := range 3 {
		s.Add(letter("j", "o", i))
	}
	s.Delete(3)
	s.Close()
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("store file mode %v, %v; want 0600", st.Mode(), err)
	}
	s = openBolt(t, path)
	if n, _ := s.Len(); n != 2 {
		t.Errorf("after reopen: %d dead letters, want 2", n)
	}
	if seq, _ := s.Add(letter("j", "o", 4)); seq != 4 {
		t.Errorf("after reopen: next seq %d, want 4 (never reused)", seq)
	}
	got, err := s.Get(2)
	if err != nil || !sameLetter(got, func() DeadLetter { d := letter("j", "o", 1); d.Seq = 2; return d }()) {
		t.Errorf("Get(2) after reopen = %+v, %v", got, err)
	}
}

// corruptStore writes a store with records 1..3 and replaces the value of
// seq 2 with garbage, directly through bbolt.
func corruptStore(t *testing.T, garbage []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.db")
	s := openBolt(t, path)
	for i := range 3 {
		s.Add(letter("j", "o", i))
	}
	if err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(deadLetterBucket).Put(seqKey(2), garbage)
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	return path
}

func TestBoltDeadLettersCorruptRecord(t *testing.T) {
	garbage := map[string][]byte{
		"empty":          {},
		"newer format":   append([]byte{9}, 0x80),
		"not a map":      {1, 0x93, 1, 2, 3},
		"huge array":     {1, 0x81, 0xa1, 'p', 0xdd, 0xff, 0xff, 0xff, 0xff},
		"wrong types":    append([]byte{1}, mustMarshal(t, map[string]any{"job": []int{1}, "inst": "x"})...),
		"truncated":      letterBytes(t)[:20],
		"invalid code":   {1, 0xc1},
		"bad time ext":   append([]byte{1}, 0x81, 0xa4, 't', 'i', 'm', 'e', 0xd6, 0xff, 1),
		"deep nesting":   append([]byte{1}, bytes.Repeat([]byte{0x91}, 5000)...),
		"string as time": append([]byte{1}, mustMarshal(t, map[string]any{"time": "yesterday"})...),
	}
	for name, g := range garbage {
		t.Run(name, func(t *testing.T) {
			path := corruptStore(t, g)
			s := openBolt(t, path)
			_, err := s.Get(2)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "seq 2") {
				t.Fatalf("Get(2) = %v, want ErrCorrupt naming %s and seq 2", err, path)
			}
			// List returns the readable records and names the bad one.
			ds, err := s.List(Filter{}, 0)
			if len(ds) != 2 || ds[0].Seq != 1 || ds[1].Seq != 3 || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "seq 2") {
				t.Fatalf("List = %d records, %v; want 1 and 3 and an error naming seq 2", len(ds), err)
			}
			// A filtered purge cannot match it and says so; an unfiltered
			// one removes it.
			n, err := s.Purge(Filter{Job: "j"})
			if n != 2 || !errors.Is(err, ErrCorrupt) {
				t.Errorf("filtered Purge = %d, %v; want 2 and ErrCorrupt", n, err)
			}
			if n, err := s.Purge(Filter{}); n != 1 || err != nil {
				t.Errorf("Purge all = %d, %v; want the corrupt record removed", n, err)
			}
		})
	}
	// Delete removes a corrupt record without decoding it.
	s := openBolt(t, corruptStore(t, []byte{1, 0xc1}))
	if err := s.Delete(2); err != nil {
		t.Errorf("Delete of a corrupt record: %v", err)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func letterBytes(t *testing.T) []byte {
	b, err := encodeDeadLetter(letter("job", "op", 1))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fileSum(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}

func TestBoltDeadLettersReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.db")
	s := openBolt(t, path)
	s.Add(letter("j", "o", 1))
	s.Close()
	before := fileSum(t, path)

	ro, err := OpenDeadLettersReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	if ds, err := ro.List(Filter{}, 0); err != nil || len(ds) != 1 {
		t.Errorf("read-only List = %v, %v", ds, err)
	}
	if _, err := ro.Add(letter("j", "o", 2)); !errors.Is(err, ErrReadOnly) || !strings.Contains(err.Error(), path) {
		t.Errorf("read-only Add = %v, want ErrReadOnly naming the file", err)
	}
	if _, err := ro.Purge(Filter{}); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only Purge = %v", err)
	}
	if err := ro.Delete(1); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only Delete = %v", err)
	}
	ro.Close()
	if fileSum(t, path) != before {
		t.Error("a read-only open changed the file")
	}

	// A store file without dead letters reads as empty.
	empty := filepath.Join(t.TempDir(), "empty.db")
	f, err := store.Open(empty)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	ro, err = OpenDeadLettersReadOnly(empty)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ro.Len(); n != 0 || err != nil {
		t.Errorf("Len of a store without dead letters = %d, %v", n, err)
	}
	if _, err := ro.Get(1); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get = %v, want ErrNotFound", err)
	}
	ro.Close()
}

func TestOpenDeadLettersReadOnlyRefuses(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	if _, err := OpenDeadLettersReadOnly(missing); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Error("a read-only open created the file")
	}
	garbage := filepath.Join(dir, "garbage.db")
	os.WriteFile(garbage, bytes.Repeat([]byte("not bbolt "), 1000), 0o600)
	if _, err := OpenDeadLettersReadOnly(garbage); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), garbage) {
		t.Errorf("garbage file: %v, want ErrCorrupt naming it", err)
	}
	foreign := filepath.Join(dir, "foreign.db")
	db, err := bolt.Open(foreign, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("theirs")); return err })
	db.Close()
	if _, err := OpenDeadLettersReadOnly(foreign); !errors.Is(err, store.ErrForeign) {
		t.Errorf("foreign file: %v, want ErrForeign", err)
	}
	if _, err := OpenDeadLetters(foreign); !errors.Is(err, store.ErrForeign) {
		t.Errorf("foreign file, read-write: %v, want ErrForeign", err)
	}
	// Truncated: a valid store cut short.
	trunc := filepath.Join(dir, "trunc.db")
	s := openBolt(t, trunc)
	for i := range 200 {
		s.Add(letter("j", "o", i))
	}
	s.Close()
	used, err := store.Used(trunc) // the file runs past its pages
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(trunc, used/2); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDeadLettersReadOnly(trunc); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("truncated file: %v, want ErrCorrupt", err)
	}
}

func TestDecodePayload(t *testing.T) {
	type order struct {
		ID     int
		Items  []string
		Amount float64
		Tags   map[int]string
		Raw    []byte
	}
	p, err := EncodePayload(order{ID: 7, Items: []string{"a", "b"}, Amount: math.NaN(), Tags: map[int]string{1: "x"}, Raw: []byte{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := DeadLetter{Payload: p}.DecodePayload()
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"Amount":"NaN","ID":7,"Items":["a","b"],"Raw":"AQI=","Tags":{"1":"x"}}`; string(js) != want {
		t.Errorf("payload as JSON %s, want %s", js, want)
	}
	if v, err := (DeadLetter{}).DecodePayload(); v != nil || err != nil {
		t.Errorf("empty payload: %v, %v", v, err)
	}
	if _, err := (DeadLetter{Seq: 4, Payload: []byte{0xdd, 0xff, 0xff, 0xff, 0xff}}).DecodePayload(); err == nil || !strings.Contains(err.Error(), "dead letter 4") {
		t.Errorf("damaged payload: %v, want an error naming the dead letter", err)
	}
}

func TestDecodePayloadRefusesText(t *testing.T) {
	// "{ID:1}" starts with 0x7b, a msgpack fixint: without the check for
	// trailing bytes it would decode as 123.
	for _, text := range []string{"{ID:1 Name:x}", "42 is not msgpack"} {
		if v, err := (DeadLetter{Seq: 3, Payload: []byte(text)}).DecodePayload(); err == nil {
			t.Errorf("%q decoded as %v", text, v)
		}
	}
}

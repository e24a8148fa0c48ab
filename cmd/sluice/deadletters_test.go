package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/supervision"
)

type dlOrder struct {
	ID    int
	Items []string
}

// dlStore writes a store file with four dead letters:
//
//	1 orders/post/0   payload {ID:1, Items:[a b]}
//	2 orders/enrich/1 payload {ID:2}
//	3 billing/post/2  payload {ID:3}, a two-line error
//	4 billing/post/0  payload as text (not msgpack)
func dlStore(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.db")
	s, err := supervision.OpenDeadLetters(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2025, 6, 1, 9, 30, 0, 0, time.UTC)
	add := func(job, op string, inst int, errMsg string, payload []byte, i int) {
		t.Helper()
		if _, err := s.Add(supervision.DeadLetter{Job: job, Operator: op, Instance: inst, Error: errMsg, Attempts: i + 1,
			Time: t0.Add(time.Duration(i) * time.Second), TraceID: map[bool]string{true: "4bf92f3577b34da6a3ce929d0e0e4736"}[i == 0], Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	enc := func(v any) []byte {
		b, err := supervision.EncodePayload(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	add("orders", "post", 0, "http sink POST http://x/orders: record orders/post/0/3: status 400 Bad Request", enc(dlOrder{1, []string{"a", "b"}}), 0)
	add("orders", "enrich", 1, "panic: nil map", enc(dlOrder{ID: 2}), 1)
	add("billing", "post", 2, "line one\nline two", enc(dlOrder{ID: 3}), 2)
	add("billing", "post", 0, "unencodable", []byte("{ID:4 Items:[]}"), 3)
	return path
}

func sum(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDeadLettersList(t *testing.T) {
	path := dlStore(t)
	before := sum(t, path)
	out, _, err := execute(t, "deadletters", "list", "--store", path)
	if err != nil {
		t.Fatal(err)
	}
	want := `1  2025-06-01T09:30:00.000Z  orders/post/0    attempts=1  http sink POST http://x/orders: record orders/post/0/3: status 400 Bad Request
2  2025-06-01T09:30:01.000Z  orders/enrich/1  attempts=2  panic: nil map
3  2025-06-01T09:30:02.000Z  billing/post/2   attempts=3  line one line two
4  2025-06-01T09:30:03.000Z  billing/post/0   attempts=4  unencodable
`
	if out != want {
		t.Errorf("list:\n%s\nwant:\n%s", out, want)
	}
	filtered := []struct {
		args []string
		seqs []string
	}{
		{[]string{"--job", "orders"}, []string{"1", "2"}},
		{[]string{"--operator", "post"}, []string{"1", "3", "4"}},
		{[]string{"--job", "billing", "--operator", "post", "--limit", "1"}, []string{"3"}},
		{[]string{"--job", "nobody"}, nil},
	}
	for _, c := range filtered {
		out, _, err := execute(t, append([]string{"deadletters", "list", "--store", path}, c.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 {
				seqs = append(seqs, f[0])
			}
		}
		if strings.Join(seqs, ",") != strings.Join(c.seqs, ",") {
			t.Errorf("list %v: seqs %v, want %v", c.args, seqs, c.seqs)
		}
	}
	if !bytes.Equal(sum(t, path), before) {
		t.Error("list changed the store file")
	}
}

func TestDeadLettersShow(t *testing.T) {
	path := dlStore(t)
	before := sum(t, path)
	out, _, err := execute(t, "deadletters", "show", "--store", path, "1")
	if err != nil {
		t.Fatal(err)
	}
	want := `seq:       1
time:      2025-06-01T09:30:00.000Z
job:       orders
operator:  post
instance:  0
attempts:  1
trace id:  4bf92f3577b34da6a3ce929d0e0e4736
error:     http sink POST http://x/orders: record orders/post/0/3: status 400 Bad Request
payload:   {
             "ID": 1,
             "Items": [
               "a",
               "b"
             ]
           }
`
	if out != want {
		t.Errorf("show 1:\n%s\nwant:\n%s", out, want)
	}
	out, _, err = execute(t, "deadletters", "show", "--store", path, "4")
	if err != nil || !strings.Contains(out, `payload:   (not msgpack) "{ID:4 Items:[]}"`) {
		t.Errorf("show 4 (text payload): %v\n%s", err, out)
	}
	if _, _, err := execute(t, "deadletters", "show", "--store", path, "99"); !errors.Is(err, supervision.ErrNotFound) || !strings.Contains(err.Error(), "seq 99") {
		t.Errorf("show 99: %v, want not found naming seq 99", err)
	}
	if _, _, err := execute(t, "deadletters", "show", "--store", path, "x"); err == nil || !strings.Contains(err.Error(), `"x" is not a sequence number`) {
		t.Errorf("show x: %v", err)
	}
	if !bytes.Equal(sum(t, path), before) {
		t.Error("show changed the store file")
	}
}

func TestDeadLettersReplay(t *testing.T) {
	path := dlStore(t)
	out, _, err := execute(t, "deadletters", "replay", "--store", path, "2")
	if err != nil || out != `{"ID":2,"Items":null}`+"\n" {
		t.Fatalf("replay 2: %v\n%q", err, out)
	}
	out, _, err = execute(t, "deadletters", "replay", "--store", path, "--all", "--job", "orders", "--delete")
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"ID":1,"Items":["a","b"]}` + "\n" + `{"ID":2,"Items":null}` + "\n"; out != want {
		t.Errorf("replay --all --job orders:\n%s\nwant:\n%s", out, want)
	}
	// --delete removed what was written, and only that.
	out, _, _ = execute(t, "deadletters", "list", "--store", path)
	if n := strings.Count(out, "\n"); n != 2 || !strings.HasPrefix(out, "3 ") {
		t.Errorf("after replay --delete, list:\n%s\nwant seqs 3 and 4", out)
	}
	// The text payload cannot be replayed: it is reported and kept, the
	// others are written and deleted, and the command fails.
	out, errOut, err := execute(t, "deadletters", "replay", "--store", path, "--all", "--delete")
	if err == nil || out != `{"ID":3,"Items":null}`+"\n" || !strings.Contains(errOut, "dead letter 4") {
		t.Errorf("replay with a text payload: %v\nstdout %q\nstderr %q", err, out, errOut)
	}
	out, _, _ = execute(t, "deadletters", "list", "--store", path)
	if !strings.HasPrefix(out, "4 ") || strings.Count(out, "\n") != 1 {
		t.Errorf("after replay, list:\n%s\nwant only seq 4", out)
	}
	for _, args := range [][]string{
		{"deadletters", "replay", "--store", path},
		{"deadletters", "replay", "--store", path, "1", "--all"},
		{"deadletters", "replay", "--store", path, "1", "--job", "orders"},
	} {
		if _, _, err := execute(t, args...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

func TestDeadLettersPurge(t *testing.T) {
	path := dlStore(t)
	if _, _, err := execute(t, "deadletters", "purge", "--store", path); err == nil || !strings.Contains(err.Error(), "--all") {
		t.Errorf("purge without a filter or --all: %v", err)
	}
	out, _, err := execute(t, "deadletters", "purge", "--store", path, "--operator", "post", "--job", "billing")
	if err != nil || out != "purged 2 dead letters from "+path+"\n" {
		t.Errorf("purge billing/post: %v, %q", err, out)
	}
	out, _, err = execute(t, "deadletters", "purge", "--store", path, "--all")
	if err != nil || out != "purged 2 dead letters from "+path+"\n" {
		t.Errorf("purge --all: %v, %q", err, out)
	}
	if out, _, _ := execute(t, "deadletters", "list", "--store", path); out != "" {
		t.Errorf("list after purge --all: %q", out)
	}
}

func TestDeadLettersBadStores(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.db")
	for _, args := range [][]string{
		{"deadletters", "list", "--store", missing},
		{"deadletters", "purge", "--store", missing, "--all"},
		{"deadletters", "replay", "--store", missing, "--all", "--delete"},
	} {
		if _, _, err := execute(t, args...); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%v: %v, want not exist", args[1], err)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Error("a command created the missing store file")
	}
	if _, _, err := execute(t, "deadletters", "list"); err == nil || !strings.Contains(err.Error(), `"store"`) {
		t.Errorf("list without --store: %v", err)
	}

	// A corrupt record: list shows the others and fails naming the file
	// and the seq; show of it fails the same way.
	path := dlStore(t)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("deadletters")).Put([]byte{0, 0, 0, 0, 0, 0, 0, 2}, []byte{1, 0xc1, 0xff})
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	out, _, err := execute(t, "deadletters", "list", "--store", path)
	if !errors.Is(err, supervision.ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "seq 2") {
		t.Errorf("list with a corrupt record: %v, want ErrCorrupt naming %s and seq 2", err, path)
	}
	if strings.Count(out, "\n") != 3 {
		t.Errorf("list with a corrupt record printed:\n%s\nwant the 3 others", out)
	}
	if _, _, err := execute(t, "deadletters", "show", "--store", path, "2"); !errors.Is(err, supervision.ErrCorrupt) || !strings.Contains(err.Error(), "seq 2") {
		t.Errorf("show of a corrupt record: %v", err)
	}
	// An unfiltered purge removes it.
	if out, _, err := execute(t, "deadletters", "purge", "--store", path, "--all"); err != nil || !strings.HasPrefix(out, "purged 4 ") {
		t.Errorf("purge --all with a corrupt record: %v, %q", err, out)
	}
}

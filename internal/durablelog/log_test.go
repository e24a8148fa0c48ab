package durablelog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	bolt "go.etcd.io/bbolt"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openDB(t *testing.T, path string) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func readAll(t *testing.T, r *Reader) []string {
	t.Helper()
	var out []string
	buf := make([][]byte, 7)
	for {
		n, err := r.Read(buf)
		for _, b := range buf[:n] {
			out = append(out, string(b))
		}
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return out
		}
	}
}

// Concurrent appends are all durable, each batch in order and contiguous,
// and the log reopened from the file has them all, trimmed where it was
// trimmed, closed once it was closed.
func TestAppendTrimReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.db")
	db := openDB(t, path)
	l, err := Open(db, "in", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const senders, batches = 8, 25
	firsts := make([][]int64, senders)
	var wg sync.WaitGroup
	for s := 0; s < senders; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := 0; b < batches; b++ {
				first, err := l.Append(ctx, [][]byte{[]byte(fmt.Sprintf("%d.%d.a", s, b)), []byte(fmt.Sprintf("%d.%d.b", s, b))})
				if err != nil {
					t.Error(err)
					return
				}
				firsts[s] = append(firsts[s], first)
			}
		}()
	}
	wg.Wait()
	r, err := l.Reader(0)
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, r)
	if len(got) != senders*batches*2 {
		t.Fatalf("%d records, want %d", len(got), senders*batches*2)
	}
	for s := range firsts {
		for b, first := range firsts[s] {
			if got[first] != fmt.Sprintf("%d.%d.a", s, b) || got[first+1] != fmt.Sprintf("%d.%d.b", s, b) {
				t.Fatalf("batch %d.%d at %d: %q %q", s, b, first, got[first], got[first+1])
			}
		}
	}
	if err := l.Trim(100); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reader(99); !errors.Is(err, ErrTrimmed) {
		t.Fatalf("reading a trimmed offset: %v, want ErrTrimmed", err)
	}
	db.Close()

	db = openDB(t, path)
	defer db.Close()
	l, err = Open(db, "in", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st != (Stats{First: 100, Next: 400, Read: 100}) {
		t.Fatalf("reopened: %+v", st)
	}
	r, err = l.Reader(100)
	if err != nil {
		t.Fatal(err)
	}
	if rest := readAll(t, r); len(rest) != 300 || rest[0] != got[100] {
		t.Fatalf("after reopening: %d records from %q", len(rest), rest[0])
	}
	var keys int
	db.View(func(tx *bolt.Tx) error {
		keys = tx.Bucket(rootBucket).Bucket([]byte("in")).Bucket(recBucket).Stats().KeyN
		return nil
	})
	if keys != 150 {
		t.Fatalf("%d keys kept in the file, want 150 after trimming 100 (300 records, one group a batch of 2)", keys)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, [][]byte{[]byte("x")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	l, err = Open(db, "in", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	r, _ = l.Reader(400)
	if n, err := r.Read(make([][]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("closed log reopened: %d, %v; want 0, EOF", n, err)
	}
}

// Capacity bounds the unread records: TryAppend fails with ErrFull, Append
// waits until ctx ends, and goes on once the reader reads.
func TestBackPressure(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "log.db"))
	defer db.Close()
	l, err := Open(db, "in", 3)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.Append(ctx, [][]byte{[]byte("1"), []byte("2"), []byte("3")}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAppend([][]byte{[]byte("4")}); !errors.Is(err, ErrFull) {
		t.Fatalf("TryAppend on a full log: %v, want ErrFull", err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := l.Append(short, [][]byte{[]byte("4")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Append on a full log: %v, want the context's deadline", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.Append(ctx, [][]byte{[]byte("4")})
		done <- err
	}()
	r, err := l.Reader(0)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, r); len(got) != 3 {
		t.Fatalf("read %v", got)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Append did not go on after the reader read")
	}
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, r); len(got) != 1 || got[0] != "4" {
		t.Fatalf("read %v, want [4]", got)
	}
	// Wait ends at the close.
	waited := make(chan error, 1)
	go func() { waited <- r.Wait(ctx) }()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if n, err := r.Read(make([][]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("after close: %d, %v", n, err)
	}
}

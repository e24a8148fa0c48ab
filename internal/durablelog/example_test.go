package durablelog_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/internal/durablelog"
)

func Example() {
	dir, _ := os.MkdirTemp("", "durablelog")
	defer os.RemoveAll(dir)
	db, err := bolt.Open(filepath.Join(dir, "log.db"), 0o600, nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	l, err := durablelog.Open(db, "orders", 100)
	if err != nil {
		panic(err)
	}
	first, _ := l.Append(context.Background(), [][]byte{[]byte("a"), []byte("b"), []byte("c")})
	r, _ := l.Reader(1) // from the second record
	buf := make([][]byte, 10)
	n, _ := r.Read(buf)
	_ = l.Trim(r.Offset()) // nothing reads them again
	fmt.Println(first, n, string(buf[0]), string(buf[1]), l.Stats())
	// Output: 0 2 b c {3 3 3 false}
}

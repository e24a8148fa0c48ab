// Command statebench measures bbolt against pebble (an LSM) on the
// workload of an on-disk keyed-state backend (issue #21): many small
// read-modify-write updates of random keys (a keyed count) written in
// batches, point reads, a range scan per key group, and a consistent
// snapshot at each checkpoint. It is a module of its own, so that pebble
// stays out of sluice's go.mod until a backend is chosen.
//
//	go run . -keys 1000000 -updates 4000000 -checkpoint-every 500000
//
// Keys are a key-group byte (0..127) followed by the key's 8-byte hash, as
// the backend would lay them out so that a key group is one range; values
// are 8-byte counts. Updates hit keys uniformly (every key equally) or
// skewed (-skew: a zipf distribution, hot keys).
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
	bolt "go.etcd.io/bbolt"
)

type result struct {
	Store          string  `json:"store"`
	Keys           int     `json:"keys"`
	Updates        int     `json:"updates"`
	Batch          int     `json:"batch"`
	LoadPerSec     float64 `json:"load_writes_per_s"` // blind batched writes of every key once (a cache flushing dirty keys)
	UpdatesPerSec  float64 `json:"rmw_updates_per_s"` // read-modify-write (a cache miss, then the write)
	Checkpoints    int     `json:"checkpoints"`
	CheckpointMs   float64 `json:"checkpoint_ms_mean"`
	CheckpointMB   float64 `json:"checkpoint_mb_new_mean"` // bytes a checkpoint adds: bbolt's copy, pebble's new sstables and small files
	ReadsPerSec    float64 `json:"point_reads_per_s"`
	ScanKeysPerSec float64 `json:"scan_keys_per_s"`
	DiskMB         float64 `json:"disk_mb"`
}

// store is what the workload needs of a key-value store.
type store interface {
	// apply does the read-modify-write of one batch: each key's count + 1.
	apply(keys [][]byte) error
	// load writes the keys with count 1, without reading.
	load(keys [][]byte) error
	get(k []byte) (uint64, bool, error)
	scan(kg byte, fn func(k, v []byte)) error
	// checkpoint makes a consistent copy in dir and returns the bytes it
	// wrote there (hard links count zero).
	checkpoint(dir string) (int64, error)
	close() error
}

func main() {
	keys := flag.Int("keys", 1_000_000, "distinct keys")
	updates := flag.Int("updates", 4_000_000, "updates (read-modify-write of one key)")
	batch := flag.Int("batch", 10_000, "updates per write batch")
	every := flag.Int("checkpoint-every", 500_000, "updates between checkpoints")
	skew := flag.Bool("skew", false, "zipf-distributed keys instead of uniform")
	only := flag.String("store", "", "bbolt or pebble (default both)")
	dir := flag.String("dir", "", "working directory (default a temporary one)")
	flag.Parse()
	base := *dir
	if base == "" {
		d, err := os.MkdirTemp("", "statebench")
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(d)
		base = d
	}
	for _, name := range []string{"bbolt", "pebble"} {
		if *only != "" && *only != name {
			continue
		}
		r, err := run(name, filepath.Join(base, name), *keys, *updates, *batch, *every, *skew)
		if err != nil {
			fail(fmt.Errorf("%s: %w", name, err))
		}
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "statebench:", err)
	os.Exit(1)
}

func key(i uint64) []byte {
	h := i*0x9e3779b97f4a7c15 ^ (i >> 29)
	k := make([]byte, 9)
	k[0] = byte(h % 128)
	binary.BigEndian.PutUint64(k[1:], h)
	return k
}

func run(name, dir string, nkeys, updates, batch, every int, skew bool) (result, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return result{}, err
	}
	var s store
	var err error
	switch name {
	case "bbolt":
		s, err = openBolt(filepath.Join(dir, "state.db"))
	case "pebble":
		s, err = openPebble(filepath.Join(dir, "state"))
	}
	if err != nil {
		return result{}, err
	}
	defer s.close()
	rng := rand.New(rand.NewPCG(1, 2))
	var z *rand.Zipf
	if skew {
		z = rand.NewZipf(rng, 1.1, 1, uint64(nkeys-1))
	}
	pick := func() uint64 {
		if z != nil {
			return z.Uint64()
		}
		return rng.Uint64N(uint64(nkeys))
	}
	r := result{Store: name, Keys: nkeys, Updates: updates, Batch: batch}
	t0 := time.Now()
	ks := make([][]byte, 0, batch)
	for i := 0; i < nkeys; {
		ks = ks[:0]
		for ; i < nkeys && len(ks) < batch; i++ {
			ks = append(ks, key(uint64(i)))
		}
		if err := s.load(ks); err != nil {
			return r, err
		}
	}
	r.LoadPerSec = float64(nkeys) / time.Since(t0).Seconds()
	var cpTime time.Duration
	var cpBytes int64
	start := time.Now()
	for done := 0; done < updates; {
		ks = ks[:0]
		for range min(batch, updates-done) {
			ks = append(ks, key(pick()))
		}
		if err := s.apply(ks); err != nil {
			return r, err
		}
		prev := done / every
		done += len(ks)
		if done/every != prev {
			t0 := time.Now()
			n, err := s.checkpoint(filepath.Join(dir, fmt.Sprintf("cp-%d", r.Checkpoints)))
			if err != nil {
				return r, err
			}
			cpTime += time.Since(t0)
			cpBytes += n
			r.Checkpoints++
		}
	}
	r.UpdatesPerSec = float64(updates) / time.Since(start).Seconds()
	if r.Checkpoints > 0 {
		r.CheckpointMs = float64(cpTime.Microseconds()) / 1000 / float64(r.Checkpoints)
		r.CheckpointMB = float64(cpBytes) / float64(r.Checkpoints) / (1 << 20)
	}
	const reads = 200_000
	t0 = time.Now()
	for range reads {
		if _, _, err := s.get(key(pick())); err != nil {
			return r, err
		}
	}
	r.ReadsPerSec = reads / time.Since(t0).Seconds()
	t0 = time.Now()
	scanned := 0
	for kg := range 8 {
		if err := s.scan(byte(kg), func(_, _ []byte) { scanned++ }); err != nil {
			return r, err
		}
	}
	r.ScanKeysPerSec = float64(scanned) / time.Since(t0).Seconds()
	r.DiskMB = float64(dirSize(dir)) / (1 << 20)
	return r, nil
}

func dirSize(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			n += info.Size()
		}
		return nil
	})
	return n
}

// ---- bbolt: one bucket, a read-write transaction per batch, no fsync
// per batch (the checkpoint is what is durable); a checkpoint copies the
// database in a read transaction (Tx.WriteTo), the only consistent copy
// bbolt offers.

type boltStore struct{ db *bolt.DB }

var bucket = []byte("state")

func openBolt(path string) (*boltStore, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return nil, err
	}
	return &boltStore{db}, db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists(bucket); return err })
}

func (s *boltStore) apply(keys [][]byte) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		for _, k := range keys {
			var n uint64
			if v := b.Get(k); v != nil {
				n = binary.BigEndian.Uint64(v)
			}
			if err := b.Put(k, binary.BigEndian.AppendUint64(nil, n+1)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *boltStore) load(keys [][]byte) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		for _, k := range keys {
			if err := b.Put(k, binary.BigEndian.AppendUint64(nil, 1)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *boltStore) get(k []byte) (uint64, bool, error) {
	var n uint64
	var ok bool
	err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucket).Get(k); v != nil {
			n, ok = binary.BigEndian.Uint64(v), true
		}
		return nil
	})
	return n, ok, err
}

func (s *boltStore) scan(kg byte, fn func(k, v []byte)) error {
	return s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucket).Cursor()
		for k, v := c.Seek([]byte{kg}); k != nil && k[0] == kg; k, v = c.Next() {
			fn(k, v)
		}
		return nil
	})
}

func (s *boltStore) checkpoint(dir string) (int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	var n int64
	err := s.db.View(func(tx *bolt.Tx) error {
		f, err := os.Create(filepath.Join(dir, "state.db"))
		if err != nil {
			return err
		}
		defer f.Close()
		if n, err = tx.WriteTo(f); err != nil {
			return err
		}
		return f.Sync()
	})
	return n, err
}

func (s *boltStore) close() error { return s.db.Close() }

// ---- pebble: a batch per write batch without fsync (the WAL is written,
// not synced); a checkpoint is pebble's Checkpoint: it flushes the
// memtable and hard-links the immutable sstables; an incremental
// checkpoint keeps only the sstables the previous one did not have.

type pebbleStore struct {
	db   *pebble.DB
	prev map[string]bool // the sstables of the previous checkpoint
}

func openPebble(dir string) (*pebbleStore, error) {
	// A 64 MiB block cache and memtable: what a backend with a memory
	// budget of a few hundred MiB would give it.
	cache := pebble.NewCache(64 << 20)
	defer cache.Unref()
	db, err := pebble.Open(dir, &pebble.Options{Cache: cache, MemTableSize: 64 << 20, Logger: quiet{}})
	if err != nil {
		return nil, err
	}
	return &pebbleStore{db: db}, nil
}

func (s *pebbleStore) apply(keys [][]byte) error {
	b := s.db.NewIndexedBatch()
	for _, k := range keys {
		var n uint64
		v, closer, err := b.Get(k)
		if err == nil {
			n = binary.BigEndian.Uint64(v)
			closer.Close()
		} else if err != pebble.ErrNotFound {
			return err
		}
		if err := b.Set(k, binary.BigEndian.AppendUint64(nil, n+1), nil); err != nil {
			return err
		}
	}
	return b.Commit(pebble.NoSync)
}

func (s *pebbleStore) load(keys [][]byte) error {
	b := s.db.NewBatch()
	for _, k := range keys {
		if err := b.Set(k, binary.BigEndian.AppendUint64(nil, 1), nil); err != nil {
			return err
		}
	}
	return b.Commit(pebble.NoSync)
}

func (s *pebbleStore) get(k []byte) (uint64, bool, error) {
	v, closer, err := s.db.Get(k)
	if err == pebble.ErrNotFound {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer closer.Close()
	return binary.BigEndian.Uint64(v), true, nil
}

func (s *pebbleStore) scan(kg byte, fn func(k, v []byte)) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kg}, UpperBound: []byte{kg + 1}})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		fn(it.Key(), it.Value())
	}
	return it.Close()
}

func (s *pebbleStore) checkpoint(dir string) (int64, error) {
	if err := s.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return 0, err
	}
	// What an incremental checkpoint keeps of it: the sstables that the
	// previous checkpoint did not have (flushed since, or written by
	// compactions since), and the small files (WAL, manifest, options);
	// the others are shared with the previous one.
	var n int64
	seen := map[string]bool{}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		name := filepath.Base(p)
		if filepath.Ext(p) == ".sst" {
			seen[name] = true
			if s.prev[name] {
				return nil
			}
		}
		n += info.Size()
		return nil
	})
	s.prev = seen
	return n, err
}

func (s *pebbleStore) close() error { return s.db.Close() }

// quiet drops pebble's informational log lines.
type quiet struct{}

func (quiet) Infof(string, ...any)      {}
func (quiet) Errorf(f string, a ...any) { fmt.Fprintf(os.Stderr, "pebble: "+f+"\n", a...) }
func (quiet) Fatalf(f string, a ...any) { fail(fmt.Errorf("pebble: "+f, a...)) }

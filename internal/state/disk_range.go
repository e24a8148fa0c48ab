package state

import (
	"strconv"

	"github.com/cockroachdb/pebble/v2"
)

// Range yields, after writing the cache back, the entries of key group g
// whose encoded keys lie in [from, to) (to nil: to the group's end), in
// encoded-key order, until yield returns false; with a TTL, not those
// that outlived it. A table whose key type encodes as its bytes (string:
// see codec) gets a range scan of its own order: the stage's timer table
// keeps (time, key) that way, so that the timers due are a scan from the
// start of each group.
//
// yield must not write to the table (the scan reads the database as of
// its start).
func (d *Disk[K, V]) Range(g int, from, to []byte, yield func(K, V) bool) {
	if g < 0 || g >= 128 {
		return
	}
	var now int64
	if d.ttl > 0 {
		now = d.now()
	}
	d.flush()
	lower := append([]byte{byte(g)}, from...)
	var upper []byte
	if to != nil {
		upper = append([]byte{byte(g)}, to...)
	} else {
		upper = []byte{byte(g + 1)}
	}
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		d.fail(&Error{Path: d.live, Err: err})
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k, err := d.kc.decode(it.Key()[1:])
		if err != nil {
			d.fail(&Error{Path: d.live, Err: err})
		}
		vb, err := it.ValueAndErr()
		if err != nil {
			d.fail(&Error{Path: d.live, Err: err})
		}
		v, at := d.value(k, vb)
		if d.dead(at, now) {
			continue
		}
		if !yield(k, v) {
			return
		}
	}
	if err := it.Error(); err != nil {
		d.fail(&Error{Path: d.live, Err: err})
	}
}

// CacheLen is how many entries the write-back cache holds (dirty, clean
// and deletions not yet written).
func (d *Disk[K, V]) CacheLen() int { return len(d.m) }

// TableOp is the operator name under which table j of an operator's
// Bundle keeps its disk files: the operator's own for the first table,
// beside it ("op~j") for the others, each its own database and checkpoint
// directories (two tables in one directory would take the same checkpoint
// names). The engine copies a bundle's disk tables into a savepoint from
// these places.
func TableOp(op string, j int) string {
	if j == 0 {
		return op
	}
	return op + "~" + strconv.Itoa(j)
}

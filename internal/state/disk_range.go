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
	lower := append([]byte{byte(g)}, from...)
	var upper []byte
	if to != nil {
		upper = append([]byte{byte(g)}, to...)
	} else {
		upper = []byte{byte(g + 1)}
	}
	d.scan(&pebble.IterOptions{LowerBound: lower, UpperBound: upper}, yield)
}

// CacheLen is how many entries the write-back cache holds (dirty, clean
// and deletions not yet written).
func (d *Disk[K, V]) CacheLen() int { return len(d.m) }

// TableOp is the operator name under which table j of an operator's
// Bundle keeps its disk files: the operator's own for the first table,
// beside it ("op~j") for the others, each its own database and checkpoint
// directories (two tables in one directory would take the same checkpoint
// names). The engine copies a bundle's disk tables into a savepoint from
// these places; j < 0 is a lone table (MapTables' index of a state that
// is not a bundle), at the operator's own place.
func TableOp(op string, j int) string {
	if j <= 0 {
		return op
	}
	return op + "~" + strconv.Itoa(j)
}

package state

import (
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// open is every disk table's database open in this process, for
// DiskMemory.
var open struct {
	sync.Mutex
	dbs map[*pebble.DB]struct{}
}

func register(db *pebble.DB) {
	open.Lock()
	defer open.Unlock()
	if open.dbs == nil {
		open.dbs = map[*pebble.DB]struct{}{}
	}
	open.dbs[db] = struct{}{}
}

func unregister(db *pebble.DB) {
	open.Lock()
	defer open.Unlock()
	delete(open.dbs, db)
}

// PebbleMemory is what the disk tables' databases hold in memory, summed
// over the databases open in the process.
type PebbleMemory struct {
	DBs             int
	BlockCache      int64 // bytes in the block caches (shared: counted once a cache)
	MemTables       int64 // bytes of memtables and large batches
	MemTableCount   int64
	ZombieMemTables int64 // bytes of memtables kept alive by iterators
	TableCache      int64 // open sstable readers
	TableIters      int64
	L0Files         int64
	Files           int64
	Compacting      int64 // compactions in progress
	CompactingBytes int64
	Cgo             string // pebble's manual (C) allocations, process-wide
}

// DiskMemory is the memory of the disk tables' databases open in the
// process now (a diagnosis: the state-large benchmark samples it).
func DiskMemory() PebbleMemory {
	open.Lock()
	defer open.Unlock()
	var p PebbleMemory
	for db := range open.dbs {
		m := db.Metrics()
		p.DBs++
		p.BlockCache += m.BlockCache.Size
		p.MemTables += int64(m.MemTable.Size)
		p.MemTableCount += m.MemTable.Count
		p.ZombieMemTables += int64(m.MemTable.ZombieSize)
		p.TableCache += m.FileCache.TableCount
		p.TableIters += m.TableIters
		p.L0Files += m.Levels[0].TablesCount
		for _, l := range m.Levels {
			p.Files += l.TablesCount
		}
		p.Compacting += m.Compact.NumInProgress
		p.CompactingBytes += m.Compact.InProgressBytes
		if p.Cgo == "" {
			for _, l := range strings.Split(m.String(), "\n") {
				if strings.HasPrefix(l, "Cgo memory usage:") {
					p.Cgo = strings.TrimPrefix(l, "Cgo memory usage: ")
				}
			}
		}
	}
	return p
}

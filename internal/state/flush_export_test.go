package state

// FlushForTest writes the table's memtables, and the large batches pebble
// holds to flush as memtables of their own, to sstables and waits: a test
// that measures the Go heap a table holds does it after this, or it
// measures how far pebble's background flushes lag (they hold 4 MiB
// write-back batches in the Go heap until flushed, more of them on a
// loaded machine).
func (d *Disk[K, V]) FlushForTest() error { return d.db.Flush() }

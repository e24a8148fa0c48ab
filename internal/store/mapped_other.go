//go:build !linux

package store

import bolt "go.etcd.io/bbolt"

// initialMmap is 0 (bbolt's default) where mapping a file may grow it on
// disk (bbolt truncates the file to the map's size on Windows).
// allocStep 0 is bbolt's default AllocSize.
const (
	initialMmap = 0
	allocStep   = 0
)

// DropMapped is a no-op where madvise is not used.
func DropMapped(*bolt.Tx) error { return nil }

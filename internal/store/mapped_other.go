//go:build !linux

package store

import bolt "go.etcd.io/bbolt"

// DropMapped is a no-op where madvise is not used.
func DropMapped(*bolt.Tx) error { return nil }

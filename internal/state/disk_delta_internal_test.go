package state

import (
	"encoding/binary"
	"hash/crc32"
	"testing"
)

// FuzzDeltaRecords feeds hostile bytes to the disk delta decoder (its
// trailing CRC made right, so that the records are read): it must refuse
// them or give records whose keys carry a key group, never panic.
func FuzzDeltaRecords(f *testing.F) {
	good := make([]byte, fileHeader)
	copy(good, fileMagic)
	good[4], good[5] = changelogVersion, kindDiskDelta
	binary.BigEndian.PutUint64(good[6:], 2)
	binary.BigEndian.PutUint64(good[14:], 1)
	binary.BigEndian.PutUint64(good[22:], 2)
	good = append(good, opDelete, 9, 5, 0, 0, 0, 0, 0, 0, 0, 1)
	good = append(good, opUpdate, 9, 7, 0, 0, 0, 0, 0, 0, 0, 2, 8, 0, 0, 0, 0, 0, 0, 0, 3)
	good = binary.BigEndian.AppendUint32(good, crc32.Checksum(good, clTable))
	f.Add(good)
	f.Add(good[:fileHeader])
	f.Add([]byte("SLCL\x01\x03"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) >= 4 {
			binary.BigEndian.PutUint32(data[len(data)-4:], crc32.Checksum(data[:len(data)-4], clTable))
		}
		_, _ = deltaRecords(data, func(op byte, k, v []byte) error {
			if len(k) < 1 || k[0] >= 128 || (op != opDelete && op != opUpdate) || (op == opDelete) != (v == nil) {
				t.Fatalf("record op %d key %x value %x", op, k, v)
			}
			return nil
		})
	})
}

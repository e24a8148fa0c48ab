package savepoint

import (
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// FuzzManifest feeds DecodeManifest, DecodeStateFile and DecodePlan bytes
// from realistic savepoints, damaged: none may panic, and what decodes
// encodes and decodes to the same value.
func FuzzManifest(f *testing.F) {
	dir := f.TempDir() + "/sp"
	sp, err := Write(dir, "counts", testCheckpoint())
	if err != nil {
		f.Fatal(err)
	}
	mb, _ := msgpack.Marshal(&sp.Manifest)
	f.Add(mb)
	f.Add(EncodePlan(testPlan()))
	sf, _ := msgpack.Marshal(&StateFile{Kind: StateKind, Version: Version, Operator: "count", Parallelism: 2,
		Instances: []InstanceState{{Instance: 0, KeyGroups: [2]int{0, 64}, State: []byte("zero")}, {Instance: 1, KeyGroups: [2]int{64, 128}}}})
	f.Add(sf)
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := DecodeManifest(b, "fuzz"); err == nil {
			again, _ := msgpack.Marshal(&m)
			m2, err := DecodeManifest(again, "fuzz")
			if err != nil || !reflect.DeepEqual(normal(m), normal(m2)) {
				t.Fatalf("round trip: %v\n%+v\n%+v", err, m, m2)
			}
		}
		if s, err := DecodeStateFile(b, "fuzz"); err == nil {
			again, _ := msgpack.Marshal(&s)
			if _, err := DecodeStateFile(again, "fuzz"); err != nil {
				t.Fatalf("round trip: %v", err)
			}
		}
		if p, err := DecodePlan(b, "fuzz"); err == nil {
			if _, err := DecodePlan(EncodePlan(p), "fuzz"); err != nil {
				t.Fatalf("round trip: %v", err)
			}
		}
	})
}

// normal makes empty and nil collections alike.
func normal(m Manifest) Manifest {
	if len(m.Offsets) == 0 {
		m.Offsets = nil
	}
	if len(m.Files) == 0 {
		m.Files = nil
	}
	if len(m.Plan.Operators) == 0 {
		m.Plan.Operators = nil
	}
	return m
}

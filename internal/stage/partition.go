package stage

import (
	"math"
	"reflect"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// maxKeyGroups is the number of key groups keys hash into; an instance owns a
// contiguous range of them (as Flink's max parallelism), so that state can be
// redistributed when parallelism changes.
const maxKeyGroups = 128

type Partition uint8

const (
	Forward   Partition = iota // instance i sends to instance i
	Rebalance                  // round-robin over all instances
	Hash                       // by key hash
	Broadcast                  // to every instance
)

func (p Partition) String() string {
	switch p {
	case Forward:
		return "forward"
	case Rebalance:
		return "rebalance"
	case Hash:
		return "hash"
	case Broadcast:
		return "broadcast"
	}
	return "?"
}

// InstanceFor maps a key hash to the instance (of parallelism p) that owns
// its key group.
func InstanceFor(hash uint64, p int) int {
	kg := int(hash % maxKeyGroups)
	return kg * p / maxKeyGroups
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(s string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return mix(h)
}

func fnvBytes(b []byte) uint64 {
	h := uint64(fnvOffset)
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return mix(h)
}

// hashUint64 is fnvBytes of v's 8 little-endian bytes, unrolled (every
// record of a KeyBy on an integer key is hashed).
func hashUint64(v uint64) uint64 {
	h := uint64(fnvOffset)
	h = (h ^ v&0xff) * fnvPrime
	h = (h ^ v>>8&0xff) * fnvPrime
	h = (h ^ v>>16&0xff) * fnvPrime
	h = (h ^ v>>24&0xff) * fnvPrime
	h = (h ^ v>>32&0xff) * fnvPrime
	h = (h ^ v>>40&0xff) * fnvPrime
	h = (h ^ v>>48&0xff) * fnvPrime
	h = (h ^ v>>56) * fnvPrime
	return mix(h)
}

// mix spreads the bits of an FNV hash so that the low bits used for key
// groups depend on every input byte (a finaliser from SplitMix64).
func mix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// HasherFor returns a hash function for keys of type K whose values depend
// only on the key's value: the same on every run, machine and architecture.
// Strings, integers, floats and booleans hash their value; other types hash
// their msgpack encoding (deterministic for structs, which encode their
// fields in declaration order).
func HasherFor[K comparable]() func(K) uint64 {
	rt := reflect.TypeFor[K]()
	// The unsafe casts read a K as its underlying kind: same size and layout.
	kind := rt.Kind()
	if rt.Size() == 4 { // int, uint and uintptr on 32-bit platforms
		switch kind {
		case reflect.Int:
			kind = reflect.Int32
		case reflect.Uint, reflect.Uintptr:
			kind = reflect.Uint32
		}
	}
	switch kind {
	case reflect.String:
		return func(k K) uint64 { return fnvString(*(*string)(unsafe.Pointer(&k))) }
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint64, reflect.Uintptr:
		return func(k K) uint64 { return hashUint64(*(*uint64)(unsafe.Pointer(&k))) }
	case reflect.Int32:
		return func(k K) uint64 { return hashUint64(uint64(*(*int32)(unsafe.Pointer(&k)))) }
	case reflect.Uint32:
		return func(k K) uint64 { return hashUint64(uint64(*(*uint32)(unsafe.Pointer(&k)))) }
	case reflect.Int16:
		return func(k K) uint64 { return hashUint64(uint64(*(*int16)(unsafe.Pointer(&k)))) }
	case reflect.Uint16:
		return func(k K) uint64 { return hashUint64(uint64(*(*uint16)(unsafe.Pointer(&k)))) }
	case reflect.Int8:
		return func(k K) uint64 { return hashUint64(uint64(*(*int8)(unsafe.Pointer(&k)))) }
	case reflect.Uint8, reflect.Bool:
		return func(k K) uint64 { return hashUint64(uint64(*(*uint8)(unsafe.Pointer(&k)))) }
	case reflect.Float64:
		return func(k K) uint64 { return hashUint64(math.Float64bits(*(*float64)(unsafe.Pointer(&k)))) }
	case reflect.Float32:
		return func(k K) uint64 { return hashUint64(math.Float64bits(float64(*(*float32)(unsafe.Pointer(&k))))) }
	}
	return func(k K) uint64 {
		b, err := msgpack.Marshal(k)
		if err != nil {
			panic(err) // a comparable key that msgpack cannot encode: reported as an operator failure
		}
		return fnvBytes(b)
	}
}

// KeyGroups is the number of key groups keys hash into (Flink's maximum
// parallelism): an operator runs with at most as many instances holding
// state, and its state is redistributed by key group when its parallelism
// changes.
const KeyGroups = maxKeyGroups

// KeyGroupOf is the key group of a key hash.
func KeyGroupOf(hash uint64) int { return int(hash % maxKeyGroups) }

// KeyGroupRange is the range [lo, hi) of key groups that instance i of p
// owns: the groups kg with InstanceFor = i (Flink's key-group ranges). An
// instance beyond the 128th owns none (lo == hi).
func KeyGroupRange(i, p int) (lo, hi int) {
	return (i*maxKeyGroups + p - 1) / p, ((i+1)*maxKeyGroups + p - 1) / p
}

// KeyGroupRestorer is implemented by the stages that keep state per key
// (aggregations, windows, joins, Process). RestoreKeyGroups restores the
// keys whose key group lies in [lo, hi) from the states of several
// instances of a run at another parallelism (their SnapshotState), which
// may hold other keys too: an instance's share after a rescale.
type KeyGroupRestorer interface {
	RestoreKeyGroups(states [][]byte, lo, hi int) error
}

// ownsKeys says whether a key's group lies in [lo, hi), hashing as KeyBy
// partitions.
func ownsKeys[K comparable](lo, hi int) func(K) bool {
	h := HasherFor[K]()
	return func(k K) bool {
		kg := KeyGroupOf(h(k))
		return kg >= lo && kg < hi
	}
}

package state

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// baseMapFile is a changelog base in map order (kindBaseMap) built by hand
// with a right CRC: records (key, value) then the order's keys, so that
// the reader's own checks, not the CRC, must find what is wrong.
func baseMapFile[K comparable, V any](t *testing.T, m *Mem[K, V], keys []K, vals []V, order []K) []byte {
	t.Helper()
	b := append([]byte(nil), fileMagic...)
	b = append(b, changelogVersion, kindBaseMap)
	b = binary.BigEndian.AppendUint64(b, 7)
	b = binary.BigEndian.AppendUint64(b, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(len(keys)))
	fixed := m.kc.fixed() && m.vc.fixed()
	var err error
	if fixed {
		b = append(b, layoutFixed)
		for i, k := range keys {
			b = binary.BigEndian.AppendUint64(b, uint64(any(k).(int64)))
			b = binary.BigEndian.AppendUint64(b, uint64(any(vals[i]).(int64)))
		}
		var last uint64
		for _, k := range order {
			u := uint64(any(k).(int64))
			d := int64(u - last)
			b = binary.AppendUvarint(b, uint64(d<<1)^uint64(d>>63))
			last = u
		}
	} else {
		b = append(b, layoutGeneric)
		for i, k := range keys {
			if b, err = m.appendKV(b, k, &vals[i]); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range order {
			if b, err = m.appendKV(b, k, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, clTable))
}

// TestBaseMapStructure: a base in map order whose CRC is right but whose
// order is not a permutation of its keys, or whose records name a key
// twice, is refused with a named error, both into an empty table (the
// restore at the same parallelism, applyBaseMapFresh) and into one that
// already holds another instance's key (a rescale, applyBaseMap); a right
// one restores the values and the order, in both layouts.
func TestBaseMapStructure(t *testing.T) {
	fixed := &Mem[int64, int64]{owns: func(int64, int, int) bool { return true }, kc: newCodec[int64]("key"), vc: newCodec[int64]("state")}
	generic := &Mem[string, int64]{owns: func(string, int, int) bool { return true }, kc: newCodec[string]("key"), vc: newCodec[int64]("state")}
	ints := []int64{5, -3, 1 << 40, 0, 17}
	vals := []int64{50, -30, 1, 0, 170}
	name := func(k int64) string { return "k" + strconv.FormatInt(k, 10) }
	cases := []struct {
		name        string
		keys, order []int // indices into ints
		want        string
	}{
		{"right", []int{0, 1, 2, 3, 4}, []int{3, 1, 4, 0, 2}, ""},
		{"a key twice in the records", []int{0, 1, 2, 2, 4}, []int{0, 1, 2, 2, 4}, "twice in a base"},
		{"the order names a key twice and leaves one out", []int{0, 1, 2, 3, 4}, []int{0, 1, 2, 3, 3}, "order"},
		{"the order names a key not in the base", []int{0, 1, 2, 3}, []int{0, 1, 2, 4}, "order"},
	}
	for _, c := range cases {
		var ks, ko []int64
		var ss, so []string
		var vs []int64
		for _, i := range c.keys {
			ks, ss, vs = append(ks, ints[i]), append(ss, name(ints[i])), append(vs, vals[i])
		}
		for _, i := range c.order {
			ko, so = append(ko, ints[i]), append(so, name(ints[i]))
		}
		for _, fresh := range []bool{true, false} {
			what := c.name + map[bool]string{true: ", into an empty table", false: ", beside another instance's key"}[fresh]
			check := func(layout string, order []string, M map[string]int64, err error) {
				t.Helper()
				if c.want != "" {
					if !errors.Is(err, ErrChangelog) || !strings.Contains(err.Error(), c.want) {
						t.Errorf("%s (%s layout): %v, want ErrChangelog saying %q", what, layout, err, c.want)
					}
					return
				}
				if err != nil {
					t.Fatalf("%s (%s layout): %v", what, layout, err)
				}
				want := so
				if !fresh {
					want = append([]string{"k99"}, so...)
				}
				if !slices.Equal(order, want) || len(M) != len(want) {
					t.Fatalf("%s (%s layout): order %v of %d keys, want %v", what, layout, order, len(M), want)
				}
				for i, k := range ss {
					if M[k] != vs[i] {
						t.Fatalf("%s (%s layout): %s = %d, want %d", what, layout, k, M[k], vs[i])
					}
				}
			}
			{ // 8-byte keys and values
				var M map[int64]int64
				var order []int64
				if !fresh {
					M, order = map[int64]int64{99: 9}, []int64{99}
				}
				M, order, err := fixed.applyChain([][]byte{baseMapFile(t, fixed, ks, vs, ko)}, M, order, 0, AllGroups, fresh)
				var sorder []string
				sm := map[string]int64{}
				for _, k := range order {
					sorder = append(sorder, name(k))
				}
				for k, v := range M {
					sm[name(k)] = v
				}
				check("fixed", sorder, sm, err)
			}
			{ // strings: lengths and encodings
				var M map[string]int64
				var order []string
				if !fresh {
					M, order = map[string]int64{"k99": 9}, []string{"k99"}
				}
				M, order, err := generic.applyChain([][]byte{baseMapFile(t, generic, ss, vs, so)}, M, order, 0, AllGroups, fresh)
				check("generic", order, M, err)
			}
		}
	}
}

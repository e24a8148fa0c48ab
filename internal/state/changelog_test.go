package state_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/state"
)

// groupOf stands for KeyBy's key groups in these tests: 8 groups.
func groupOf(k int64) int { return int(uint64(k)*0x9E3779B97F4A7C15>>32) % 8 }

func owns(k int64, lo, hi int) bool { g := groupOf(k); return g >= lo && g < hi }

func openLog(t *testing.T, dir string, inst, maxChain int) *state.Mem[int64, int64] {
	t.Helper()
	m, err := state.OpenChangelog[int64, int64](state.Spec{Changelog: dir, MaxChain: maxChain}, "count", inst, 8, owns)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// model is what a memory table should hold: values, and keys in
// first-put order (a key deleted and put again goes to the end).
type model struct {
	m     map[int64]int64
	order []int64
}

func (o *model) put(k, v int64) {
	if _, ok := o.m[k]; !ok {
		o.order = append(o.order, k)
	}
	o.m[k] = v
}

func (o *model) del(k int64) {
	if _, ok := o.m[k]; ok {
		delete(o.m, k)
		o.order = slices.DeleteFunc(o.order, func(x int64) bool { return x == k })
	}
}

func (o *model) clone() model {
	c := model{m: map[int64]int64{}, order: slices.Clone(o.order)}
	for k, v := range o.m {
		c.m[k] = v
	}
	return c
}

func sameAs(t *testing.T, what string, m *state.Mem[int64, int64], want model) {
	t.Helper()
	if !slices.Equal(m.Order, want.order) {
		t.Fatalf("%s: order of %d keys differs from the model's %d (first keys %v vs %v)", what, len(m.Order), len(want.order), head(m.Order), head(want.order))
	}
	if len(m.M) != len(want.m) {
		t.Fatalf("%s: %d keys, the model %d", what, len(m.M), len(want.m))
	}
	for k, v := range want.m {
		if got, ok := m.M[k]; !ok || got != v {
			t.Fatalf("%s: key %d: %d %v, want %d", what, k, got, ok, v)
		}
	}
}

// restoresTo restores the snapshot handle h of the changelog in dir into a
// new table and checks it holds want.
func restoresTo(t *testing.T, what string, h []byte, dir string, want model) {
	t.Helper()
	r := openLog(t, t.TempDir(), 0, 0)
	inline, err := state.Inline(h, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Restore([][]byte{inline}, 0, state.AllGroups); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	sameAs(t, what, r, want)
}

func head(s []int64) []int64 { return s[:min(len(s), 8)] }

// change applies n random operations to the table and the model: puts of
// existing and new keys (through Put, and as the keyed stage does, through
// M, Order and Changed), deletes one at a time and by DeleteAll.
func change(rng *rand.Rand, m *state.Mem[int64, int64], o *model, n int, keySpace int64) {
	for range n {
		k := rng.Int64N(keySpace)
		switch r := rng.IntN(20); {
		case r < 2:
			m.Delete(k)
			o.del(k)
		case r < 3:
			gone := map[int64]bool{k: true, k + 1: true, rng.Int64N(keySpace): true}
			m.DeleteAll(gone)
			for g := range gone {
				o.del(g)
			}
		case r < 10:
			v, ok := m.Get(k)
			m.Put(k, v+1, ok)
			o.put(k, v+1)
		default: // the keyed stage's loop
			v, seen := m.M[k]
			v += 2
			if !seen {
				m.Order = append(m.Order, k)
			}
			m.M[k] = v
			m.Changed(k, seen)
			o.put(k, v)
		}
	}
}

// TestChangelogRestoreEqualsModel: over many checkpoints of random puts
// and deletes, bases and deltas, a restore from every retained
// checkpoint's handle gives the table as it was then: values and order.
func TestChangelogRestoreEqualsModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 21))
	dir := t.TempDir()
	m := openLog(t, dir, 0, 3)
	o := &model{m: map[int64]int64{}}
	type taken struct {
		handle []byte
		want   model
	}
	var hist []taken
	bases, deltas := 0, 0
	for id := uint64(1); id <= 40; id++ {
		n := 20 + rng.IntN(200)
		if id%13 == 0 {
			n = 3000 // more than a quarter of the keys: a base
		}
		change(rng, m, o, n, 1000)
		h, err := m.Snapshot(id)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, base := m.LastChain(); base {
			bases++
		} else {
			deltas++
		}
		hist = append(hist, taken{h, o.clone()})
		m.Committed(id)
		// the newest two are kept: restore both
		for _, back := range hist[max(len(hist)-2, 0):] {
			r := openLog(t, dir, 1, 3)
			if err := r.Restore([][]byte{back.handle}, 0, state.AllGroups); err != nil {
				t.Fatalf("checkpoint %d: %v", id, err)
			}
			sameAs(t, "restored", r, back.want)
		}
	}
	if bases < 4 || deltas < 20 {
		t.Fatalf("%d bases and %d deltas: the test did not exercise chains", bases, deltas)
	}
	sameAs(t, "the live table", m, *o)
	// A restored table goes on: its next checkpoint is a base, and deltas
	// follow it.
	r := openLog(t, dir, 0, 3)
	if err := r.Restore([][]byte{hist[len(hist)-1].handle}, 0, state.AllGroups); err != nil {
		t.Fatal(err)
	}
	for id := uint64(41); id <= 44; id++ {
		change(rng, r, o, 100, 1000)
		h, err := r.Snapshot(id)
		if err != nil {
			t.Fatal(err)
		}
		files, _, base := r.LastChain()
		if (id == 41) != base || files != int(id-40) {
			t.Fatalf("checkpoint %d after a restore: %d files, base %v", id, files, base)
		}
		r.Committed(id)
		x := state.NewMem[int64, int64](owns)
		inl, err := state.Inline(h, dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Restore([][]byte{inl}, 0, state.AllGroups); err != nil {
			t.Fatal(err)
		}
		sameAs(t, "restored from the inline chain", x, *o)
	}
}

// TestChangelogRescale: the chains of two instances restored by key-group
// ranges (as a job at another parallelism does) give each range's keys.
func TestChangelogRescale(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	dir := t.TempDir()
	var handles [][]byte
	var models []*model
	for inst := range 2 {
		m := openLog(t, dir, inst, 4)
		o := &model{m: map[int64]int64{}}
		var h []byte
		for k := range int64(2000) {
			if (groupOf(k) < 4) == (inst == 0) {
				m.Put(k, k, false)
				o.put(k, k)
			}
		}
		for id := uint64(1); id <= 5; id++ {
			// each instance's own keys: those of its half of the groups
			for range 100 {
				k := rng.Int64N(2000)
				if (groupOf(k) < 4) != (inst == 0) {
					continue
				}
				if rng.IntN(8) == 0 {
					m.Delete(k)
					o.del(k)
					continue
				}
				v, ok := m.Get(k)
				m.Put(k, v+1, ok)
				o.put(k, v+1)
			}
			var err error
			if h, err = m.Snapshot(id); err != nil {
				t.Fatal(err)
			}
			m.Committed(id)
		}
		if files, _, _ := m.LastChain(); files < 2 {
			t.Fatalf("instance %d: a chain of %d files", inst, files)
		}
		handles, models = append(handles, h), append(models, o)
	}
	for _, rg := range [][2]int{{0, 2}, {2, 6}, {6, 8}, {0, 8}} {
		want := model{m: map[int64]int64{}}
		for _, o := range models {
			for _, k := range o.order {
				if owns(k, rg[0], rg[1]) {
					want.put(k, o.m[k])
				}
			}
		}
		r := openLog(t, dir, 5, 4)
		if err := r.Restore(handles, rg[0], rg[1]); err != nil {
			t.Fatal(err)
		}
		sameAs(t, fmt.Sprintf("groups [%d, %d)", rg[0], rg[1]), r, want)
	}
}

// logFiles lists an instance's changelog files.
func logFiles(t *testing.T, dir string, inst string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "count", inst))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// chainFiles decodes a handle's file names (the test's own reading of the
// format: magic, version, id, count, then path, size, crc per file).
func chainFiles(t *testing.T, h []byte) []string {
	t.Helper()
	i := 5 + 8
	n, w := binary.Uvarint(h[i:])
	i += w
	var out []string
	for range n {
		l, w := binary.Uvarint(h[i:])
		i += w
		out = append(out, filepath.Base(string(h[i:i+int(l)])))
		i += int(l)
		_, w = binary.Uvarint(h[i:])
		i += w + 4
	}
	return out
}

// TestChangelogRetention: once a checkpoint is complete, the files that
// neither it nor the one before it need are removed from the directory;
// those they need stay and restore.
func TestChangelogRetention(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	dir := t.TempDir()
	m := openLog(t, dir, 0, 2) // a base every third checkpoint
	o := &model{m: map[int64]int64{}}
	var handles [][]byte
	var removed []string
	for id := uint64(1); id <= 12; id++ {
		change(rng, m, o, 100, 5000)
		h, err := m.Snapshot(id)
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, h)
		before := logFiles(t, dir, "0")
		m.Committed(id)
		after := logFiles(t, dir, "0")
		var want []string
		for _, hh := range handles[max(len(handles)-2, 0):] {
			want = append(want, chainFiles(t, hh)...)
		}
		slices.Sort(want)
		want = slices.Compact(want)
		if !slices.Equal(after, want) {
			t.Fatalf("after checkpoint %d: files %v, want those of the newest two checkpoints %v", id, after, want)
		}
		for _, f := range before {
			if !slices.Contains(after, f) {
				removed = append(removed, f)
			}
		}
	}
	if len(removed) < 6 {
		t.Fatalf("only %d files removed over 12 checkpoints: %v", len(removed), removed)
	}
	for _, f := range removed {
		if _, err := os.Stat(filepath.Join(dir, "count", "0", f)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: still there (%v)", f, err)
		}
	}
	// An old checkpoint's chain is gone: its restore fails naming a file.
	r := openLog(t, dir, 1, 2)
	if err := r.Restore([][]byte{handles[0]}, 0, state.AllGroups); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("restore of a removed checkpoint: %v", err)
	}
	if err := r.Restore([][]byte{handles[len(handles)-1]}, 0, state.AllGroups); err != nil {
		t.Fatal(err)
	}
	sameAs(t, "restored", r, *o)
}

// TestChangelogDeltaBytes: after 1 % of 100 000 keys changed, the delta is
// under 3 % of the base's bytes.
func TestChangelogDeltaBytes(t *testing.T) {
	m := openLog(t, t.TempDir(), 0, 0)
	const keys = 100_000
	for k := range int64(keys) {
		m.Put(k, k, false)
	}
	if _, err := m.Snapshot(1); err != nil {
		t.Fatal(err)
	}
	_, base, _ := m.LastChain()
	rng := rand.New(rand.NewPCG(1, 2))
	for range keys / 100 {
		k := rng.Int64N(keys)
		v, _ := m.Get(k)
		m.Put(k, v+1, true)
	}
	if _, err := m.Snapshot(2); err != nil {
		t.Fatal(err)
	}
	files, delta, isBase := m.LastChain()
	if isBase || files != 2 {
		t.Fatalf("the second checkpoint: %d files, base %v", files, isBase)
	}
	if float64(delta) > 0.03*float64(base) {
		t.Fatalf("delta of %d bytes, base %d: %.3f×", delta, base, float64(delta)/float64(base))
	}
	t.Logf("base %d bytes, delta %d (%.4f×)", base, delta, float64(delta)/float64(base))
}

// TestChangelogCorrupt: a damaged, truncated, foreign, newer or unlinked
// file, and a damaged handle or inline chain, are refused with
// ErrChangelog naming the file; the table is left as it was.
func TestChangelogCorrupt(t *testing.T) {
	dir := t.TempDir()
	m := openLog(t, dir, 0, 5)
	for k := range int64(50) {
		m.Put(k, k, false)
	}
	if _, err := m.Snapshot(1); err != nil {
		t.Fatal(err)
	}
	m.Put(3, 30, true)
	m.Delete(4)
	h, err := m.Snapshot(2)
	if err != nil {
		t.Fatal(err)
	}
	names := chainFiles(t, h)
	if len(names) != 2 {
		t.Fatalf("chain %v", names)
	}
	deltaPath := filepath.Join(dir, "count", "0", names[1])
	good, err := os.ReadFile(deltaPath)
	if err != nil {
		t.Fatal(err)
	}
	inline, err := state.Inline(h, dir)
	if err != nil {
		t.Fatal(err)
	}
	damage := map[string]func([]byte) []byte{
		"truncated":  func(b []byte) []byte { return b[:len(b)-7] },
		"flipped":    func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b },
		"foreign":    func(b []byte) []byte { copy(b, "PK\x03\x04"); return b },
		"newer":      func(b []byte) []byte { b[4] = 9; return b },
		"empty":      func([]byte) []byte { return nil },
		"lengthened": func(b []byte) []byte { return append(b, 0) },
	}
	check := func(what string, err error, path string) {
		t.Helper()
		if !errors.Is(err, state.ErrChangelog) {
			t.Fatalf("%s: %v, want ErrChangelog", what, err)
		}
		if path != "" && !strings.Contains(err.Error(), path) {
			t.Fatalf("%s: %q does not name %s", what, err, path)
		}
		if strings.HasPrefix(what, "newer") && what != "newer" && !strings.Contains(err.Error(), "version") {
			t.Fatalf("%s: %q does not say the version", what, err)
		}
	}
	r := openLog(t, dir, 1, 5)
	r.Put(99, 99, false)
	for what, f := range damage {
		if err := os.WriteFile(deltaPath, f(slices.Clone(good)), 0o644); err != nil {
			t.Fatal(err)
		}
		check(what, r.Restore([][]byte{h}, 0, state.AllGroups), deltaPath)
		if v, ok := r.Get(99); !ok || v != 99 || len(r.M) != 1 {
			t.Fatalf("%s: the table changed after a refused restore", what)
		}
		// the same damage inside a savepoint's inline chain
		bad := slices.Clone(inline)
		at := len(inline) - len(good)
		if !slices.Equal(inline[at:], good) {
			t.Fatal("the inline chain does not end with the delta")
		}
		d := f(slices.Clone(good))
		bad = append(bad[:at-binary.PutUvarint(make([]byte, 10), uint64(len(good)))], binary.AppendUvarint(nil, uint64(len(d)))...)
		bad = append(bad, d...)
		err := r.Restore([][]byte{bad}, 0, state.AllGroups)
		if what == "newer" {
			check("newer, inline", err, "")
		} else if !errors.Is(err, state.ErrChangelog) {
			t.Fatalf("inline, %s: %v", what, err)
		}
	}
	if err := os.WriteFile(deltaPath, good, 0o644); err != nil {
		t.Fatal(err)
	}
	// A handle damaged, or truncated
	hb := slices.Clone(h)
	hb[len(hb)/2] ^= 1
	check("damaged handle", r.Restore([][]byte{hb}, 0, state.AllGroups), "")
	hb = slices.Clone(h)
	hb[4] = 2
	check("newer handle", r.Restore([][]byte{hb}, 0, state.AllGroups), "")
	// A handle claiming a file of 32 GiB (its CRC right): refused from the
	// file's size, nothing allocated.
	huge := []byte("SLCH\x01")
	huge = binary.BigEndian.AppendUint64(huge, 2)
	huge = binary.AppendUvarint(huge, 1)
	rel := "count/0/" + names[1]
	huge = binary.AppendUvarint(huge, uint64(len(rel)))
	huge = append(huge, rel...)
	huge = binary.AppendUvarint(huge, 1<<35)
	huge = binary.BigEndian.AppendUint32(huge, 0)
	huge = binary.BigEndian.AppendUint32(huge, crc32.Checksum(huge, crc32.MakeTable(crc32.Castagnoli)))
	check("a handle of a 32 GiB file", r.Restore([][]byte{huge}, 0, state.AllGroups), deltaPath)
	check("truncated handle", r.Restore([][]byte{h[:len(h)-3]}, 0, state.AllGroups), "")
	check("truncated inline", r.Restore([][]byte{inline[:len(inline)-3]}, 0, state.AllGroups), "")
	// A plain memory table cannot read a handle's files: a clear error.
	plain := state.NewMem[int64, int64](owns)
	if err := plain.Restore([][]byte{h}, 0, state.AllGroups); !errors.Is(err, state.ErrChangelog) || !strings.Contains(err.Error(), "Changelog") {
		t.Fatalf("plain table: %v", err)
	}
	// Undamaged, it restores.
	if err := r.Restore([][]byte{h}, 0, state.AllGroups); err != nil {
		t.Fatal(err)
	}
	if v, ok := r.Get(3); v != 30 || !ok {
		t.Fatalf("key 3: %d %v", v, ok)
	}
	if _, ok := r.Get(4); ok {
		t.Fatal("key 4 deleted, restored")
	}
}

// TestChangelogScaleDownRemovesOldInstances: after a restore at a lower
// parallelism, instance 0 removes the directories of the instances that no
// longer exist once its retained checkpoints are all its own, not before.
func TestChangelogScaleDownRemovesOldInstances(t *testing.T) {
	dir := t.TempDir()
	var handles [][]byte
	for inst := range 4 {
		m, err := state.OpenChangelog[int64, int64](state.Spec{Changelog: dir}, "count", inst, 4, owns)
		if err != nil {
			t.Fatal(err)
		}
		for k := range int64(100) {
			if groupOf(k)/2 == inst {
				m.Put(k, k, false)
			}
		}
		h, err := m.Snapshot(1)
		if err != nil {
			t.Fatal(err)
		}
		m.Committed(1)
		handles = append(handles, h)
	}
	news := make([]*state.Mem[int64, int64], 2)
	for inst := range 2 {
		m, err := state.OpenChangelog[int64, int64](state.Spec{Changelog: dir}, "count", inst, 2, owns)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Restore(handles, inst*4, inst*4+4); err != nil {
			t.Fatal(err)
		}
		news[inst] = m
	}
	exists := func(inst string) bool {
		_, err := os.Stat(filepath.Join(dir, "count", inst))
		return err == nil
	}
	for id := uint64(2); id <= 3; id++ {
		for _, m := range news {
			if _, err := m.Snapshot(id); err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range news {
			m.Committed(id)
		}
		if id == 2 && (!exists("2") || !exists("3")) {
			t.Fatal("the old instances' directories removed while a retained checkpoint (the restored one) needs them")
		}
	}
	if exists("2") || exists("3") {
		t.Fatal("the directories of instances 2 and 3 are still there at parallelism 2")
	}
	if !exists("0") || !exists("1") {
		t.Fatal("a live instance's directory removed")
	}
}

// TestChangelogBaseGenericLayout: a base of string keys and values
// (lengths of one byte and of several: 200 and 20 000 bytes) restores
// every value and the first-put order, also after a key was deleted and
// put again.
func TestChangelogBaseGenericLayout(t *testing.T) {
	dir := t.TempDir()
	all := func(string, int, int) bool { return true }
	m, err := state.OpenChangelog[string, string](state.Spec{Changelog: dir}, "words", 0, 1, all)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	var order []string
	for i := range 300 {
		k := fmt.Sprintf("key-%03d-%s", i, strings.Repeat("k", i%150))
		v := strings.Repeat(string(rune('a'+i%26)), []int{0, 5, 200, 20_000}[i%4])
		m.Put(k, v, false)
		want[k], order = v, append(order, k)
	}
	m.Delete(order[0])
	m.Put(order[0], "again", false)
	want[order[0]] = "again"
	order = append(order[1:], order[0])
	h, err := m.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, base := m.LastChain(); !base {
		t.Fatal("the first snapshot is not a base")
	}
	r, err := state.OpenChangelog[string, string](state.Spec{Changelog: dir}, "words", 0, 1, all)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Restore([][]byte{h}, 0, state.AllGroups); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Order, order) {
		t.Fatalf("order of %d keys differs (first %q, want %q)", len(r.Order), r.Order[:3], order[:3])
	}
	if !maps.Equal(r.M, want) {
		t.Fatalf("restored %d keys, want %d, values differ", len(r.M), len(want))
	}
}

// TestChangelogSnapshotLater: the file of a SnapshotLater is in place
// and synced when durable is called with nil, the table may change at
// once (the snapshot is of the table as it was), and a write that fails
// reaches durable as an error; the checkpoint after it is a base again.
func TestChangelogSnapshotLater(t *testing.T) {
	dir := t.TempDir()
	m := openLog(t, dir, 0, 0)
	var want model
	want.m = map[int64]int64{}
	for k := range int64(1000) {
		m.Put(k, k, false)
		want.put(k, k)
	}
	done := make(chan error, 1)
	h, later, err := m.SnapshotLater(1, func(err error) { done <- err })
	if err != nil || !later {
		t.Fatalf("SnapshotLater: later %v, %v", later, err)
	}
	m.Put(5, 500, true) // after the snapshot: not in it
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("durable was not called")
	}
	restoresTo(t, "restored", h, dir, want)

	// A write that fails: the instance's directory is gone.
	m.Put(6, 600, true)
	if err := os.RemoveAll(filepath.Join(dir, "count")); err != nil {
		t.Fatal(err)
	}
	if _, later, err := m.SnapshotLater(2, func(err error) { done <- err }); err != nil || !later {
		t.Fatalf("SnapshotLater 2: later %v, %v", later, err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a write into a removed directory was durable")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("durable was not called")
	}
	if err := os.MkdirAll(filepath.Join(dir, "count", "0"), 0o755); err != nil {
		t.Fatal(err)
	}
	m.Put(7, 700, true)
	if _, err := m.Snapshot(3); err != nil {
		t.Fatal(err)
	}
	if files, _, base := m.LastChain(); !base || files != 1 {
		t.Fatalf("after a failed write: %d files, base %v; want a base", files, base)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestChangelogSkipsTrackingAfterOverflow: after intervals in which every
// key changed (bases), the intervals that follow go untracked (bases
// too), and once few keys change a delta comes back within five
// snapshots; every snapshot restores to the model.
func TestChangelogSkipsTrackingAfterOverflow(t *testing.T) {
	dir := t.TempDir()
	m := openLog(t, dir, 0, 0)
	want := model{m: map[int64]int64{}}
	const keys = 1000
	id := uint64(0)
	snap := func() (base bool) {
		t.Helper()
		id++
		h, err := m.Snapshot(id)
		if err != nil {
			t.Fatal(err)
		}
		restoresTo(t, fmt.Sprintf("checkpoint %d", id), h, dir, want)
		_, _, base = m.LastChain()
		return base
	}
	for round := range int64(7) { // snapshot 1 untracked (the first), then tracked ones overflow: 2, 4, 7; 3, 5, 6 untracked
		for k := range int64(keys) {
			v, ok := m.Get(k)
			m.Put(k, v+round, ok)
			want.put(k, v+round)
		}
		if !snap() {
			t.Fatalf("checkpoint %d after every key changed is not a base", id)
		}
	}
	for i := range int64(6) {
		m.Put(i, -i, true)
		want.put(i, -i)
		m.Put(keys+i, i, false)
		want.put(keys+i, i)
		if !snap() {
			if i == 0 {
				t.Fatal("the first checkpoint after the overflowing ones is a delta: it was tracked")
			}
			return
		}
	}
	t.Fatal("no delta in six checkpoints with few keys changed")
}

// TestChangelogGrowingTableWritesDeltas: a table that only grows (each
// interval appends as many keys as it had, a few of the old updated,
// deleted, or appended and deleted again) writes deltas of the new keys,
// not a base every checkpoint; a base comes when the deltas pass half of
// it. Every checkpoint restores to the table as it was.
func TestChangelogGrowingTableWritesDeltas(t *testing.T) {
	dir := t.TempDir()
	m := openLog(t, dir, 0, 0)
	o := &model{m: map[int64]int64{}}
	var kinds []string
	next := int64(0)
	for id := uint64(1); id <= 8; id++ {
		add := int64(2000) // the same number of new keys every interval
		for range add {
			m.Put(next, next*3, false)
			o.put(next, next*3)
			next++
		}
		if id > 1 {
			m.Put(1, int64(id), true) // an old key updated
			o.put(1, int64(id))
			m.Delete(int64(id)) // an old key deleted
			o.del(int64(id))
			m.Delete(next - 1) // a new one deleted again
			o.del(next - 1)
		}
		h, err := m.Snapshot(id)
		if err != nil {
			t.Fatal(err)
		}
		files, size, base := m.LastChain()
		kind := "delta"
		if base {
			kind = "base"
		}
		kinds = append(kinds, kind)
		if !base && size > int64(add)*24 {
			t.Errorf("checkpoint %d: a delta of %d bytes for %d new keys: more than the new keys", id, size, add)
		}
		m.Committed(id)
		restoresTo(t, fmt.Sprintf("checkpoint %d (%d files)", id, files), h, dir, o.clone())
	}
	// 1 base (the first); 2 delta; 3 base (deltas 1 > 1/2); 4, 5 deltas;
	// 6 base (deltas 2 > 3/2); 7, 8, deltas.
	want := []string{"base", "delta", "base", "delta", "delta", "base", "delta", "delta"}
	if !slices.Equal(kinds, want) {
		t.Errorf("checkpoints wrote %v, want %v", kinds, want)
	}
}

// TestChangelogClear: a cleared table's next checkpoint is a base of what
// was put after the clear, and a delta follows it.
func TestChangelogClear(t *testing.T) {
	dir := t.TempDir()
	m := openLog(t, dir, 0, 0)
	o := &model{m: map[int64]int64{}}
	snap := func(id uint64) bool {
		t.Helper()
		h, err := m.Snapshot(id)
		if err != nil {
			t.Fatal(err)
		}
		m.Committed(id)
		restoresTo(t, fmt.Sprintf("checkpoint %d", id), h, dir, o.clone())
		_, _, base := m.LastChain()
		return base
	}
	for k := range int64(5000) {
		m.Put(k, k, false)
		o.put(k, k)
	}
	snap(1)
	m.Put(7, 70, true)
	m.Clear()
	o = &model{m: map[int64]int64{}}
	m.Put(3, 33, false)
	o.put(3, 33)
	if !snap(2) {
		t.Fatal("the checkpoint after Clear is a delta")
	}
	m.Put(4, 44, false)
	o.put(4, 44)
	if snap(3) {
		t.Fatal("the checkpoint after the one after Clear is a base: tracking did not resume")
	}
}

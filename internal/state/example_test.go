package state_test

import (
	"fmt"
	"os"

	"github.com/sluicehq/sluice/internal/state"
)

// A disk table: state written, checkpointed, and restored into another
// table from the checkpoint's handle.
func ExampleDisk() {
	dir, _ := os.MkdirTemp("", "state-example-")
	defer os.RemoveAll(dir)
	h := func(k string) uint64 { return uint64(len(k)) }
	d, err := state.OpenDisk[string, int64](state.Spec{Dir: dir}, "count", 0, 1, h, nil)
	if err != nil {
		panic(err)
	}
	defer d.Close()
	for _, w := range []string{"to", "be", "or", "not", "to", "be"} {
		v, ok := d.Get(w)
		d.Put(w, v+1, ok)
	}
	handle, err := d.Snapshot(1)
	if err != nil {
		panic(err)
	}
	r, err := state.OpenDisk[string, int64](state.Spec{Dir: dir}, "count", 1, 2, h, nil)
	if err != nil {
		panic(err)
	}
	defer r.Close()
	if err := r.Restore([][]byte{handle}, 0, state.AllGroups); err != nil {
		panic(err)
	}
	for k, v := range r.All {
		fmt.Println(k, v)
	}
	// Output:
	// be 2
	// or 1
	// to 2
	// not 1
}

// A memory table with a changelog: the first checkpoint writes a base, the
// next only the keys changed since (a delta), and a restore reads both.
func ExampleOpenChangelog() {
	dir, _ := os.MkdirTemp("", "changelog-example-")
	defer os.RemoveAll(dir)
	all := func(string, int, int) bool { return true }
	m, err := state.OpenChangelog[string, int64](state.Spec{Changelog: dir}, "count", 0, 1, all)
	if err != nil {
		panic(err)
	}
	for _, w := range []string{"to", "be", "or", "not"} {
		m.Put(w, 1, false)
	}
	if _, err := m.Snapshot(1); err != nil {
		panic(err)
	}
	m.Put("to", 2, true)
	m.Delete("or")
	handle, err := m.Snapshot(2)
	if err != nil {
		panic(err)
	}
	files, _, base := m.LastChain()
	fmt.Println("files:", files, "last a base:", base)
	r, _ := state.OpenChangelog[string, int64](state.Spec{Changelog: dir}, "count", 1, 2, all)
	if err := r.Restore([][]byte{handle}, 0, state.AllGroups); err != nil {
		panic(err)
	}
	for k, v := range r.All {
		fmt.Println(k, v)
	}
	// Output:
	// files: 2 last a base: false
	// to 2
	// be 1
	// not 1
}

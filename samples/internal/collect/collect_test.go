package collect

import (
	"context"
	"reflect"
	"testing"
	"time"
)

type result struct {
	User  string
	Start time.Time
	Seqs  []int64
}

// A restored instance starts with exactly the records it had at the
// checkpoint, equal (reflect.DeepEqual, as the samples compare them) to
// those received; the other instances are left alone, and Open starts an
// instance empty.
func TestCheckpointRestore(t *testing.T) {
	ctx := context.Background()
	s := New[result]()
	at := time.Date(2026, 12, 1, 10, 0, 0, 5, time.UTC)
	w0, _ := s.Open(ctx, 0, 2)
	w1, _ := s.Open(ctx, 1, 2)
	r0 := []result{{"a", at, []int64{1, 2}}, {"b", at.Add(time.Second), []int64{}}}
	if err := w0.Write(r0); err != nil {
		t.Fatal(err)
	}
	if err := w1.Write([]result{{"c", at, []int64{3}}}); err != nil {
		t.Fatal(err)
	}
	state, err := w0.(interface{ Checkpoint() ([]byte, error) }).Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	if err := w0.Write([]result{{"after", at, nil}}); err != nil { // not in the checkpoint
		t.Fatal(err)
	}
	if _, err := s.OpenAt(ctx, 0, 2, state); err != nil {
		t.Fatal(err)
	}
	want := append(r0, result{"c", at, []int64{3}})
	if got := s.Items(); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored: %+v, want %+v", got, want)
	}
	if _, err := s.Open(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 2 {
		t.Fatalf("after opening instance 1 afresh: %d records, want 2", s.Len())
	}
	if _, err := s.OpenAt(ctx, 0, 2, []byte{0x92, 0xff}); err == nil {
		t.Fatal("a malformed state was accepted")
	}
}

// Rescaled from 2 instances to 3, the records of both old instances reach
// new instance 0 in instance order and the others start empty; a malformed
// old state is refused.
func TestRescaleStates(t *testing.T) {
	ctx := context.Background()
	old := New[result]()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var states [][]byte
	var want []result
	for part, rs := range [][]result{{{"a", at, []int64{1}}}, {{"b", at, nil}, {"c", at, []int64{2, 3}}}} {
		w, _ := old.Open(ctx, part, 2)
		if err := w.Write(rs); err != nil {
			t.Fatal(err)
		}
		st, err := w.(interface{ Checkpoint() ([]byte, error) }).Checkpoint()
		if err != nil {
			t.Fatal(err)
		}
		states, want = append(states, st), append(want, rs...)
	}
	nw, err := New[result]().RescaleStates(append(states, nil), 3)
	if err != nil || len(nw) != 3 {
		t.Fatalf("rescale: %d states, %v", len(nw), err)
	}
	s := New[result]()
	for part, st := range nw {
		if _, err := s.OpenAt(ctx, part, 3, st); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Items(); !reflect.DeepEqual(got, want) {
		t.Fatalf("rescaled: %+v, want %+v", got, want)
	}
	if _, err := s.RescaleStates([][]byte{{0x92, 0xff}}, 2); err == nil {
		t.Fatal("a malformed state was accepted")
	}
}

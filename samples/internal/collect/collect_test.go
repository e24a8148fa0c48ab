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

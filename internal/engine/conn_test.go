package engine

import (
	"context"
	"github.com/sluicehq/sluice/connector"
	"io"
)

// numbers is a source of n records, the ith being i (the connectors of
// package operators are not reachable from here).
type numbers int64

func (n numbers) Open(_ context.Context, part, parts int, offset int64) (connector.Reader[int64], error) {
	return &numberReader{n: int64(n), next: offset}, nil
}

type numberReader struct{ n, next int64 }

func (r *numberReader) Read(buf []int64) (int, error) {
	if r.next >= r.n {
		return 0, io.EOF
	}
	k := 0
	for ; k < len(buf) && r.next < r.n; k++ {
		buf[k], r.next = r.next, r.next+1
	}
	return k, nil
}

func (r *numberReader) Offset() int64 { return r.next }
func (r *numberReader) Close() error  { return nil }

// discard is a sink that drops its records.
type discard struct{}

func (discard) Open(context.Context, int, int) (connector.Writer[int64], error) {
	return discard{}, nil
}
func (discard) Write([]int64) error { return nil }
func (discard) Close() error        { return nil }

// summer is a sink whose writer adds up its records and keeps none of
// them (stage.KeepsNoRecords): its batches' arrays go back to the source.
type summer struct{ sum *int64 }

func (s summer) Open(context.Context, int, int) (connector.Writer[int64], error) { return s, nil }
func (s summer) Write(rs []int64) error {
	for _, r := range rs {
		*s.sum += r
	}
	return nil
}
func (summer) Close() error    { return nil }
func (summer) KeepsNoRecords() {}

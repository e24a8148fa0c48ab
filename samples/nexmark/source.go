package nexmark

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/sluicehq/sluice/operators"
)

// Source is the live generator as a sluice source. Instance i of n reads
// the generators i, i+n, i+2n, ... of cfg's NumEventGenerators, round-robin
// (so n must not exceed NumEventGenerators). Its offset is the number of
// events it has read: everything derives from it, so the source rewinds
// exactly to a checkpoint.
func Source(cfg Config) operators.SourceConnector[Event] { return genSource{cfg} }

type genSource struct{ cfg Config }

func (s genSource) Open(_ context.Context, part, parts int, offset int64) (operators.Reader[Event], error) {
	if err := s.cfg.Validate(); err != nil {
		return nil, err
	}
	k := s.cfg.NumEventGenerators
	if parts > k {
		return nil, fmt.Errorf("nexmark: %d source instances but %d generators: at most one instance per generator (raise --generators)", parts, k)
	}
	st := &Stream{}
	for g := part; g < k; g += parts {
		gen, err := NewGenerator(s.cfg, g, k)
		if err != nil {
			return nil, err
		}
		st.gens = append(st.gens, gen)
		st.total += gen.Len()
	}
	if err := st.SetOffset(offset); err != nil {
		return nil, err
	}
	return &genReader{st: st}, nil
}

type genReader struct{ st *Stream }

func (r *genReader) Read(buf []Event) (int, error) {
	for i := range buf {
		ev, ok := r.st.Next()
		if !ok {
			return i, io.EOF
		}
		buf[i] = ev
	}
	return len(buf), nil
}

func (r *genReader) Offset() int64 { return r.st.Offset() }
func (r *genReader) Close() error  { return nil }

// FileSource reads an event file (the format of `sluice nexmark gen`).
// Instance i of n takes the events i, i+n, i+2n, ... of the file; its offset
// is the number of events it has taken. A malformed line fails the source
// with an error naming the line, unless skipMalformed is set: then it is
// skipped and counted (Skipped).
func FileSource(path string, skipMalformed bool) *EventFile {
	return &EventFile{path: path, skip: skipMalformed}
}

// EventFile is the source of FileSource.
type EventFile struct {
	path    string
	skip    bool
	skipped atomic.Int64
}

// Skipped returns the number of malformed lines skipped so far.
func (f *EventFile) Skipped() int64 { return f.skipped.Load() }

// Open implements operators.SourceConnector.
func (f *EventFile) Open(_ context.Context, part, parts int, offset int64) (operators.Reader[Event], error) {
	fh, err := os.Open(f.path)
	if err != nil {
		return nil, fmt.Errorf("nexmark event file: %w", err)
	}
	r := &fileReader{f: f, fh: fh, rd: NewReader(fh, ReaderOptions{SkipMalformed: f.skip}), part: part, parts: parts}
	for r.taken < offset { // replay: skip what the checkpoint covers
		if _, err := r.next(); err != nil {
			fh.Close()
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("nexmark event file %s: offset %d beyond its %d events for instance %d of %d", f.path, offset, r.taken, part, parts)
			}
			return nil, err
		}
	}
	return r, nil
}

type fileReader struct {
	f           *EventFile
	fh          *os.File
	rd          *Reader
	part, parts int
	seen        int64 // events of the file so far
	taken       int64 // events of this instance so far
	skipped     int64
}

// next returns the next event of this instance.
func (r *fileReader) next() (Event, error) {
	for {
		ev, err := r.rd.Next()
		if s := r.rd.Skipped(); s > r.skipped {
			if r.part == 0 { // every instance reads every line: count once
				r.f.skipped.Add(s - r.skipped)
			}
			r.skipped = s
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				err = fmt.Errorf("nexmark event file %s: %w", r.f.path, err)
			}
			return Event{}, err
		}
		mine := r.seen%int64(r.parts) == int64(r.part)
		r.seen++
		if mine {
			r.taken++
			return ev, nil
		}
	}
}

func (r *fileReader) Read(buf []Event) (int, error) {
	for i := range buf {
		ev, err := r.next()
		if err != nil {
			return i, err
		}
		buf[i] = ev
	}
	return len(buf), nil
}

func (r *fileReader) Offset() int64 { return r.taken }
func (r *fileReader) Close() error  { return r.fh.Close() }

package operators

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/sluicehq/sluice/internal/stage"
)

// ErrFileNotEmpty: a job with checkpoints started afresh (no checkpoint to
// restore) on an output file that exists and is not empty, and was not
// given FileOverwrite: the file is left as it is (it may be a previous
// run's output).
var ErrFileNotEmpty = errors.New("operators: the output file exists and is not empty")

// FileOption configures a File sink.
type FileOption func(*fileOptions)

type fileOptions struct {
	overwrite bool
	// synced, when set, is called after every fsync of a file with its
	// size then (tests simulate a power loss with it).
	synced func(path string, size int64)
}

// FileOverwrite lets a job with checkpoints that starts afresh truncate an
// existing, non-empty output file. Without it that start fails with
// ErrFileNotEmpty, so that a previous run's output is not destroyed by
// accident. Jobs without checkpoints always truncate.
func FileOverwrite() FileOption { return func(o *fileOptions) { o.overwrite = true } }

type fileSink[T any] struct {
	path   string
	format Format[T]
	opts   fileOptions
}

// File writes one line per record to the file at path, created with mode
// 0600. With parallelism P > 1, instance i writes path-i.
//
// With checkpoints on it is exactly-once: at every checkpoint it flushes
// and fsyncs the file (and, once, the folder of a file it created) before
// its position in the file is recorded, and a job restored from a
// checkpoint first cuts the file back to that position, so that the
// replayed records are written once, after a crash or a power loss alike.
// A job with checkpoints that starts afresh refuses to truncate an existing
// non-empty file (ErrFileNotEmpty) unless given FileOverwrite. Without
// checkpoints it truncates the file and is at-least-once.
func File[T any](path string, format Format[T], opts ...FileOption) SinkConnector[T] {
	s := fileSink[T]{path: path, format: formatOrDefault(format)}
	for _, o := range opts {
		o(&s.opts)
	}
	return s
}

func (s fileSink[T]) Open(ctx context.Context, part, parts int) (Writer[T], error) {
	path := s.partPath(part, parts)
	start, _ := stage.SinkStartOf(ctx)
	created := true
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, fs.ErrExist) {
		created = false
		if start.Fresh && start.Checkpoints && !s.opts.overwrite {
			st, err := os.Stat(path)
			if err != nil {
				return nil, fmt.Errorf("file %s: %w", path, err)
			}
			if st.Size() > 0 {
				return nil, fmt.Errorf("file %s (%d bytes): %w; remove it or give the sink FileOverwrite()", path, st.Size(), ErrFileNotEmpty)
			}
		}
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0o600)
	}
	if err != nil {
		return nil, err
	}
	return &fileWriter[T]{f: f, w: bufio.NewWriterSize(f, 64<<10), format: s.format, syncDir: created, synced: s.opts.synced}, nil
}

func (s fileSink[T]) partPath(part, parts int) string {
	if parts > 1 {
		return s.path + "-" + strconv.Itoa(part)
	}
	return s.path
}

// OpenAt implements RestorableSink: it reopens the file and cuts it back to
// the position recorded in a checkpoint.
func (s fileSink[T]) OpenAt(_ context.Context, part, parts int, state []byte) (Writer[T], error) {
	path := s.partPath(part, parts)
	if len(state) != 8 {
		return nil, fmt.Errorf("file %s: checkpointed position of %d bytes, want 8", path, len(state))
	}
	pos := int64(binary.BigEndian.Uint64(state))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && st.Size() < pos {
		err = fmt.Errorf("file %s is %d bytes, shorter than its checkpointed position %d: it was changed outside the job", path, st.Size(), pos)
	}
	if err == nil {
		err = f.Truncate(pos)
	}
	if err == nil {
		_, err = f.Seek(pos, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &fileWriter[T]{f: f, w: bufio.NewWriterSize(f, 64<<10), format: s.format, pos: pos, synced: s.opts.synced}, nil
}

type fileWriter[T any] struct {
	f       *os.File
	w       *bufio.Writer
	format  Format[T]
	pos     int64 // bytes written, counting the buffer
	syncDir bool  // the file was created: its folder is not yet fsynced
	synced  func(path string, size int64)
}

func (w *fileWriter[T]) Write(rs []T) error {
	for _, r := range rs {
		n, _ := w.w.WriteString(w.format(r))
		if err := w.w.WriteByte('\n'); err != nil {
			return fmt.Errorf("file %s: %w", w.f.Name(), err)
		}
		w.pos += int64(n) + 1
	}
	return nil
}

// Checkpoint implements Checkpointer: it flushes, makes the file durable
// and returns the position.
func (w *fileWriter[T]) Checkpoint() ([]byte, error) {
	if err := w.sync(); err != nil {
		return nil, err
	}
	return binary.BigEndian.AppendUint64(nil, uint64(w.pos)), nil
}

// sync flushes the buffer and fsyncs the file, and its folder once after
// creating it (else a power loss could lose the file's name).
func (w *fileWriter[T]) sync() error {
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("file %s: %w", w.f.Name(), err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("file %s: fsync: %w", w.f.Name(), err)
	}
	if w.syncDir {
		if err := syncDir(filepath.Dir(w.f.Name())); err != nil {
			return fmt.Errorf("file %s: %w", w.f.Name(), err)
		}
		w.syncDir = false
	}
	if w.synced != nil {
		w.synced(w.f.Name(), w.pos)
	}
	return nil
}

// syncDir fsyncs a folder, making the names in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync folder %s: %w", dir, err)
	}
	return nil
}

// Close flushes and fsyncs the file (the output of a finished job is
// durable) and closes it.
func (w *fileWriter[T]) Close() error {
	err := w.sync()
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("file %s: %w", w.f.Name(), cerr)
	}
	return err
}

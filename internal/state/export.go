package state

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// A savepoint must hold everything a job needs to start from it, but a
// disk-state checkpoint is a directory under the operator's state
// directory, which retention deletes once newer checkpoints exist. So a
// savepoint carries copies: ExportDisk copies a checkpoint's directory into
// the savepoint (hard links for its sstables, which never change, copies
// for the rest) and returns a handle of version 2 naming the copy by its
// place inside the savepoint; ResolveDisk, when the savepoint is opened,
// makes that place absolute, so a savepoint can be moved as a whole. A
// restore links the copy's sstables into a new working database: the
// savepoint's files are only read.

// diskHandle decodes b as a disk-state checkpoint handle; ok is false for
// any other state (the memory backend's, a changelog's).
func diskHandle(b []byte) (h handle, ok bool) {
	if len(b) == 0 || len(b) > 4096 {
		return h, false
	}
	if err := msgpacksafe.Decode(b, &h, msgpacksafe.Limits{Source: "disk state handle", Factor: 4}); err != nil {
		return h, false
	}
	return h, (h.V == 1 || h.V == 2) && listChkOne(h.Dir) != nil && h.CRC != 0
}

// IsDiskHandle reports whether an operator instance's checkpointed state
// is a disk-state checkpoint handle (version 1: under the operator's
// state directory).
func IsDiskHandle(b []byte) bool {
	h, ok := diskHandle(b)
	return ok && h.V == 1
}

// ExportDisk copies the checkpoint that handle b names under opDir (the
// operator's state directory, Spec.Dir/<job>/<operator>) into
// filepath.Join(spDir, rel), which must not exist, after checking it
// against its manifest, and returns the copy's handle.
func ExportDisk(b []byte, opDir, spDir, rel string) ([]byte, error) {
	h, ok := diskHandle(b)
	if !ok || h.V != 1 {
		return nil, fmt.Errorf("disk state export: not a disk-state checkpoint handle")
	}
	if !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("disk state export: %q is not a path inside the savepoint", rel)
	}
	src, err := h.location(opDir)
	if err != nil {
		return nil, err
	}
	if err := verifyDir(src, h.CRC); err != nil {
		return nil, err
	}
	dst := filepath.Join(spDir, rel)
	if _, err := os.Stat(dst); err == nil {
		return nil, &Error{Path: dst, Err: fmt.Errorf("already exists")}
	}
	if err := linkTree(src, dst); err != nil {
		return nil, err
	}
	// linkTree leaves out the manifest (a working database has none).
	if err := copyFile(filepath.Join(src, manifestName), filepath.Join(dst, manifestName)); err != nil {
		return nil, &Error{Path: dst, Err: err}
	}
	if err := syncTree(dst); err != nil {
		return nil, err
	}
	if err := verifyDir(dst, h.CRC); err != nil {
		return nil, err
	}
	return msgpack.Marshal(&handle{V: 2, Dir: h.Dir, CRC: h.CRC, TTL: h.TTL, Rel: rel})
}

// ResolveDisk returns a savepoint's disk-state handle (from ExportDisk)
// resolved against the savepoint's directory spDir, and true; any other
// state is returned as it is, with false.
func ResolveDisk(b []byte, spDir string) ([]byte, bool, error) {
	h, ok := diskHandle(b)
	if !ok || h.V != 2 {
		return b, false, nil
	}
	if !filepath.IsLocal(h.Rel) {
		return nil, true, fmt.Errorf("disk state handle: directory %q is not inside the savepoint", h.Rel)
	}
	abs, err := filepath.Abs(filepath.Join(spDir, h.Rel))
	if err != nil {
		return nil, true, err
	}
	h.Abs = abs
	out, err := msgpack.Marshal(&h)
	return out, true, err
}

// VerifyDisk checks the checkpoint copy a resolved handle names against
// its manifest: every file there, of its size and checksum.
func VerifyDisk(b []byte) error {
	h, ok := diskHandle(b)
	if !ok {
		return fmt.Errorf("disk state: not a disk-state checkpoint handle")
	}
	dir, err := h.location("")
	if err != nil {
		return err
	}
	return verifyDir(dir, h.CRC)
}

// syncTree fsyncs every file of dir, then dir.
func syncTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return &Error{Path: dir, Err: err}
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		f, err := os.Open(p)
		if err != nil {
			return &Error{Path: p, Err: err}
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return &Error{Path: p, Err: err}
		}
	}
	syncDir(dir)
	return nil
}

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
	if len(b) == 0 || len(b) > 1<<20 {
		return h, false
	}
	if err := msgpacksafe.Decode(b, &h, msgpacksafe.Limits{Source: "disk state handle", Factor: 4}); err != nil {
		return h, false
	}
	return h, h.V >= 1 && h.V <= 4 && (h.V <= 2) == (len(h.Deltas) == 0) && listChkOne(h.Dir) != nil && h.CRC != 0
}

// IsDiskHandle reports whether an operator instance's checkpointed state
// is a disk-state checkpoint handle (version 1, or 3 with deltas: under
// the operator's state directory).
func IsDiskHandle(b []byte) bool {
	h, ok := diskHandle(b)
	return ok && (h.V == 1 || h.V == 3)
}

// ExportDisk copies the checkpoint that handle b names under opDir (the
// operator's state directory, Spec.Dir/<job>/<operator>) into
// filepath.Join(spDir, rel), which must not exist, after checking it
// against its manifest, and returns the copy's handle. A checkpoint with
// deltas (version 3) has each delta's directory copied beside it, to
// rel+"+"+its name, and a handle of version 4.
func ExportDisk(b []byte, opDir, spDir, rel string) ([]byte, error) {
	h, ok := diskHandle(b)
	if !ok || (h.V != 1 && h.V != 3) {
		return nil, fmt.Errorf("disk state export: not a disk-state checkpoint handle")
	}
	if !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("disk state export: %q is not a path inside the savepoint", rel)
	}
	src, _, err := chainOf(&h, opDir)
	if err != nil {
		return nil, err
	}
	if err := exportDir(src, filepath.Join(spDir, rel), h.CRC); err != nil {
		return nil, err
	}
	out := handle{V: 2, Dir: h.Dir, CRC: h.CRC, TTL: h.TTL, Rel: rel}
	for _, l := range h.Deltas {
		dsrc, err := h.deltaLocation(opDir, l)
		if err != nil {
			return nil, err
		}
		drel := rel + "+" + l.Dir
		if err := exportDir(dsrc, filepath.Join(spDir, drel), l.CRC); err != nil {
			return nil, err
		}
		out.V = 4
		out.Deltas = append(out.Deltas, link{Dir: l.Dir, CRC: l.CRC, Rel: drel})
	}
	return msgpack.Marshal(&out)
}

// exportDir copies checkpoint directory src (a base or a delta) to dst,
// which must not exist, and checks the copy against its manifest.
func exportDir(src, dst string, crc uint32) error {
	if _, err := os.Stat(dst); err == nil {
		return &Error{Path: dst, Err: fmt.Errorf("already exists")}
	}
	if err := linkTree(src, dst); err != nil {
		return err
	}
	// linkTree leaves out the manifest (a working database has none).
	if err := copyFile(filepath.Join(src, manifestName), filepath.Join(dst, manifestName)); err != nil {
		return &Error{Path: dst, Err: err}
	}
	if err := syncTree(dst); err != nil {
		return err
	}
	return verifyDir(dst, crc)
}

// ResolveDisk returns a savepoint's disk-state handle (from ExportDisk)
// resolved against the savepoint's directory spDir, and true; any other
// state is returned as it is, with false.
func ResolveDisk(b []byte, spDir string) ([]byte, bool, error) {
	h, ok := diskHandle(b)
	if !ok || (h.V != 2 && h.V != 4) {
		return b, false, nil
	}
	resolve := func(rel string) (string, error) {
		if !filepath.IsLocal(rel) {
			return "", fmt.Errorf("disk state handle: directory %q is not inside the savepoint", rel)
		}
		return filepath.Abs(filepath.Join(spDir, rel))
	}
	var err error
	if h.Abs, err = resolve(h.Rel); err != nil {
		return nil, true, err
	}
	for i := range h.Deltas {
		if h.Deltas[i].Abs, err = resolve(h.Deltas[i].Rel); err != nil {
			return nil, true, err
		}
	}
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
	if h.V != 2 && h.V != 4 {
		return fmt.Errorf("disk state: handle of version %d, not a savepoint's copy", h.V)
	}
	_, _, err := chainOf(&h, "")
	return err
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

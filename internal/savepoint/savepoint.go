// Package savepoint is the on-disk format of sluice's savepoints: a
// checkpoint of a job written to a directory of its own, self-contained and
// versioned, that a job (of the same plan, at any parallelism) starts from.
//
// # Layout
//
//	DIR/MANIFEST           msgpack Manifest: kind, format version, id, job, plan, offsets, files
//	DIR/state/0000.bin     msgpack StateFile: one operator's state, by instance and key-group range
//	DIR/state/0001.bin     ...
//
// The manifest is written last (to MANIFEST.tmp, fsync'd, renamed), so a
// directory without one is an incomplete savepoint. It lists every state
// file with its size and SHA-256; Open checks both before it decodes a
// byte of a file, and decodes through internal/msgpacksafe.
//
// # Versions
//
// Manifest.Version is the format version (Version). Open reads every
// version up to Version and refuses a newer one with ErrNewer, naming the
// file, before it looks at anything else in it. A manifest of another kind
// (Manifest.Kind is not "sluice-savepoint") is ErrForeign; a file that
// does not decode, a checksum or size that does not match, is ErrCorrupt.
// Open only reads: it never modifies, creates or locks a file.
//
// # Plans
//
// Every checkpoint the engine takes carries a Plan (under the state key
// PlanKey): the plan's fingerprint, each operator's parallelism, the head of
// its chain and whether its state is grouped by key, and the savepoint its
// lineage started from. The rescaling of a restored checkpoint onto another
// parallelism reads it.
package savepoint

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
	"github.com/sluicehq/sluice/internal/stage"
	"github.com/sluicehq/sluice/internal/state"
	"github.com/sluicehq/sluice/persistence"
)

// Version is the savepoint format this build writes, and the newest it reads.
const Version = 1

// The kinds of the format's files, their magic.
const (
	ManifestKind = "sluice-savepoint"
	StateKind    = "sluice-savepoint-state"
)

// ManifestName is the manifest's file name in a savepoint's directory.
const ManifestName = "MANIFEST"

// PlanKey is the key of the Plan in a checkpoint's States. Instance keys
// are "operator/instance", so it cannot collide with one.
const PlanKey = "#plan"

// Errors, for errors.Is.
var (
	ErrForeign = errors.New("not a sluice savepoint")
	ErrNewer   = errors.New("written by a newer sluice (savepoint format version too new)")
	ErrCorrupt = errors.New("damaged savepoint")
)

// Limits of what Open reads.
const (
	maxManifest  = 64 << 20 // bytes
	maxStateFile = 1 << 30
	maxOperators = 1 << 16
)

// Plan is what a checkpoint records of the plan that took it.
type Plan struct {
	Version     int        `msgpack:"v"`
	Fingerprint string     `msgpack:"fp"`
	Origin      string     `msgpack:"origin,omitempty"` // the id of the savepoint the job's lineage started from
	Operators   []Operator `msgpack:"ops"`
}

// Operator is one operator of a Plan.
type Operator struct {
	Name        string `msgpack:"name"`
	Kind        string `msgpack:"kind"`
	Parallelism int    `msgpack:"par"`
	// Head is the first operator of its fused chain: the name that marks
	// the chain's finished instances ("head/i#finished").
	Head string `msgpack:"head"`
	// KeyGrouped: its state is per key, redistributed by key group when
	// the parallelism changes.
	KeyGrouped bool `msgpack:"kg,omitempty"`
	Source     bool `msgpack:"src,omitempty"`
}

// Op returns the operator named name, and false when there is none.
func (p *Plan) Op(name string) (Operator, bool) {
	for _, o := range p.Operators {
		if o.Name == name {
			return o, true
		}
	}
	return Operator{}, false
}

// EncodePlan encodes p for a checkpoint's States[PlanKey].
func EncodePlan(p Plan) []byte {
	b, err := msgpack.Marshal(&p)
	if err != nil {
		panic(err) // strings, ints and bools always encode
	}
	return b
}

// DecodePlan decodes a checkpoint's plan (bytes from a store: hostile).
func DecodePlan(b []byte, source string) (Plan, error) {
	p, err := msgpacksafe.DecodeAs[Plan](b, msgpacksafe.Limits{Source: source})
	if err != nil {
		return Plan{}, fmt.Errorf("%s: plan: %w: %w", source, ErrCorrupt, err)
	}
	if err := p.check(); err != nil {
		return Plan{}, fmt.Errorf("%s: plan: %w: %w", source, ErrCorrupt, err)
	}
	return p, nil
}

// PlanOf returns the plan a checkpoint carries, and false for a checkpoint
// taken before plans were recorded.
func PlanOf(cp *persistence.Checkpoint, source string) (Plan, bool, error) {
	b, ok := cp.States[PlanKey]
	if !ok {
		return Plan{}, false, nil
	}
	p, err := DecodePlan(b, source)
	return p, err == nil, err
}

func (p *Plan) check() error {
	if p.Version < 1 || p.Version > Version {
		return fmt.Errorf("plan version %d (this sluice reads 1 to %d)", p.Version, Version)
	}
	if len(p.Operators) > maxOperators {
		return fmt.Errorf("%d operators", len(p.Operators))
	}
	seen := map[string]bool{}
	for _, o := range p.Operators {
		if o.Name == "" || seen[o.Name] {
			return fmt.Errorf("operator %q: empty or twice", o.Name)
		}
		seen[o.Name] = true
		if o.Parallelism < 1 || o.Parallelism > 1<<16 {
			return fmt.Errorf("operator %q: parallelism %d", o.Name, o.Parallelism)
		}
	}
	return nil
}

// Manifest is a savepoint's table of contents.
type Manifest struct {
	Kind       string           `msgpack:"kind"`    // ManifestKind
	Version    int              `msgpack:"version"` // the format version
	ID         string           `msgpack:"id"`      // random, unique to this savepoint
	Job        string           `msgpack:"job"`
	Checkpoint uint64           `msgpack:"checkpoint"` // the id of the checkpoint it holds
	Taken      int64            `msgpack:"taken"`      // Unix ns, the job's clock
	Plan       Plan             `msgpack:"plan"`
	Offsets    map[string]int64 `msgpack:"offsets"` // source partitions and finished instances, as in persistence.Checkpoint
	Files      []File           `msgpack:"files"`
}

// File is one state file of a savepoint.
type File struct {
	Name     string `msgpack:"name"` // relative to the savepoint's directory: state/NNNN.bin
	Operator string `msgpack:"op"`
	Size     int64  `msgpack:"size"`
	SHA256   string `msgpack:"sha256"` // hex
}

// StateFile is the state of one operator: each instance's, with the
// key-group range it owned.
type StateFile struct {
	Kind        string          `msgpack:"kind"` // StateKind
	Version     int             `msgpack:"version"`
	Operator    string          `msgpack:"op"`
	Parallelism int             `msgpack:"par"`
	Instances   []InstanceState `msgpack:"instances"`
}

// InstanceState is one instance's state. A key-grouped operator's instance
// i of p holds the keys of groups [KeyGroups[0], KeyGroups[1]).
type InstanceState struct {
	Instance  int    `msgpack:"i"`
	KeyGroups [2]int `msgpack:"kg"`
	State     []byte `msgpack:"state"`
}

// Savepoint is an open savepoint: its manifest and the states of its
// operators' instances ("operator/instance").
type Savepoint struct {
	Dir      string
	Manifest Manifest
	States   map[string][]byte
}

// Taken is when the savepoint's checkpoint was taken.
func (s *Savepoint) Taken() time.Time { return time.Unix(0, s.Manifest.Taken) }

// Checkpoint is the savepoint as a checkpoint to restore: its states, its
// plan (with the savepoint as its lineage's origin) and its offsets.
func (s *Savepoint) Checkpoint() persistence.Checkpoint {
	states := maps.Clone(s.States)
	if states == nil {
		states = map[string][]byte{}
	}
	p := s.Manifest.Plan
	p.Origin = s.Manifest.ID
	states[PlanKey] = EncodePlan(p)
	return persistence.Checkpoint{ID: s.Manifest.Checkpoint, Time: s.Taken(), States: states, Offsets: maps.Clone(s.Manifest.Offsets)}
}

// Write writes checkpoint cp of job as a savepoint in dir, which must not
// exist or be empty. cp must carry its plan (PlanKey).
func Write(dir, job string, cp persistence.Checkpoint) (*Savepoint, error) {
	return WriteWith(dir, job, cp, nil)
}

// WriteWith is Write with prepare, when not nil, called once dir exists
// and before the state files and the manifest are written: it may put
// files of its own in dir (under "disk/": a disk-state checkpoint's copy,
// state.ExportDisk) and replace values of states (a copy of cp's), which
// are then the savepoint's. The manifest is written last: a savepoint
// whose prepare or writing failed has none, and Open refuses it.
func WriteWith(dir, job string, cp persistence.Checkpoint, prepare func(dir string, states map[string][]byte) error) (*Savepoint, error) {
	where := "savepoint " + dir
	if len(cp.Channels) > 0 {
		// A savepoint has no place for in-flight records: it must not lose
		// them, nor be restored without them.
		return nil, fmt.Errorf("%s: checkpoint %d is unaligned (it holds the in-flight records of %d input channels), and a savepoint must be aligned: take it from a job without UnalignedCheckpoints, or one whose AlignmentTimeout let the checkpoint align", where, cp.ID, len(cp.Channels))
	}
	plan, ok, err := PlanOf(&cp, where)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%s: checkpoint %d records no plan (taken by an older sluice): cannot be a savepoint", where, cp.ID)
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("%s: the directory is not empty", where)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o755); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if prepare != nil {
		cp.States = maps.Clone(cp.States)
		if err := prepare(dir, cp.States); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	plan.Origin = "" // the savepoint starts lineages of its own
	sp := &Savepoint{Dir: dir, States: map[string][]byte{}, Manifest: Manifest{Kind: ManifestKind, Version: Version, ID: rand.Text(),
		Job: job, Checkpoint: cp.ID, Taken: cp.Time.UnixNano(), Plan: plan, Offsets: maps.Clone(cp.Offsets)}}
	if sp.Manifest.Offsets == nil {
		sp.Manifest.Offsets = map[string]int64{}
	}
	byOp := map[string][]InstanceState{}
	for k, v := range cp.States {
		if k == PlanKey {
			continue
		}
		op, inst, ok := splitKey(k)
		o, known := plan.Op(op)
		if !ok || !known || inst >= o.Parallelism {
			return nil, fmt.Errorf("%s: checkpoint %d: state %q belongs to no instance of the plan", where, cp.ID, k)
		}
		lo, hi := 0, 0
		if o.KeyGrouped {
			lo, hi = stage.KeyGroupRange(inst, o.Parallelism)
		}
		byOp[op] = append(byOp[op], InstanceState{Instance: inst, KeyGroups: [2]int{lo, hi}, State: v})
		sp.States[k] = v
	}
	for n, op := range slices.Sorted(maps.Keys(byOp)) {
		insts := byOp[op]
		slices.SortFunc(insts, func(a, b InstanceState) int { return a.Instance - b.Instance })
		o, _ := plan.Op(op)
		b, err := msgpack.Marshal(&StateFile{Kind: StateKind, Version: Version, Operator: op, Parallelism: o.Parallelism, Instances: insts})
		if err != nil {
			return nil, fmt.Errorf("%s: encode the state of %q: %w", where, op, err)
		}
		name := fmt.Sprintf("state/%04d.bin", n)
		if err := writeSynced(filepath.Join(dir, name), b); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		sum := sha256.Sum256(b)
		sp.Manifest.Files = append(sp.Manifest.Files, File{Name: name, Operator: op, Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])})
	}
	mb, err := msgpack.Marshal(&sp.Manifest)
	if err != nil {
		return nil, fmt.Errorf("%s: encode the manifest: %w", where, err)
	}
	tmp := filepath.Join(dir, ManifestName+".tmp")
	if err := writeSynced(tmp, mb); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, ManifestName)); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	for _, d := range []string{filepath.Join(dir, "state"), dir} {
		if err := syncDir(d); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	for k, v := range sp.States {
		st, _, err := state.ResolveAny(v, dir)
		if err != nil {
			return nil, fmt.Errorf("%s: state %q: %w", where, k, err)
		}
		sp.States[k] = st
	}
	return sp, nil
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// splitKey splits "operator/instance".
func splitKey(k string) (op string, inst int, ok bool) {
	i := strings.LastIndexByte(k, '/')
	if i <= 0 {
		return "", 0, false
	}
	if _, err := fmt.Sscanf(k[i+1:], "%d", &inst); err != nil || inst < 0 || fmt.Sprint(inst) != k[i+1:] {
		return "", 0, false
	}
	return k[:i], inst, true
}

// Open reads the savepoint in dir and checks it whole: the manifest's kind
// and version, every file's size and checksum, every state file's content,
// every copy of a disk-state checkpoint against its own manifest (its
// handles resolved against dir, so the savepoint may have moved). It only
// reads.
func Open(dir string) (*Savepoint, error) {
	mpath := filepath.Join(dir, ManifestName)
	mb, err := readBounded(mpath, maxManifest)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Stat(dir); serr != nil {
				return nil, fmt.Errorf("savepoint %s: %w", dir, serr)
			}
			return nil, fmt.Errorf("savepoint %s: no %s: %w (or an incomplete one)", dir, ManifestName, ErrForeign)
		}
		return nil, fmt.Errorf("savepoint %s: %w", mpath, err)
	}
	m, err := DecodeManifest(mb, mpath)
	if err != nil {
		return nil, err
	}
	sp := &Savepoint{Dir: dir, Manifest: m, States: map[string][]byte{}}
	for _, f := range m.Files {
		path := filepath.Join(dir, filepath.FromSlash(f.Name))
		b, err := readBounded(path, maxStateFile)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("savepoint %s: missing (listed in %s): %w", path, ManifestName, ErrCorrupt)
			}
			return nil, fmt.Errorf("savepoint %s: %w", path, err)
		}
		if int64(len(b)) != f.Size {
			return nil, fmt.Errorf("savepoint %s: %d bytes, the manifest says %d (truncated or overwritten): %w", path, len(b), f.Size, ErrCorrupt)
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != f.SHA256 {
			return nil, fmt.Errorf("savepoint %s: SHA-256 %x, the manifest says %s: %w", path, sum, f.SHA256, ErrCorrupt)
		}
		sf, err := DecodeStateFile(b, path)
		if err != nil {
			return nil, err
		}
		o, _ := m.Plan.Op(f.Operator)
		if sf.Operator != f.Operator || sf.Parallelism != o.Parallelism {
			return nil, fmt.Errorf("savepoint %s: holds operator %q at parallelism %d, the manifest says %q at %d: %w",
				path, sf.Operator, sf.Parallelism, f.Operator, o.Parallelism, ErrCorrupt)
		}
		for _, is := range sf.Instances {
			lo, hi := 0, 0
			if o.KeyGrouped {
				lo, hi = stage.KeyGroupRange(is.Instance, o.Parallelism)
			}
			if is.KeyGroups != [2]int{lo, hi} {
				return nil, fmt.Errorf("savepoint %s: instance %d of %d holds key groups [%d, %d), not [%d, %d): %w",
					path, is.Instance, o.Parallelism, is.KeyGroups[0], is.KeyGroups[1], lo, hi, ErrCorrupt)
			}
			st, disk, err := state.ResolveAny(is.State, dir)
			if err == nil && disk {
				err = state.VerifyDisk(state.TableOf(st))
			}
			if err != nil {
				return nil, fmt.Errorf("savepoint %s: instance %d of %q: %w: %w", path, is.Instance, f.Operator, ErrCorrupt, err)
			}
			sp.States[f.Operator+"/"+fmt.Sprint(is.Instance)] = st
		}
	}
	return sp, nil
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file: %w", ErrCorrupt)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%d bytes, more than a savepoint's file may hold (%d): %w", st.Size(), limit, ErrCorrupt)
	}
	var buf bytes.Buffer
	buf.Grow(int(st.Size()))
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// header is the part of a manifest that every version has.
type header struct {
	Kind    string `msgpack:"kind"`
	Version int    `msgpack:"version"`
}

// DecodeManifest decodes and checks a manifest read from source (a path).
func DecodeManifest(b []byte, source string) (Manifest, error) {
	lim := msgpacksafe.Limits{Source: source, MaxInput: maxManifest}
	h, err := msgpacksafe.DecodeAs[header](b, lim)
	if err != nil {
		if bytes.Contains(b, []byte(ManifestKind)) { // ours, cut short or damaged
			return Manifest{}, fmt.Errorf("savepoint %s: %w (truncated or overwritten): %w", source, ErrCorrupt, err)
		}
		return Manifest{}, fmt.Errorf("savepoint %s: %w: %w", source, ErrForeign, err)
	}
	if h.Kind != ManifestKind {
		return Manifest{}, fmt.Errorf("savepoint %s: kind %q, not %q: %w", source, h.Kind, ManifestKind, ErrForeign)
	}
	if h.Version > Version {
		return Manifest{}, fmt.Errorf("savepoint %s: format version %d, this sluice reads up to %d: %w", source, h.Version, Version, ErrNewer)
	}
	if h.Version < 1 {
		return Manifest{}, fmt.Errorf("savepoint %s: format version %d: %w", source, h.Version, ErrCorrupt)
	}
	m, err := msgpacksafe.DecodeAs[Manifest](b, lim)
	if err != nil {
		return Manifest{}, fmt.Errorf("savepoint %s: %w: %w", source, ErrCorrupt, err)
	}
	if err := m.check(); err != nil {
		return Manifest{}, fmt.Errorf("savepoint %s: %w: %w", source, ErrCorrupt, err)
	}
	return m, nil
}

func (m *Manifest) check() error {
	if m.ID == "" || m.Job == "" {
		return errors.New("no id or no job")
	}
	if err := m.Plan.check(); err != nil {
		return err
	}
	names := map[string]bool{}
	ops := map[string]bool{}
	for _, f := range m.Files {
		if !validFileName(f.Name) || names[f.Name] {
			return fmt.Errorf("file %q: not a state file's name, or listed twice", f.Name)
		}
		names[f.Name] = true
		if _, ok := m.Plan.Op(f.Operator); !ok || ops[f.Operator] {
			return fmt.Errorf("file %q: operator %q is not in the plan, or has two files", f.Name, f.Operator)
		}
		ops[f.Operator] = true
		if f.Size < 0 || f.Size > maxStateFile || len(f.SHA256) != 64 {
			return fmt.Errorf("file %q: size %d or checksum %q", f.Name, f.Size, f.SHA256)
		}
	}
	return nil
}

// validFileName: state/NNNN.bin or state/NNNNN.bin and nothing else (no path leaves the
// savepoint's directory).
func validFileName(n string) bool {
	if len(n) < len("state/0000.bin") || len(n) > len("state/00000.bin") || !strings.HasPrefix(n, "state/") || !strings.HasSuffix(n, ".bin") {
		return false
	}
	for _, c := range n[len("state/") : len(n)-len(".bin")] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// DecodeStateFile decodes and checks a state file read from source.
func DecodeStateFile(b []byte, source string) (StateFile, error) {
	sf, err := msgpacksafe.DecodeAs[StateFile](b, msgpacksafe.Limits{Source: source, MaxInput: maxStateFile})
	if err != nil {
		return StateFile{}, fmt.Errorf("savepoint %s: %w: %w", source, ErrCorrupt, err)
	}
	if sf.Kind != StateKind {
		return StateFile{}, fmt.Errorf("savepoint %s: kind %q, not %q: %w", source, sf.Kind, StateKind, ErrCorrupt)
	}
	if sf.Version > Version {
		return StateFile{}, fmt.Errorf("savepoint %s: format version %d, this sluice reads up to %d: %w", source, sf.Version, Version, ErrNewer)
	}
	if sf.Version < 1 {
		return StateFile{}, fmt.Errorf("savepoint %s: format version %d: %w", source, sf.Version, ErrCorrupt)
	}
	seen := map[int]bool{}
	for _, is := range sf.Instances {
		if is.Instance < 0 || is.Instance >= sf.Parallelism || seen[is.Instance] {
			return StateFile{}, fmt.Errorf("savepoint %s: instance %d of parallelism %d, or twice: %w", source, is.Instance, sf.Parallelism, ErrCorrupt)
		}
		seen[is.Instance] = true
	}
	return sf, nil
}

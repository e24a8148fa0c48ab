package replication

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/supervision"
)

// Phase is where a replica stands, as seen by the leader.
type Phase uint8

const (
	// Syncing: the leader is establishing where the replica's log matches
	// its own and sends it the missing suffix, one append at a time.
	Syncing Phase = iota
	// InSync: the replica acknowledged every entry sent to it in time; new
	// entries are sent to it as they are appended (pipelined).
	InSync
	// Lagging: an acknowledgement is overdue (AckTimeout); the leader has
	// sent the suffix after the replica's acknowledged index again.
	Lagging
	// Retrying: attempts failed (no answer, or the replica is unreachable);
	// the leader waits Delay (from the Backoff) before the next.
	Retrying
	// Failed: MaxAttempts attempts in a row failed. The replica no longer
	// counts as live for commits; Reachable (its node is back) syncs it again.
	Failed
)

func (p Phase) String() string {
	switch p {
	case Syncing:
		return "syncing"
	case InSync:
		return "in-sync"
	case Lagging:
		return "lagging"
	case Retrying:
		return "retrying"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("Phase(%d)", uint8(p))
}

// Role is what the leader is doing.
type Role uint8

const (
	// Leading: the leader replicates its log.
	Leading Role = iota
	// SteppedDown: a replica answered with a newer epoch; every event is
	// ignored from now on.
	SteppedDown
)

func (r Role) String() string {
	if r == SteppedDown {
		return "stepped-down"
	}
	return "leading"
}

// Defaults of Config's zero fields.
const (
	DefaultAckTimeout  = time.Second
	DefaultMaxAttempts = 5
)

// ErrInvalidConfig is wrapped by Config.Validate's errors.
var ErrInvalidConfig = errors.New("replication: invalid configuration")

// Limit bounds every epoch, index, commit and sequence number: values at
// or above it (2^63) are refused wherever they come from (an append, an
// answer, a log), so that no arithmetic on them wraps.
const Limit uint64 = 1 << 63

// ErrOutOfRange: a value is at or above Limit, or an append would take a
// log's index there.
var ErrOutOfRange = errors.New("replication: epoch or index out of range")

// InRange says whether every value is below Limit.
func InRange(vs ...uint64) bool {
	for _, v := range vs {
		if v >= Limit {
			return false
		}
	}
	return true
}

// Config is the replication policy of one log.
type Config struct {
	// Replicas names the replicas (not the leader), in the order actions
	// are emitted.
	Replicas []string
	// Acks is the number of replicas that must hold an entry for it to be
	// committed: 0 < Acks <= len(Replicas). Zero means len(Replicas) (every
	// replica). A log without replicas commits every entry at once.
	Acks int
	// AckTimeout is how long an append may go unanswered before the
	// replica counts as lagging (in sync) or the attempt as failed
	// (syncing, lagging). Default DefaultAckTimeout.
	AckTimeout time.Duration
	// Backoff gives the wait after failed attempt n before the next.
	Backoff supervision.Backoff
	// MaxAttempts is the retry budget: that many failed attempts in a row
	// and the replica is Failed. Default DefaultMaxAttempts.
	MaxAttempts int
	// MaxBatch bounds the entries of one append; 0 means no bound.
	MaxBatch int
}

// Validate reports a configuration that Step would not follow faithfully.
func (c Config) Validate() error {
	seen := map[string]bool{}
	for _, r := range c.Replicas {
		if r == "" {
			return fmt.Errorf("%w: empty replica name", ErrInvalidConfig)
		}
		if seen[r] {
			return fmt.Errorf("%w: replica %q named twice", ErrInvalidConfig, r)
		}
		seen[r] = true
	}
	switch {
	case c.Acks < 0 || c.Acks > len(c.Replicas):
		return fmt.Errorf("%w: %d acks with %d replicas", ErrInvalidConfig, c.Acks, len(c.Replicas))
	case c.AckTimeout < 0:
		return fmt.Errorf("%w: negative ack timeout %v", ErrInvalidConfig, c.AckTimeout)
	case c.MaxAttempts < 0:
		return fmt.Errorf("%w: negative attempts %d", ErrInvalidConfig, c.MaxAttempts)
	case c.MaxBatch < 0:
		return fmt.Errorf("%w: negative batch %d", ErrInvalidConfig, c.MaxBatch)
	}
	if err := c.Backoff.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

func (c Config) acks() int {
	if c.Acks <= 0 {
		return len(c.Replicas)
	}
	return c.Acks
}

func (c Config) ackTimeout() time.Duration {
	if c.AckTimeout <= 0 {
		return DefaultAckTimeout
	}
	return c.AckTimeout
}

func (c Config) maxAttempts() int {
	if c.MaxAttempts <= 0 {
		return DefaultMaxAttempts
	}
	return c.MaxAttempts
}

// EpochStart says that the entries from index Start on were written in
// Epoch (until the next EpochStart).
type EpochStart struct {
	Epoch uint64
	Start uint64
}

// LogInfo describes the leader's local log when it takes office.
type LogInfo struct {
	// First is the first entry the log holds; the entries before it were
	// compacted away. First is 1 for a log that was never compacted.
	First uint64
	// Last is the last entry's index, First-1 when the log holds none.
	Last uint64
	// Epochs gives the epoch of every index from First-1 to Last, sorted
	// by Start (see EpochOf).
	Epochs []EpochStart
}

// Replica is the leader's view of one replica.
type Replica struct {
	Name  string
	Phase Phase
	// Match is the highest index the replica acknowledged in this epoch.
	Match uint64
	// Next is the next index to send to it.
	Next uint64
	// Attempt counts the failed attempts in a row.
	Attempt int
	// Delay is the wait before the next attempt (Retrying).
	Delay time.Duration
	// Timer is the id of the replica's running timer, 0 for none.
	Timer uint64
	// Seq is the sequence number of the last append sent; Probe is the
	// first one that answers the leader's last resynchronisation, so that
	// older mismatches are ignored.
	Seq, Probe uint64
}

// State is a leader's replication state. Treat it as a value: Step returns
// a new one and never modifies its argument.
type State struct {
	Config Config
	Role   Role
	// Epoch is the leader's epoch; NewerEpoch the one that made it step down.
	Epoch, NewerEpoch uint64
	// First, Last: the entries the leader's log holds. Commit: the highest
	// committed index.
	First, Last, Commit uint64
	Epochs              []EpochStart
	Replicas            []Replica
	timers              uint64
}

// New returns the state of a leader of epoch epoch over the log info. Feed
// it Start before anything else.
func New(cfg Config, epoch uint64, info LogInfo) State {
	s := State{Config: cfg, Epoch: epoch, First: max(info.First, 1), Last: info.Last, Epochs: slices.Clone(info.Epochs)}
	if s.Last < s.First-1 {
		s.Last = s.First - 1
	}
	for _, name := range cfg.Replicas {
		s.Replicas = append(s.Replicas, Replica{Name: name, Phase: Syncing, Next: s.Last + 1})
	}
	return s
}

// EpochOf returns the epoch of the entry at index (0 for index 0, or for an
// index before every EpochStart).
func EpochOf(epochs []EpochStart, index uint64) uint64 {
	var e uint64
	for _, s := range epochs {
		if s.Start > index {
			break
		}
		e = s.Epoch
	}
	return e
}

// Replica returns the named replica's state.
func (s State) Replica(name string) (Replica, bool) {
	for _, r := range s.Replicas {
		if r.Name == name {
			return r, true
		}
	}
	return Replica{}, false
}

// Live counts the replicas that are not Failed.
func (s State) Live() int {
	n := 0
	for _, r := range s.Replicas {
		if r.Phase != Failed {
			n++
		}
	}
	return n
}

func (s State) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v epoch %d log %d..%d commit %d", s.Role, s.Epoch, s.First, s.Last, s.Commit)
	for _, r := range s.Replicas {
		fmt.Fprintf(&b, "; %s %v match %d next %d", r.Name, r.Phase, r.Match, r.Next)
		if r.Attempt > 0 {
			fmt.Fprintf(&b, " attempt %d", r.Attempt)
		}
	}
	return b.String()
}

// Event is an input of Step.
type Event interface {
	event()
	String() string
}

type (
	// Start: the leader takes office; it probes every replica at its last
	// index.
	Start struct{}
	// Appended: the leader's log now ends at Last; the entries after the
	// previous last were written in the leader's epoch.
	Appended struct{ Last uint64 }
	// Compacted: the leader dropped the entries before First. An entry at
	// First must stand on its own (a snapshot or a checkpoint): a replica
	// that needs older entries is reset to it.
	Compacted struct{ First uint64 }
	// Acked: the replica holds the entries through Match, answering the
	// append with sequence number Seq sent in Epoch.
	Acked struct {
		Replica    string
		Epoch, Seq uint64
		Match      uint64
	}
	// Nacked: the replica's log does not hold the append's previous entry
	// Prev with its epoch; its log ends at Last.
	Nacked struct {
		Replica    string
		Epoch, Seq uint64
		Prev, Last uint64
	}
	// Rejected: the replica has promised Epoch, newer than the append's.
	Rejected struct {
		Replica string
		Epoch   uint64
	}
	// TimerFired: the replica's timer with this id fired.
	TimerFired struct {
		Replica string
		Timer   uint64
	}
	// Unreachable: the replica cannot be reached now (its node left the
	// cluster, a send failed).
	Unreachable struct{ Replica string }
	// Reachable: the replica's node is (back) in the cluster.
	Reachable struct{ Replica string }
	// AddReplica: replicate to one more node (a member that joined while
	// the log had fewer replicas than wanted). It starts syncing at once;
	// Config.Acks does not change.
	AddReplica struct{ Replica string }
)

func (Start) event()       {}
func (Appended) event()    {}
func (Compacted) event()   {}
func (Acked) event()       {}
func (Nacked) event()      {}
func (Rejected) event()    {}
func (TimerFired) event()  {}
func (Unreachable) event() {}
func (Reachable) event()   {}
func (AddReplica) event()  {}

func (Start) String() string       { return "start" }
func (e Appended) String() string  { return fmt.Sprintf("appended through %d", e.Last) }
func (e Compacted) String() string { return fmt.Sprintf("compacted before %d", e.First) }
func (e Acked) String() string {
	return fmt.Sprintf("%s acked %d (epoch %d seq %d)", e.Replica, e.Match, e.Epoch, e.Seq)
}
func (e Nacked) String() string {
	return fmt.Sprintf("%s nacked prev %d, has %d (epoch %d seq %d)", e.Replica, e.Prev, e.Last, e.Epoch, e.Seq)
}
func (e Rejected) String() string   { return fmt.Sprintf("%s rejected: epoch %d", e.Replica, e.Epoch) }
func (e TimerFired) String() string { return fmt.Sprintf("%s timer %d fired", e.Replica, e.Timer) }
func (e Unreachable) String() string {
	return fmt.Sprintf("%s unreachable", e.Replica)
}
func (e Reachable) String() string  { return fmt.Sprintf("%s reachable", e.Replica) }
func (e AddReplica) String() string { return fmt.Sprintf("add replica %s", e.Replica) }

// Action is an output of Step.
type Action interface {
	action()
	String() string
}

type (
	// Send: send the replica an append of entries From..To (none when To <
	// From: a probe) following entry Prev of epoch PrevEpoch. With Reset
	// the replica replaces its whole log: Prev is the compacted base.
	// Commit tells the replica what is committed.
	Send struct {
		Replica         string
		Epoch, Seq      uint64
		Prev, PrevEpoch uint64
		From, To        uint64
		Commit          uint64
		Reset           bool
	}
	// SetTimer: after Delay, feed TimerFired{Replica, Timer}. It replaces
	// the replica's previous timer, which the driver may stop.
	SetTimer struct {
		Replica string
		Timer   uint64
		Delay   time.Duration
	}
	// StopTimer: the replica's timer is no longer wanted.
	StopTimer struct {
		Replica string
		Timer   uint64
	}
	// Transition: the replica moved from one phase to another.
	Transition struct {
		Replica  string
		From, To Phase
	}
	// Commit: the entries through Index are committed.
	Commit struct{ Index uint64 }
	// Unavailable: fewer than Acks replicas are live, so the entries after
	// Commit through Last cannot commit now.
	Unavailable struct {
		Commit, Last uint64
		Live, Acks   int
	}
	// StepDown: a replica holds a newer epoch; stop leading. It is the last
	// action the state machine emits.
	StepDown struct{ Epoch uint64 }
)

func (Send) action()        {}
func (SetTimer) action()    {}
func (StopTimer) action()   {}
func (Transition) action()  {}
func (Commit) action()      {}
func (Unavailable) action() {}
func (StepDown) action()    {}

func (a Send) String() string {
	var what string
	switch {
	case a.To < a.From:
		what = "probe"
	case a.From == a.To:
		what = fmt.Sprintf("entry %d", a.From)
	default:
		what = fmt.Sprintf("entries %d..%d", a.From, a.To)
	}
	reset := ""
	if a.Reset {
		reset = " reset"
	}
	return fmt.Sprintf("send %s%s %s after %d/%d (epoch %d seq %d commit %d)", a.Replica, reset, what, a.Prev, a.PrevEpoch, a.Epoch, a.Seq, a.Commit)
}
func (a SetTimer) String() string {
	return fmt.Sprintf("set %s timer %d in %v", a.Replica, a.Timer, a.Delay)
}
func (a StopTimer) String() string  { return fmt.Sprintf("stop %s timer %d", a.Replica, a.Timer) }
func (a Transition) String() string { return fmt.Sprintf("%s %v -> %v", a.Replica, a.From, a.To) }
func (a Commit) String() string     { return fmt.Sprintf("commit %d", a.Index) }
func (a Unavailable) String() string {
	return fmt.Sprintf("unavailable: %d of %d acks live, %d..%d cannot commit", a.Live, a.Acks, a.Commit+1, a.Last)
}
func (a StepDown) String() string { return fmt.Sprintf("step down: epoch %d", a.Epoch) }

// Step is the leader's transition function. Events that do not apply
// (stale epochs, sequence numbers or timers, unknown replicas, anything
// after stepping down) are no-ops: Step returns s unchanged and no action.
// Step never modifies s and never panics.
func Step(s State, ev Event) (State, []Action) {
	if s.Role != Leading {
		return s, nil
	}
	m := machine{State: s}
	m.Replicas = slices.Clone(s.Replicas)
	m.Epochs = slices.Clone(s.Epochs)
	if !m.step(ev) {
		return s, nil
	}
	return m.State, m.acts
}

type machine struct {
	State
	acts []Action
}

func (m *machine) emit(a ...Action) { m.acts = append(m.acts, a...) }

func (m *machine) replica(name string) *Replica {
	for i := range m.Replicas {
		if m.Replicas[i].Name == name {
			return &m.Replicas[i]
		}
	}
	return nil
}

// inRange says whether the event's epochs and indexes are below Limit
// (events from replicas are refused otherwise: nothing they cause wraps).
func inRange(ev Event) bool {
	switch e := ev.(type) {
	case Appended:
		return InRange(e.Last)
	case Compacted:
		return InRange(e.First)
	case Acked:
		return InRange(e.Epoch, e.Seq, e.Match)
	case Nacked:
		return InRange(e.Epoch, e.Seq, e.Prev, e.Last)
	case Rejected:
		return InRange(e.Epoch)
	}
	return true
}

// step applies ev and reports whether it changed anything.
func (m *machine) step(ev Event) bool {
	if !inRange(ev) || !InRange(m.Epoch, m.Last) {
		return false
	}
	switch e := ev.(type) {
	case Start:
		for i := range m.Replicas {
			r := &m.Replicas[i]
			m.send(r, m.Last+1)
			r.Probe = r.Seq
			m.setTimer(r, m.Config.ackTimeout())
		}
		m.commit()
		return true

	case Appended:
		if e.Last <= m.Last {
			return false
		}
		if n := len(m.Epochs); n == 0 || m.Epochs[n-1].Epoch != m.Epoch {
			m.Epochs = append(m.Epochs, EpochStart{Epoch: m.Epoch, Start: m.Last + 1})
		}
		m.Last = e.Last
		for i := range m.Replicas {
			r := &m.Replicas[i]
			if r.Phase != InSync {
				continue // it catches up by its own appends
			}
			if r.Match+1 == r.Next { // nothing outstanding: time this one
				m.setTimer(r, m.Config.ackTimeout())
			}
			m.send(r, r.Next)
		}
		m.commit()
		m.checkAvailable(true)
		return true

	case Compacted:
		if e.First <= m.First || e.First > m.Last {
			return false
		}
		m.First = e.First
		// Keep the EpochStart that covers First-1 and those after it.
		keep := 0
		for i, es := range m.Epochs {
			if es.Start <= e.First-1 {
				keep = i
			}
		}
		m.Epochs = m.Epochs[keep:]
		return true

	case Acked:
		r := m.replica(e.Replica)
		if r == nil || e.Epoch != m.Epoch || e.Match > m.Last {
			return false
		}
		progress := e.Match > r.Match
		r.Match = max(r.Match, e.Match)
		r.Next = max(r.Next, r.Match+1)
		switch r.Phase {
		case InSync:
			if r.Next <= m.Last && r.Match+1 == r.Next {
				m.send(r, r.Next) // the rest of a batch cut by MaxBatch
			}
			switch {
			case r.Match+1 == r.Next:
				m.stopTimer(r)
			case progress:
				m.setTimer(r, m.Config.ackTimeout())
			}
		case Syncing, Lagging:
			if !progress && r.Match < m.Last && e.Seq != r.Seq {
				break // a duplicate: the append in flight still counts
			}
			// (The answer to the latest append without progress: entries
			// were written after it was sent, as when the leader writes
			// while its first probe is in flight. They go next.)
			r.Attempt = 0
			if r.Match >= m.Last {
				m.moveTo(r, InSync)
				m.stopTimer(r)
				break
			}
			m.send(r, r.Match+1)
			m.setTimer(r, m.Config.ackTimeout())
		case Retrying, Failed:
			// A late answer: it counts for commits; the replica resumes
			// when its timer fires or its node comes back.
		}
		m.commit()
		return true

	case Nacked:
		r := m.replica(e.Replica)
		if r == nil || e.Epoch != m.Epoch || e.Seq < r.Probe || e.Prev == 0 || r.Phase == Retrying || r.Phase == Failed {
			return false
		}
		if e.Prev <= r.Match { // it lost entries it had acknowledged
			r.Match = min(e.Last, e.Prev-1)
		}
		from := max(r.Match+1, min(e.Prev, e.Last+1))
		r.Attempt = 0
		m.moveTo(r, Syncing)
		m.send(r, from)
		r.Probe = r.Seq
		m.setTimer(r, m.Config.ackTimeout())
		return true

	case Rejected:
		if m.replica(e.Replica) == nil || e.Epoch <= m.Epoch {
			return false
		}
		for i := range m.Replicas {
			m.stopTimer(&m.Replicas[i])
		}
		m.Role, m.NewerEpoch = SteppedDown, e.Epoch
		m.emit(StepDown{Epoch: e.Epoch})
		return true

	case TimerFired:
		r := m.replica(e.Replica)
		if r == nil || e.Timer == 0 || e.Timer != r.Timer {
			return false
		}
		r.Timer = 0
		switch r.Phase {
		case InSync:
			r.Attempt = 1
			m.moveTo(r, Lagging)
			m.send(r, r.Match+1) // again: the earlier appends may be lost
			r.Probe = r.Seq
			m.setTimer(r, m.Config.ackTimeout())
		case Syncing, Lagging:
			m.fail(r)
		case Retrying:
			m.moveTo(r, Syncing)
			m.send(r, r.Match+1) // catch up from the acknowledged index
			r.Probe = r.Seq
			m.setTimer(r, m.Config.ackTimeout())
		}
		return true

	case Unreachable:
		r := m.replica(e.Replica)
		if r == nil || r.Phase == Retrying || r.Phase == Failed {
			return false
		}
		m.fail(r) // the attempt in flight, if any, is lost
		return true

	case AddReplica:
		if e.Replica == "" || m.replica(e.Replica) != nil {
			return false
		}
		m.Config.Replicas = append(slices.Clone(m.Config.Replicas), e.Replica)
		m.Replicas = append(m.Replicas, Replica{Name: e.Replica, Phase: Syncing, Next: m.Last + 1})
		r := &m.Replicas[len(m.Replicas)-1]
		m.send(r, m.Last+1)
		r.Probe = r.Seq
		m.setTimer(r, m.Config.ackTimeout())
		return true

	case Reachable:
		r := m.replica(e.Replica)
		if r == nil || (r.Phase != Retrying && r.Phase != Failed) {
			return false
		}
		r.Attempt, r.Delay = 0, 0
		m.moveTo(r, Syncing)
		m.send(r, r.Match+1)
		r.Probe = r.Seq
		m.setTimer(r, m.Config.ackTimeout())
		return true
	}
	return false
}

// fail counts a failed attempt of r (no answer in time).
func (m *machine) fail(r *Replica) {
	r.Attempt++
	m.fail2(r)
}

// fail2 moves r, whose Attempt attempts failed, to Retrying or Failed.
func (m *machine) fail2(r *Replica) {
	if r.Attempt >= m.Config.maxAttempts() {
		r.Delay = 0
		m.stopTimer(r)
		m.moveTo(r, Failed)
		m.checkAvailable(false)
		return
	}
	r.Delay = m.Config.Backoff.Delay(r.Attempt)
	m.moveTo(r, Retrying)
	m.setTimer(r, r.Delay)
}

func (m *machine) moveTo(r *Replica, p Phase) {
	if r.Phase == p {
		return
	}
	m.emit(Transition{Replica: r.Name, From: r.Phase, To: p})
	r.Phase = p
}

// send emits an append to r of the entries from from on (at most
// MaxBatch), or a probe when there are none.
func (m *machine) send(r *Replica, from uint64) {
	from = max(from, 1)
	reset := false
	if from < m.First {
		from, reset = m.First, true
	}
	to := m.Last
	if b := uint64(m.Config.MaxBatch); b > 0 && to >= from && to-from+1 > b {
		to = from + b - 1
	}
	if to < from {
		to = from - 1
	}
	r.Seq++
	prev := from - 1
	m.emit(Send{Replica: r.Name, Epoch: m.Epoch, Seq: r.Seq, Prev: prev, PrevEpoch: EpochOf(m.Epochs, prev),
		From: from, To: to, Commit: m.Commit, Reset: reset})
	r.Next = to + 1
}

func (m *machine) setTimer(r *Replica, d time.Duration) {
	m.timers++
	r.Timer = m.timers
	m.emit(SetTimer{Replica: r.Name, Timer: r.Timer, Delay: d})
}

func (m *machine) stopTimer(r *Replica) {
	if r.Timer == 0 {
		return
	}
	m.emit(StopTimer{Replica: r.Name, Timer: r.Timer})
	r.Timer = 0
}

// commit advances Commit to the highest index that Acks replicas hold.
func (m *machine) commit() {
	acks := m.Config.acks()
	c := m.Last
	if acks > 0 {
		matches := make([]uint64, 0, len(m.Replicas))
		for _, r := range m.Replicas {
			matches = append(matches, min(r.Match, m.Last))
		}
		slices.Sort(matches)
		slices.Reverse(matches)
		c = matches[acks-1]
	}
	if c > m.Commit {
		m.Commit = c
		m.emit(Commit{Index: c})
	}
}

// checkAvailable reports Unavailable when entries wait for more replicas
// than are live. appended says whether a write just came in (it is always
// reported then); otherwise only the loss of the quorum is.
func (m *machine) checkAvailable(appended bool) {
	live, acks := m.Live(), m.Config.acks()
	if live >= acks || m.Commit >= m.Last {
		return
	}
	if !appended && live != acks-1 {
		return // already reported when the quorum was lost
	}
	m.emit(Unavailable{Commit: m.Commit, Last: m.Last, Live: live, Acks: acks})
}

package replication_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/cluster/replication"
	"github.com/sluicehq/sluice/supervision"
)

// sim is a small cluster in memory: leaders (each a State over a log of its
// own), replicas (MemoryLogs) and a network of messages in flight that the
// test delivers, drops, duplicates and reorders. Scenario scripts drive it
// (see run); the random test drives it with a seed.
type sim struct {
	leaders     map[string]*simLeader
	order       []string // leader names, in creation order
	replicas    map[string]*replication.MemoryLog
	net         []message
	partitioned map[string]bool
	out         strings.Builder
}

type simLeader struct {
	name   string
	state  replication.State
	log    *replication.MemoryLog
	timers map[string]replication.SetTimer // running timer by replica
}

// message is an append from a leader to a replica, or a reply back.
type message struct {
	leader, replica string
	append          *replication.Append
	reply           *replication.Reply
}

func (m message) String() string {
	if m.append != nil {
		a := m.append
		what := "probe"
		if n := len(a.Entries); n > 0 {
			what = fmt.Sprintf("entries %d..%d", a.Entries[0].Index, a.Entries[n-1].Index)
		}
		if a.Reset {
			what = "reset " + what
		}
		return fmt.Sprintf("%s -> %s: %s after %d/%d (epoch %d seq %d)", m.leader, m.replica, what, a.Prev, a.PrevEpoch, a.Epoch, a.Seq)
	}
	return fmt.Sprintf("%s -> %s: %v", m.replica, m.leader, *m.reply)
}

func newSim() *sim {
	return &sim{leaders: map[string]*simLeader{}, replicas: map[string]*replication.MemoryLog{}, partitioned: map[string]bool{}}
}

func (s *sim) printf(format string, args ...any) { fmt.Fprintf(&s.out, format, args...) }

// apply carries out a leader's actions: sends go into the network, timers
// are remembered.
func (s *sim) apply(l *simLeader, acts []replication.Action, indent string) {
	for _, a := range acts {
		s.printf("%s%v\n", indent, a)
		switch a := a.(type) {
		case replication.Send:
			app := &replication.Append{Epoch: a.Epoch, Seq: a.Seq, Prev: a.Prev, PrevEpoch: a.PrevEpoch, Commit: a.Commit, Reset: a.Reset}
			for i := a.From; i <= a.To && a.To >= a.From; i++ {
				e, ok := entry(l.log, i)
				if !ok {
					panic(fmt.Sprintf("%s: send of entry %d, which its log lacks", l.name, i))
				}
				app.Entries = append(app.Entries, e)
			}
			s.net = append(s.net, message{leader: l.name, replica: a.Replica, append: app})
		case replication.SetTimer:
			l.timers[a.Replica] = a
		case replication.StopTimer:
			if l.timers[a.Replica].Timer == a.Timer {
				delete(l.timers, a.Replica)
			}
		}
	}
}

func entry(l *replication.MemoryLog, i uint64) (replication.Entry, bool) {
	if i <= l.BaseIndex || i > l.Last() {
		return replication.Entry{}, false
	}
	return l.Entries[i-l.BaseIndex-1], true
}

func (s *sim) step(l *simLeader, ev replication.Event, indent string) {
	var acts []replication.Action
	l.state, acts = replication.Step(l.state, ev)
	s.apply(l, acts, indent)
}

// deliver delivers the first message in flight (or drops it when its
// replica is partitioned).
func (s *sim) deliver(indent string) {
	m := s.net[0]
	s.net = s.net[1:]
	if s.partitioned[m.replica] {
		s.printf("%sdropped %v\n", indent, m)
		return
	}
	l := s.leaders[m.leader]
	if m.append != nil {
		r := s.replicas[m.replica]
		reply := r.Receive(*m.append)
		if m.append.Commit > 0 {
			r.Compact(min(m.append.Commit, r.Last()))
		}
		s.printf("%s%v => %v\n", indent, m, reply)
		s.net = append(s.net, message{leader: m.leader, replica: m.replica, reply: &reply})
		return
	}
	s.printf("%s%v\n", indent, m)
	s.step(l, m.reply.Event(m.replica), indent+"  ")
}

// write appends n entries to the leader's log in its epoch, one Appended each.
func (s *sim) write(l *simLeader, n int, indent string) {
	for range n {
		i := l.log.Last() + 1
		l.log.Entries = append(l.log.Entries, replication.Entry{Index: i, Epoch: l.state.Epoch, Data: []byte(fmt.Sprintf("%d@%d", i, l.state.Epoch))})
		s.printf("%swrite %d\n", indent, i)
		s.step(l, replication.Appended{Last: i}, indent+"  ")
	}
}

func describe(l *replication.MemoryLog) string {
	var b strings.Builder
	fmt.Fprintf(&b, "promised %d base %d/%d:", l.Promise, l.BaseIndex, l.BaseEpoch)
	for _, e := range l.Entries {
		fmt.Fprintf(&b, " %d@%d", e.Index, e.Epoch)
	}
	return b.String()
}

// parseLog reads "1..4@1 5..6@2" into entries.
func parseLog(spec []string) ([]replication.Entry, error) {
	var out []replication.Entry
	for _, part := range spec {
		rng, ep, ok := strings.Cut(part, "@")
		if !ok {
			return nil, fmt.Errorf("log range %q: want FROM..TO@EPOCH", part)
		}
		from, to, _ := strings.Cut(rng, "..")
		if to == "" {
			to = from
		}
		a, err1 := strconv.ParseUint(from, 10, 64)
		b, err2 := strconv.ParseUint(to, 10, 64)
		e, err3 := strconv.ParseUint(ep, 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("log range %q: bad number", part)
		}
		for i := a; i <= b; i++ {
			out = append(out, replication.Entry{Index: i, Epoch: e, Data: []byte(fmt.Sprintf("%d@%d", i, e))})
		}
	}
	return out, nil
}

// run executes one script command and returns an error for a bad one.
//
//	leader NAME epoch=E replicas=a,b [acks=N] [timeout=D] [attempts=N] [backoff=D] [batch=N] [log=REPLICA]
//	replica NAME [promised=E]
//	log NAME RANGE@EPOCH ...     set a replica's or leader's entries
//	start NAME | write NAME N | compact NAME INDEX
//	timer NAME REPLICA | fire NAME REPLICA ID | unreachable NAME REPLICA | reachable NAME REPLICA
//	deliver [N] | drop | dup | reorder
//	partition REPLICA | heal REPLICA
//	state NAME | logs
func (s *sim) run(line string) error {
	f := strings.Fields(line)
	if len(f) == 0 || strings.HasPrefix(f[0], "#") {
		return nil
	}
	args := map[string]string{}
	for _, a := range f[1:] {
		if k, v, ok := strings.Cut(a, "="); ok {
			args[k] = v
		}
	}
	leader := func() (*simLeader, error) {
		if len(f) < 2 || s.leaders[f[1]] == nil {
			return nil, fmt.Errorf("%q: no such leader", line)
		}
		return s.leaders[f[1]], nil
	}
	s.printf("> %s\n", line)
	switch f[0] {
	case "replica":
		l := &replication.MemoryLog{}
		if p := args["promised"]; p != "" {
			l.Promise, _ = strconv.ParseUint(p, 10, 64)
		}
		s.replicas[f[1]] = l
	case "leader":
		cfg := replication.Config{
			Replicas:    strings.Split(args["replicas"], ","),
			AckTimeout:  time.Second,
			Backoff:     supervision.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: supervision.NoJitter},
			MaxAttempts: 3,
		}
		var err error
		if v := args["acks"]; v != "" {
			cfg.Acks, err = strconv.Atoi(v)
		}
		if v := args["attempts"]; v != "" && err == nil {
			cfg.MaxAttempts, err = strconv.Atoi(v)
		}
		if v := args["batch"]; v != "" && err == nil {
			cfg.MaxBatch, err = strconv.Atoi(v)
		}
		if v := args["timeout"]; v != "" && err == nil {
			cfg.AckTimeout, err = time.ParseDuration(v)
		}
		if v := args["backoff"]; v != "" && err == nil {
			cfg.Backoff.Initial, err = time.ParseDuration(v)
		}
		if err != nil {
			return fmt.Errorf("%q: %v", line, err)
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
		epoch, _ := strconv.ParseUint(args["epoch"], 10, 64)
		log := &replication.MemoryLog{}
		if from := args["log"]; from != "" {
			src := s.replicas[from]
			if src == nil {
				return fmt.Errorf("%q: no replica %q", line, from)
			}
			// The new leader runs on that replica's node: it is the same
			// log, which promises the new epoch when the leader takes office.
			src.Promise = max(src.Promise, epoch)
			cp := *src
			cp.Entries = slices.Clone(src.Entries)
			log = &cp
		}
		log.Promise = max(log.Promise, epoch)
		l := &simLeader{name: f[1], log: log, timers: map[string]replication.SetTimer{}}
		l.state = replication.New(cfg, epoch, log.Info())
		s.leaders[f[1]] = l
		s.order = append(s.order, f[1])
	case "log":
		entries, err := parseLog(f[2:])
		if err != nil {
			return err
		}
		if l := s.leaders[f[1]]; l != nil {
			l.log.Entries = entries
			l.state = replication.New(l.state.Config, l.state.Epoch, l.log.Info())
		} else if r := s.replicas[f[1]]; r != nil {
			r.Entries = entries
		} else {
			return fmt.Errorf("%q: no log %q", line, f[1])
		}
	case "start":
		l, err := leader()
		if err != nil {
			return err
		}
		s.step(l, replication.Start{}, "  ")
	case "write":
		l, err := leader()
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			return err
		}
		s.write(l, n, "  ")
	case "compact":
		l, err := leader()
		if err != nil {
			return err
		}
		i, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			return err
		}
		l.log.Compact(i)
		s.step(l, replication.Compacted{First: i}, "  ")
	case "timer", "unreachable", "reachable":
		l, err := leader()
		if err != nil {
			return err
		}
		r := f[2]
		switch f[0] {
		case "timer":
			t, ok := l.timers[r]
			if !ok {
				s.printf("  (no timer)\n")
				return nil
			}
			delete(l.timers, r)
			s.step(l, replication.TimerFired{Replica: r, Timer: t.Timer}, "  ")
		case "unreachable":
			s.step(l, replication.Unreachable{Replica: r}, "  ")
		case "reachable":
			s.step(l, replication.Reachable{Replica: r}, "  ")
		}
	case "fire": // fire NAME REPLICA ID: a timer by id, current or not
		l, err := leader()
		if err != nil {
			return err
		}
		id, err := strconv.ParseUint(f[3], 10, 64)
		if err != nil {
			return err
		}
		s.step(l, replication.TimerFired{Replica: f[2], Timer: id}, "  ")
	case "deliver":
		n := -1
		if len(f) > 1 {
			n, _ = strconv.Atoi(f[1])
		}
		for ; n != 0 && len(s.net) > 0; n-- {
			s.deliver("  ")
		}
	case "drop":
		if len(s.net) > 0 {
			s.printf("  dropped %v\n", s.net[0])
			s.net = s.net[1:]
		}
	case "dup":
		if len(s.net) > 0 {
			s.printf("  duplicated %v\n", s.net[0])
			s.net = append(s.net, s.net[0])
		}
	case "reorder":
		slices.Reverse(s.net)
		for _, m := range s.net {
			s.printf("  in flight: %v\n", m)
		}
	case "partition":
		s.partitioned[f[1]] = true
	case "heal":
		delete(s.partitioned, f[1])
	case "state":
		l, err := leader()
		if err != nil {
			return err
		}
		s.printf("  %v\n", l.state)
	case "logs":
		names := make([]string, 0, len(s.replicas))
		for n := range s.replicas {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range s.order {
			s.printf("  leader %s: %s\n", n, describe(s.leaders[n].log))
		}
		for _, n := range names {
			s.printf("  %s: %s\n", n, describe(s.replicas[n]))
		}
	default:
		return fmt.Errorf("%q: unknown command", line)
	}
	return nil
}

package coord

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// The transcripts in testdata replay events into the machines and record
// the actions and the state after each (go test -rewrite rewrites them).
// Times are offsets from epoch (at=1m30s).

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestJobTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/job", func(t *testing.T, path string) {
		var s Job
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "new" {
				s = Job{Name: "job", Checkpoints: d.HasArg("checkpoints"), Distributed: d.HasArg("distributed")}
				if d.HasArg("restart") {
					var spec string
					d.ScanArgs(t, "restart", &spec)
					max, within, _ := strings.Cut(spec, "/")
					n, err := strconv.Atoi(max)
					if err != nil {
						d.Fatalf(t, "restart=%s: %v", spec, err)
					}
					s.Restart = &Budget{Max: n, Within: duration(t, d, within)}
				}
				return describeJob(s)
			}
			ev := jobEvent(t, d)
			before := describeJob(s)
			next, acts := s.Step(ev)
			if after := describeJob(s); after != before {
				t.Fatalf("%s: Step changed its input state:\n%s\n%s", d.Pos, before, after)
			}
			s = next
			var b strings.Builder
			for _, a := range acts {
				b.WriteString(describeJobAction(a) + "\n")
			}
			b.WriteString(describeJob(s))
			return b.String()
		})
	})
}

// atArg is the time of at=D, epoch without it.
func atArg(t *testing.T, d *datadriven.TestData) time.Time {
	if !d.HasArg("at") {
		return epoch
	}
	return epoch.Add(duration(t, d, strArg(t, d, "at")))
}

// jobEvent makes the event a transcript line names.
func jobEvent(t *testing.T, d *datadriven.TestData) JobEvent {
	at := atArg(t, d)
	gen := intArg(t, d, "gen")
	switch d.Cmd {
	case "launched":
		return Launched{At: at, Instances: intArg(t, d, "instances"), Local: intArg(t, d, "local"), Hosts: listArg(t, d, "hosts")}
	case "launch-failed":
		return LaunchFailed{At: at, Err: errArg(t, d), Retryable: d.HasArg("retryable"), Local: intArg(t, d, "local"), Hosts: listArg(t, d, "hosts")}
	case "finished":
		return InstanceFinished{At: at, Gen: gen, Slot: Slot{Task: intArg(t, d, "task"), Instance: intArg(t, d, "instance")}}
	case "failed":
		return InstanceFailed{At: at, Gen: gen, Err: errArg(t, d)}
	case "terminated":
		return InstanceTerminated{At: at, Gen: gen}
	case "host-stopped":
		return HostStopped{At: at, Gen: gen, Addr: strArg(t, d, "addr")}
	case "host-lost":
		return HostLost{At: at, Addr: strArg(t, d, "addr")}
	case "backoff-elapsed":
		return BackoffElapsed{At: at, Gen: gen}
	case "drain":
		return DrainAsked{At: at}
	case "abort":
		return AbortAsked{At: at, Err: errArg(t, d)}
	case "final-done":
		return FinalCheckpointDone{At: at}
	case "final-failed":
		return FinalCheckpointFailed{At: at, Err: errArg(t, d)}
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return nil
}

func describeJob(s Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "gen %d %v", s.Gen, s.Phase)
	if s.Phase != Ended {
		fmt.Fprintf(&b, ": instances %d (local %d) unfinished %d closed %d", s.Instances, s.Local, s.Unfinished, s.Closed)
		if len(s.Hosts) > 0 {
			fmt.Fprintf(&b, " hosts %v", s.Hosts)
		}
	}
	if s.Phase == Restarting {
		fmt.Fprintf(&b, "; waiting for %d (hosts %v) backoff done %v", s.Alive, s.WaitHosts, s.BackoffDone)
	}
	if s.FinalDone {
		b.WriteString("; final checkpoint done")
	}
	if s.Drained {
		b.WriteString("; drained")
	}
	if s.Restarts > 0 {
		fmt.Fprintf(&b, "; restarts %d", s.Restarts)
	}
	return b.String()
}

func describeJobAction(a JobAction) string {
	switch a := a.(type) {
	case StopGeneration:
		if a.Lost != "" {
			return fmt.Sprintf("stop-generation gen=%d lost=%s", a.Gen, a.Lost)
		}
		return fmt.Sprintf("stop-generation gen=%d", a.Gen)
	case ScheduleRelaunch:
		return fmt.Sprintf("schedule-relaunch gen=%d restart=%d: %v", a.Gen, a.Restart, a.Err)
	case Relaunch:
		return fmt.Sprintf("relaunch gen=%d", a.Gen)
	case TakeFinalCheckpoint:
		return "take-final-checkpoint"
	case StopCheckpoints:
		return "stop-checkpoints"
	case DrainSources:
		return fmt.Sprintf("drain-sources gen=%d", a.Gen)
	case ClearCheckpoints:
		return "clear-checkpoints"
	case Fail:
		return fmt.Sprintf("fail: %v", a.Err)
	case End:
		return "end"
	}
	return fmt.Sprintf("%T", a)
}

func TestCheckpointTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/checkpoints", func(t *testing.T, path string) {
		var s Checkpoints
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var ev CheckpointEvent
			switch d.Cmd {
			case "new":
				s = Checkpoints{Instances: intArg(t, d, "instances"), Completed: uint64(intArg(t, d, "completed")),
					MaxConcurrent: intArg(t, d, "concurrent")}
				if d.HasArg("timeout") {
					s.Timeout = duration(t, d, strArg(t, d, "timeout"))
				}
				if d.HasArg("pause") {
					s.MinPause = duration(t, d, strArg(t, d, "pause"))
				}
				s.Unaligned = d.HasArg("unaligned")
				if d.HasArg("align-timeout") {
					s.AlignmentTimeout = duration(t, d, strArg(t, d, "align-timeout"))
				}
				return describeCheckpoints(s)
			case "tick":
				ev = Tick{At: atArg(t, d)}
			case "align-timeout":
				ev = AlignTimeout{ID: uint64(intArg(t, d, "id")), At: atArg(t, d)}
			case "expire":
				ev = Expire{ID: uint64(intArg(t, d, "id")), At: atArg(t, d)}
			case "ack":
				ev = Acked{ID: uint64(intArg(t, d, "id")), Instance: intArg(t, d, "instance"),
					States: bytesMap(listArg(t, d, "states")), Offsets: offsetMap(t, d, listArg(t, d, "offsets")),
					Channels: bytesMap(listArg(t, d, "channels"))}
			case "stored":
				st := Stored{ID: uint64(intArg(t, d, "id")), At: atArg(t, d)}
				if d.HasArg("err") {
					st.Err = errArg(t, d)
				}
				ev = st
			case "stop":
				ev = Stop{}
			case "final":
				ev = TakeFinal{At: atArg(t, d)}
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			before := describeCheckpoints(s)
			next, acts := s.Step(ev)
			if after := describeCheckpoints(s); after != before {
				t.Fatalf("%s: Step changed its input state:\n%s\n%s", d.Pos, before, after)
			}
			s = next
			var b strings.Builder
			for _, a := range acts {
				b.WriteString(describeCheckpointAction(a) + "\n")
			}
			b.WriteString(describeCheckpoints(s))
			return b.String()
		})
	})
}

func describeCheckpoints(s Checkpoints) string {
	var b strings.Builder
	fmt.Fprintf(&b, "completed %d next %d", s.Completed, s.Next)
	if s.Stopping {
		b.WriteString(" stopping")
	}
	if s.Final != 0 {
		fmt.Fprintf(&b, " final %d", s.Final)
	}
	if !s.LastEnded.IsZero() {
		fmt.Fprintf(&b, " last ended %v", s.LastEnded.Sub(epoch))
	}
	if !s.Deferred.IsZero() {
		fmt.Fprintf(&b, " deferred to %v", s.Deferred.Sub(epoch))
	}
	for _, f := range s.InFlight {
		fmt.Fprintf(&b, "; in flight %d since %v acked %v states %s offsets %s", f.ID, f.Started.Sub(epoch), sortedKeys(f.Acked), describeBytes(f.States), describeOffsets(f.Offsets))
		if f.Unaligned || len(f.Channels) > 0 {
			fmt.Fprintf(&b, " unaligned channels %s", describeBytes(f.Channels))
		}
	}
	return b.String()
}

func describeCheckpointAction(a CheckpointAction) string {
	final := func(f bool) string {
		if f {
			return " final"
		}
		return ""
	}
	switch a := a.(type) {
	case Inject:
		out := fmt.Sprintf("inject %d%s", a.ID, final(a.Final))
		if !a.Deadline.IsZero() {
			out += fmt.Sprintf(" deadline %v", a.Deadline.Sub(epoch))
		}
		if a.Unaligned {
			out += " unaligned"
		}
		if !a.AlignBy.IsZero() {
			out += fmt.Sprintf(" align-by %v", a.AlignBy.Sub(epoch))
		}
		return out
	case SwitchUnaligned:
		return fmt.Sprintf("switch-unaligned %d", a.ID)
	case TickAt:
		return fmt.Sprintf("tick-at %v", a.At.Sub(epoch))
	case Store:
		out := fmt.Sprintf("store %d states %s offsets %s", a.ID, describeBytes(a.States), describeOffsets(a.Offsets))
		if a.Unaligned {
			out += " unaligned channels " + describeBytes(a.Channels)
		}
		return out
	case Completed:
		return fmt.Sprintf("completed %d%s", a.ID, final(a.Final))
	case CheckpointFailed:
		return fmt.Sprintf("failed %d%s: %v", a.ID, final(a.Final), a.Err)
	case Abandoned:
		return fmt.Sprintf("abandoned %d", a.ID)
	}
	return fmt.Sprintf("%T", a)
}

func describeBytes(m map[string][]byte) string {
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"="+string(m[k]))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func describeOffsets(m map[string]int64) string {
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"="+strconv.FormatInt(m[k], 10))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// bytesMap reads key=value pairs as states.
func bytesMap(kvs []string) map[string][]byte {
	m := map[string][]byte{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = []byte(v)
	}
	return m
}

func offsetMap(t *testing.T, d *datadriven.TestData, kvs []string) map[string]int64 {
	m := map[string]int64{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			d.Fatalf(t, "offset %s: %v", kv, err)
		}
		m[k] = n
	}
	return m
}

func duration(t *testing.T, d *datadriven.TestData, s string) time.Duration {
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(t, "duration %q: %v", s, err)
	}
	return v
}

func intArg(t *testing.T, d *datadriven.TestData, key string) int {
	if !d.HasArg(key) {
		return 0
	}
	var v int
	d.ScanArgs(t, key, &v)
	return v
}

func strArg(t *testing.T, d *datadriven.TestData, key string) string {
	var v string
	d.ScanArgs(t, key, &v)
	return v
}

// listArg reads key=(a,b,c), or key=a.
func listArg(t *testing.T, d *datadriven.TestData, key string) []string {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			return a.Vals
		}
	}
	return nil
}

// errArg is the error of err=..., with dashes for spaces.
func errArg(t *testing.T, d *datadriven.TestData) error {
	return errors.New(strings.ReplaceAll(strArg(t, d, "err"), "-", " "))
}

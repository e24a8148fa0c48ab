package desired

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// The transcripts in testdata/machine replay events into the Machine and
// record the actions and the state after each (go test -rewrite rewrites
// them, to be reviewed as a diff).
//
//	view                      the process's jobs, one operator a line:
//	JOB OP source [paused]    a source
//	JOB OP INPUT [fused=HEAD] [fixed=WHY] [nospill]
//	                          an operator and its input (POLICY:CAPACITY)
//	read                      a document (JSON) read; "read error=..." a
//	                          document that did not parse
//	done version=N            the driver applied every change of N
//	failed version=N index=I err=...
//	rolledback version=N [err=...]
func TestMachineTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/machine", func(t *testing.T, path string) {
		var m Machine
		var v View
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var ev Event
			switch d.Cmd {
			case "view":
				v = parseView(t, d.Input)
				return fmt.Sprintf("%d jobs\n", len(v.Jobs))
			case "read":
				r := Read{View: v}
				if d.HasArg("error") {
					var msg string
					d.ScanArgs(t, "error", &msg)
					r.Err = errors.New(msg)
				} else {
					r.Doc, r.Err = Parse("transcript", []byte(d.Input))
				}
				ev = r
			case "done":
				ev = Done{Version: uintArg(t, d, "version")}
			case "failed":
				var e string
				d.ScanArgs(t, "err", &e)
				ev = Failed{Version: uintArg(t, d, "version"), Index: int(uintArg(t, d, "index")), Err: e}
			case "rolledback":
				r := RolledBack{Version: uintArg(t, d, "version")}
				if d.HasArg("err") {
					d.ScanArgs(t, "err", &r.Err)
				}
				ev = r
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			before := describe(m)
			next, acts := m.Step(ev)
			if after := describe(m); after != before {
				t.Fatalf("%s: Step changed its input state:\n%s\n%s", d.Pos, before, after)
			}
			m = next
			var b strings.Builder
			for _, a := range acts {
				b.WriteString(describeAction(a) + "\n")
			}
			b.WriteString(describe(m))
			return b.String()
		})
	})
}

func uintArg(t *testing.T, d *datadriven.TestData, key string) uint64 {
	var s string
	d.ScanArgs(t, key, &s)
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		d.Fatalf(t, "%s=%s: %v", key, s, err)
	}
	return n
}

func parseInput(t *testing.T, s string) Input {
	pol, capStr, ok := strings.Cut(s, ":")
	n, err := strconv.Atoi(capStr)
	if !ok || err != nil {
		t.Fatalf("input %q: want POLICY:CAPACITY", s)
	}
	return Input{Policy: pol, Capacity: n}
}

func parseView(t *testing.T, text string) View {
	v := View{Jobs: map[string]JobView{}}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			t.Fatalf("view line %q: want JOB OP source|INPUT ...", line)
		}
		jv, ok := v.Jobs[f[0]]
		if !ok {
			jv = JobView{Operators: map[string]OperatorView{}}
			v.Jobs[f[0]] = jv
		}
		ov := OperatorView{Live: true, Spill: true}
		if f[2] == "source" {
			ov.Source, ov.Live = true, false
		} else {
			ov.Input = parseInput(t, f[2])
		}
		for _, opt := range f[3:] {
			k, val, _ := strings.Cut(opt, "=")
			switch k {
			case "paused":
				ov.Paused = true
			case "fused":
				ov.Head = val
			case "fixed":
				ov.Live, ov.Why = false, val
			case "nospill":
				ov.Spill = false
			default:
				t.Fatalf("view line %q: unknown option %q", line, opt)
			}
		}
		jv.Operators[f[1]] = ov
	}
	return v
}

func describeAction(a Action) string {
	switch a := a.(type) {
	case Apply:
		return fmt.Sprintf("apply v%d: %s", a.Version, describeChanges(a.Changes))
	case Rollback:
		return fmt.Sprintf("rollback v%d: %s", a.Version, describeChanges(a.Changes))
	case Ack:
		return fmt.Sprintf("ack v%d jobs=%s", a.Version, strings.Join(a.Jobs, ","))
	case Nack:
		return fmt.Sprintf("nack v%d: %s", a.Version, a.Reason)
	case Ignore:
		return fmt.Sprintf("ignore v%d", a.Version)
	}
	return fmt.Sprintf("unknown action %T", a)
}

func describeChanges(cs []Change) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, c.String())
	}
	return strings.Join(parts, "; ")
}

func describe(m Machine) string {
	var jobs []string
	for j, v := range m.Applied {
		jobs = append(jobs, fmt.Sprintf("%s=v%d", j, v))
	}
	slices.Sort(jobs)
	s := fmt.Sprintf("state: desired=v%d good=v%d rejected=v%d applied=[%s]", m.Desired, m.Good, m.Rejected, strings.Join(jobs, " "))
	if m.applying != nil {
		s += fmt.Sprintf(" applying=v%d", m.applying.version)
		if m.applying.failed != "" {
			s += " (rolling back)"
		}
	}
	if m.next != nil {
		s += " queued"
	}
	if m.Reason != "" {
		s += "\nreason: " + m.Reason
	}
	return s + "\n"
}

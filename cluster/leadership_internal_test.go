package cluster

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// The transcripts in testdata/leadership replay events into a node's
// leadership machine for one job and record the actions and the state
// after each (go test -rewrite rewrites them).
//
//	run | lost | claimed [ok] | term-ended | job-ended | abandoned
//	elected token=N pointer=N held=N [running] [live] [self]
//	committed cp=N [fenced] [err=TEXT]
func TestLeadershipTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/leadership", func(t *testing.T, path string) {
		var l lead
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var ev any
			u := func(key string) uint64 {
				var v uint64
				if d.HasArg(key) {
					d.ScanArgs(t, key, &v)
				}
				return v
			}
			switch d.Cmd {
			case "run":
				ev = leadRun{}
			case "lost":
				ev = leadLost{}
			case "elected":
				ev = leadElected{Token: u("token"), Pointer: u("pointer"), Held: u("held"), Running: d.HasArg("running"),
					CoordinatorLive: d.HasArg("live"), CoordinatorIsThisOne: d.HasArg("self")}
			case "claimed":
				ev = leadClaimed{OK: d.HasArg("ok")}
			case "committed":
				c := leadCommitted{Checkpoint: u("cp"), Fenced: d.HasArg("fenced")}
				if d.HasArg("err") {
					d.ScanArgs(t, "err", &c.Err)
				}
				ev = c
			case "term-ended":
				ev = leadTermEnded{}
			case "job-ended":
				ev = leadJobEnded{}
			case "abandoned":
				ev = leadAbandoned{}
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			before := l
			next, acts := l.Step(ev)
			if l != before {
				t.Fatalf("%s: Step changed its input", d.Pos)
			}
			l = next
			var b strings.Builder
			for _, a := range acts {
				fmt.Fprintf(&b, "%s\n", describeLeadAction(a))
			}
			fmt.Fprintf(&b, "state: %s", describeLead(l))
			return b.String()
		})
	})
}

func describeLead(l lead) string {
	s := fmt.Sprintf("%v token=%d committed=%d", l.Phase, l.Token, l.Committed)
	if l.Starting {
		s += " starting"
	}
	return s
}

func describeLeadAction(a any) string {
	switch a := a.(type) {
	case leadCampaign:
		return "campaign"
	case leadResign:
		return "resign: " + a.Why
	case leadClaim:
		return fmt.Sprintf("claim the log's epoch (term %d)", a.Token)
	case leadTakeOver:
		return fmt.Sprintf("take the job over (term %d)", a.Token)
	case leadStartRun:
		return fmt.Sprintf("start the run (term %d)", a.Token)
	case leadAbandon:
		return "abandon: " + a.Why
	case leadFailCommit:
		return fmt.Sprintf("fail checkpoint %d", a.Checkpoint)
	}
	return fmt.Sprintf("%T", a)
}

package cluster

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// The transcripts in testdata/change replay events into the coordinator's
// machine for one live change and record the actions and the state after
// each (go test -rewrite rewrites them).
//
//	new (the next change) | start nodes=a,b,c | ok node=A phase=P | nack node=A phase=P err=TEXT |
//	left node=A | timeout
func TestChangeTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/change", func(t *testing.T, path string) {
		var c change
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			arg := func(key string) string {
				var v string
				if d.HasArg(key) {
					d.ScanArgs(t, key, &v)
				}
				return v
			}
			var ev any
			switch d.Cmd {
			case "new": // the next change
				c = change{}
				return "state: idle"
			case "start":
				var nodes []string
				if s := arg("nodes"); s != "" {
					nodes = strings.Split(s, ",")
				}
				ev = changeStart{Nodes: nodes}
			case "ok":
				ev = changeAnswered{Addr: arg("node"), Phase: arg("phase")}
			case "nack":
				ev = changeAnswered{Addr: arg("node"), Phase: arg("phase"), Err: strings.ReplaceAll(arg("err"), "_", " ")}
			case "left":
				ev = changeLeft{Addr: arg("node")}
			case "timeout":
				ev = changeTimeout{}
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			before := c.clone()
			next, acts := c.Step(ev)
			if !reflect.DeepEqual(c, before) {
				t.Fatalf("%s: Step changed its input", d.Pos)
			}
			c = next
			var b strings.Builder
			for _, a := range acts {
				switch a := a.(type) {
				case changeSend:
					fmt.Fprintf(&b, "send %s to %s\n", a.Phase, a.Addr)
				case changeArm:
					b.WriteString("arm the deadline\n")
				case changeFinish:
					if a.Err == "" {
						b.WriteString("finish: in force\n")
					} else {
						fmt.Fprintf(&b, "finish: rejected: %s\n", a.Err)
					}
				default:
					fmt.Fprintf(&b, "%T\n", a)
				}
			}
			fmt.Fprintf(&b, "state: %v", c.Phase)
			for _, n := range c.Nodes {
				fmt.Fprintf(&b, " %s=%v", n.Addr, n.State)
			}
			return b.String()
		})
	})
}

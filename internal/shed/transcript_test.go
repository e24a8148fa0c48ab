package shed

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// The transcripts in testdata replay windows into the controller and
// record the actions and the state after each (go test -rewrite rewrites
// them).
//
//	new target=200ms [headroom=0.9 fill=0.95 low=0.5 minkeep=0.01 patience=3]
//	<task> [point=<name>] [sample]     one line per task
//	window p99=350ms util=(0.2,1.0) [arrivals=3000 cap=(0,0,1000) queued=(0,0,256) lag=600ms]
//	                                   windows of 1s, parallelism 1; arrivals in records/s,
//	                                   cap: each task's capacity, records/s; queued: records
//	                                   waiting at each task's inputs
//	repeat n=5 p99=... util=...        the same window n times, one output line each
//	probe util=(0,1) cap=(0,600) queued=(0,200) [lag=50ms length=250ms arrivals=3000]
//	                                   a look between windows (Controller.Probe) of
//	                                   length (250ms by default), windows of 1s
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var c Controller
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "new":
				cfg := Config{Target: durArg(t, d, "target")}
				cfg.Headroom = floatArg(t, d, "headroom", 0)
				cfg.Fill = floatArg(t, d, "fill", 0)
				cfg.Low = floatArg(t, d, "low", 0)
				cfg.MinKeep = floatArg(t, d, "minkeep", 0)
				cfg.Patience = int(floatArg(t, d, "patience", 0))
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					f := strings.Fields(line)
					if len(f) == 0 {
						continue
					}
					task := Task{Name: f[0]}
					for _, a := range f[1:] {
						switch k, v, _ := strings.Cut(a, "="); k {
						case "point":
							task.Point = v
						case "sample":
							task.Sample = true
						default:
							d.Fatalf(t, "task %s: unknown %q", f[0], a)
						}
					}
					cfg.Tasks = append(cfg.Tasks, task)
				}
				c = New(cfg)
				return describe(c)
			case "retarget":
				before := describe(c)
				next, acts := c.Retarget(durArg(t, d, "target"))
				if after := describe(c); after != before {
					t.Fatalf("%s: Retarget changed its input state", d.Pos)
				}
				c = next
				var b strings.Builder
				for _, a := range acts {
					b.WriteString(describeAction(a) + "; ")
				}
				return b.String() + describe(c) + "\n"
			case "probe":
				w := windowArg(t, d, len(c.Tasks), 250*time.Millisecond)
				before := describe(c)
				next, acts := c.Probe(Probe{Length: w.Length, Window: time.Second, Loads: w.Loads, Lag: w.Lag, Arrivals: w.Arrivals})
				if after := describe(c); after != before {
					t.Fatalf("%s: Probe changed its input state", d.Pos)
				}
				c = next
				var b strings.Builder
				for _, a := range acts {
					b.WriteString(describeAction(a) + "; ")
				}
				return b.String() + describe(c) + "\n"
			case "window", "repeat":
				n := 1
				if d.Cmd == "repeat" {
					n = int(floatArg(t, d, "n", 1))
				}
				w := windowArg(t, d, len(c.Tasks), time.Second)
				var b strings.Builder
				for range n {
					before := describe(c)
					next, acts := c.Step(w)
					if after := describe(c); after != before {
						t.Fatalf("%s: Step changed its input state:\n%s\n%s", d.Pos, before, after)
					}
					c = next
					for _, a := range acts {
						b.WriteString(describeAction(a) + "; ")
					}
					b.WriteString(describe(c) + "\n")
				}
				return b.String()
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

func windowArg(t *testing.T, d *datadriven.TestData, tasks int, length time.Duration) Window {
	w := Window{Length: length, Arrivals: floatArg(t, d, "arrivals", 0)}
	if d.HasArg("p99") {
		w.P99 = durArg(t, d, "p99")
	}
	if d.HasArg("length") {
		w.Length = durArg(t, d, "length")
	}
	if d.HasArg("lag") {
		w.Lag = durArg(t, d, "lag")
	}
	var utils []string
	d.ScanArgs(t, "util", &utils)
	if len(utils) != tasks {
		d.Fatalf(t, "util: %d values for %d tasks", len(utils), tasks)
	}
	var caps, queued []string
	if d.HasArg("cap") {
		d.ScanArgs(t, "cap", &caps)
	}
	if d.HasArg("queued") {
		d.ScanArgs(t, "queued", &queued)
	}
	for i, u := range utils {
		l := Load{Busy: time.Duration(parse(t, d, u) * float64(w.Length)), Parallelism: 1}
		if i < len(caps) {
			l.Capacity = parse(t, d, caps[i])
		}
		if i < len(queued) {
			l.Queued = int64(parse(t, d, queued[i]))
		}
		w.Loads = append(w.Loads, l)
	}
	return w
}

func parse(t *testing.T, d *datadriven.TestData, s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		d.Fatalf(t, "%q: %v", s, err)
	}
	return v
}

func durArg(t *testing.T, d *datadriven.TestData, key string) time.Duration {
	var s string
	d.ScanArgs(t, key, &s)
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(t, "%s=%s: %v", key, s, err)
	}
	return v
}

func floatArg(t *testing.T, d *datadriven.TestData, key string, def float64) float64 {
	if !d.HasArg(key) {
		return def
	}
	var s string
	d.ScanArgs(t, key, &s)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		d.Fatalf(t, "%s=%s: %v", key, s, err)
	}
	return v
}

func describe(c Controller) string {
	s := fmt.Sprintf("keep %.3f", c.Keep)
	if c.Point != "" {
		mode := "sample"
		if c.Drop {
			mode = "drop"
		}
		s += " at " + c.Point + " (" + mode + ")"
	}
	if c.Bottleneck != "" {
		s += " bottleneck " + c.Bottleneck
	}
	if c.Infeasible {
		s += " INFEASIBLE"
	}
	return s
}

func describeAction(a Action) string {
	switch a := a.(type) {
	case SetRate:
		mode := "sample"
		if a.Drop {
			mode = "drop"
		}
		return fmt.Sprintf("set %s keep=%.3f %s", a.Point, a.Keep, mode)
	case Report:
		if a.Infeasible {
			return "report infeasible: " + a.Reason
		}
		return "report feasible"
	}
	return fmt.Sprintf("%T", a)
}

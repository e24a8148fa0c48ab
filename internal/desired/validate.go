package desired

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// View is what a process runs, as validation sees it: its jobs and their
// operators.
type View struct {
	Jobs map[string]JobView
}

// JobView is one job's operators, by name.
type JobView struct {
	Operators map[string]OperatorView
	// LatencyTarget is the job's now; 0: it was started without one, and
	// cannot get one while it runs.
	LatencyTarget time.Duration
}

// OperatorView is one operator of a running job.
type OperatorView struct {
	Source bool   // a source: it can be paused, it has no input
	Head   string // not empty: the operator is fused into Head's chain, whose input it shares
	Live   bool   // its input can change while the job runs
	Why    string // when not Live, why not
	Spill  bool   // the process has a store to spill to
	Input  Input  // its input now
	Paused bool   // a source paused now
}

// Change is one setting to apply, with what it replaces (for a rollback).
type Change struct {
	Job, Operator string // Operator "": a change of the job (its LatencyTarget)
	Input         *Input // the new input, or nil
	Paused        *bool  // a source's new state, or nil
	WasInput      Input
	WasPaused     bool
	// LatencyTarget is the job's new target, or nil.
	LatencyTarget    *time.Duration
	WasLatencyTarget time.Duration
}

// Undo is the change that puts back what c replaced.
func (c Change) Undo() Change {
	u := Change{Job: c.Job, Operator: c.Operator}
	if c.Input != nil {
		in := c.WasInput
		u.Input, u.WasInput = &in, *c.Input
	}
	if c.Paused != nil {
		p := c.WasPaused
		u.Paused, u.WasPaused = &p, *c.Paused
	}
	if c.LatencyTarget != nil {
		d := c.WasLatencyTarget
		u.LatencyTarget, u.WasLatencyTarget = &d, *c.LatencyTarget
	}
	return u
}

func (c Change) String() string {
	var b strings.Builder
	b.WriteString(c.Job)
	if c.Operator != "" {
		b.WriteString("/" + c.Operator)
	}
	if c.LatencyTarget != nil {
		fmt.Fprintf(&b, " latency_target %v -> %v", c.WasLatencyTarget, *c.LatencyTarget)
	}
	if c.Input != nil {
		fmt.Fprintf(&b, " input %s -> %s", c.WasInput, *c.Input)
	}
	if c.Paused != nil {
		fmt.Fprintf(&b, " paused %t -> %t", c.WasPaused, *c.Paused)
	}
	return b.String()
}

func (in Input) String() string {
	s := fmt.Sprintf("%s:%d", in.Policy, in.Capacity)
	if in.SampleEvery != 0 {
		s += fmt.Sprintf(" every=%d", in.SampleEvery)
	}
	if in.Rate != 0 {
		s += fmt.Sprintf(" rate=%g", in.Rate)
	}
	if in.HighWater != 0 {
		s += fmt.Sprintf(" high_water=%d", in.HighWater)
	}
	return s
}

// FieldError is a document's fault: the field (a JSON path from the
// document's root) and why.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return "desired: " + e.Field + ": " + e.Reason }

// Policies are the input policies a document can name.
var Policies = []string{"block", "drop-newest", "drop-oldest", "sample", "throttle", "spill"}

// MaxLatencyTarget is the largest latency_target a document can ask for.
const MaxLatencyTarget = time.Hour

// MaxCapacity is the largest capacity a document can ask for.
const MaxCapacity = 1 << 24

// CheckInput reports what is wrong with an input's settings, naming the
// field under at; spill says whether a store to spill to exists.
func CheckInput(at string, in Input, spill bool) error {
	bad := func(field, format string, args ...any) error {
		return &FieldError{Field: at + "." + field, Reason: fmt.Sprintf(format, args...)}
	}
	if !slices.Contains(Policies, in.Policy) {
		return bad("policy", "%q is not a policy (one of %s)", in.Policy, strings.Join(Policies, ", "))
	}
	if in.Capacity < 1 || in.Capacity > MaxCapacity {
		return bad("capacity", "%d: must be between 1 and %d", in.Capacity, MaxCapacity)
	}
	switch {
	case in.Policy == "sample" && in.SampleEvery < 2:
		return bad("sample_every", "%d: sample keeps one record in sample_every, which must be at least 2", in.SampleEvery)
	case in.Policy != "sample" && in.SampleEvery != 0:
		return bad("sample_every", "only for the sample policy, not %s", in.Policy)
	case in.Policy == "throttle" && (!(in.Rate > 0) || math.IsInf(in.Rate, 0)):
		return bad("rate", "%v: throttle's rate (records per second) must be positive and finite", in.Rate)
	case in.Policy != "throttle" && in.Rate != 0:
		return bad("rate", "only for the throttle policy, not %s", in.Policy)
	case in.HighWater < 0 || in.HighWater > in.Capacity:
		return bad("high_water", "%d: must be between 0 and the capacity %d", in.HighWater, in.Capacity)
	case in.Policy == "spill" && !spill:
		return bad("policy", "spill is impossible here: the process has no store to spill to")
	}
	return nil
}

// Validate checks a document against what the process runs and returns the
// changes that would make it so, in a fixed order (jobs, then operators, by
// name); settings already in force make no change. A document with any
// fault is refused whole, with the first fault in that order.
func Validate(doc Document, v View) ([]Change, error) {
	var changes []Change
	for _, job := range sorted(doc.Jobs) {
		at := "jobs." + job
		jv, ok := v.Jobs[job]
		if !ok {
			return nil, &FieldError{Field: at, Reason: "no such job runs here"}
		}
		if lt := doc.Jobs[job].LatencyTarget; lt != "" {
			d, err := time.ParseDuration(lt)
			switch {
			case err != nil:
				return nil, &FieldError{Field: at + ".latency_target", Reason: fmt.Sprintf("%q is not a duration (such as 250ms)", lt)}
			case d <= 0 || d > MaxLatencyTarget:
				return nil, &FieldError{Field: at + ".latency_target", Reason: fmt.Sprintf("%v: must be positive and at most %v", d, MaxLatencyTarget)}
			case jv.LatencyTarget == 0:
				return nil, &FieldError{Field: at + ".latency_target", Reason: "the job was started without a LatencyTarget (operators.LatencyTarget): one cannot be added while it runs"}
			case d != jv.LatencyTarget:
				changes = append(changes, Change{Job: job, LatencyTarget: &d, WasLatencyTarget: jv.LatencyTarget})
			}
		}
		for _, op := range sorted(doc.Jobs[job].Operators) {
			at := at + ".operators." + op
			want := doc.Jobs[job].Operators[op]
			ov, ok := jv.Operators[op]
			if !ok {
				return nil, &FieldError{Field: at, Reason: fmt.Sprintf("job %q has no such operator", job)}
			}
			c := Change{Job: job, Operator: op, WasInput: ov.Input, WasPaused: ov.Paused}
			if want.Paused != nil {
				if !ov.Source {
					return nil, &FieldError{Field: at + ".paused", Reason: "only a source can be paused"}
				}
				if *want.Paused != ov.Paused {
					p := *want.Paused
					c.Paused = &p
				}
			}
			if in := want.Input; in != nil {
				switch {
				case ov.Source:
					return nil, &FieldError{Field: at + ".input", Reason: "a source has no input"}
				case ov.Head != "":
					return nil, &FieldError{Field: at + ".input", Reason: fmt.Sprintf("the operator is fused into %q's chain and shares its input: set %q's, or give it an Input of its own", ov.Head, ov.Head)}
				case !ov.Live:
					return nil, &FieldError{Field: at + ".input", Reason: "cannot change while the job runs: " + ov.Why}
				}
				if err := CheckInput(at+".input", *in, ov.Spill); err != nil {
					return nil, err
				}
				if *in != ov.Input {
					w := *in
					c.Input = &w
				}
			}
			if c.Input != nil || c.Paused != nil {
				changes = append(changes, c)
			}
		}
	}
	return changes, nil
}

func sorted[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

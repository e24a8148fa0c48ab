package desired

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCheckInput(t *testing.T) {
	cases := []struct {
		in    Input
		spill bool
		field string // "" when valid
	}{
		{Input{Policy: "block", Capacity: 1}, false, ""},
		{Input{Policy: "drop-oldest", Capacity: 4096}, false, ""},
		{Input{Policy: "sample", Capacity: 64, SampleEvery: 2}, false, ""},
		{Input{Policy: "throttle", Capacity: 64, Rate: 0.5, HighWater: 64}, false, ""},
		{Input{Policy: "spill", Capacity: 64}, true, ""},
		{Input{Policy: "Block", Capacity: 64}, false, "at.policy"},
		{Input{Policy: "", Capacity: 64}, false, "at.policy"},
		{Input{Policy: "block", Capacity: 0}, false, "at.capacity"},
		{Input{Policy: "block", Capacity: MaxCapacity + 1}, false, "at.capacity"},
		{Input{Policy: "sample", Capacity: 64, SampleEvery: 1}, false, "at.sample_every"},
		{Input{Policy: "block", Capacity: 64, SampleEvery: 4}, false, "at.sample_every"},
		{Input{Policy: "throttle", Capacity: 64}, false, "at.rate"},
		{Input{Policy: "throttle", Capacity: 64, Rate: -1}, false, "at.rate"},
		{Input{Policy: "drop-newest", Capacity: 64, Rate: 10}, false, "at.rate"},
		{Input{Policy: "sample", Capacity: 64, SampleEvery: 3, HighWater: 65}, false, "at.high_water"},
		{Input{Policy: "block", Capacity: 64, HighWater: -1}, false, "at.high_water"},
		{Input{Policy: "spill", Capacity: 64}, false, "at.policy"},
	}
	for _, c := range cases {
		err := CheckInput("at", c.in, c.spill)
		var fe *FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("CheckInput(%v) = %v, want valid", c.in, err)
		case c.field != "" && !errors.As(err, &fe):
			t.Errorf("CheckInput(%v) = %v, want a FieldError at %s", c.in, err, c.field)
		case c.field != "" && fe.Field != c.field:
			t.Errorf("CheckInput(%v) names %s (%v), want %s", c.in, fe.Field, err, c.field)
		}
	}
}

func TestValidate(t *testing.T) {
	view := View{Jobs: map[string]JobView{"j": {Operators: map[string]OperatorView{
		"src":  {Source: true},
		"agg":  {Live: true, Spill: true, Input: Input{Policy: "block", Capacity: 10}},
		"sink": {Head: "agg"},
		"far":  {Why: "distributed"},
	}}}}
	yes, no := true, false
	in := func(p string, n int) *Input { return &Input{Policy: p, Capacity: n} }
	cases := []struct {
		name    string
		ops     map[string]Operator
		field   string
		changes int
	}{
		{"a change", map[string]Operator{"agg": {Input: in("drop-oldest", 10)}}, "", 1},
		{"already so", map[string]Operator{"agg": {Input: in("block", 10)}, "src": {Paused: &no}}, "", 0},
		{"pause", map[string]Operator{"src": {Paused: &yes}}, "", 1},
		{"unknown operator", map[string]Operator{"nope": {}}, "jobs.j.operators.nope", 0},
		{"input of a source", map[string]Operator{"src": {Input: in("block", 1)}}, "jobs.j.operators.src.input", 0},
		{"fused", map[string]Operator{"sink": {Input: in("block", 1)}}, "jobs.j.operators.sink.input", 0},
		{"not live", map[string]Operator{"far": {Input: in("block", 1)}}, "jobs.j.operators.far.input", 0},
		{"pause a non-source", map[string]Operator{"agg": {Paused: &yes}}, "jobs.j.operators.agg.paused", 0},
		{"bad value beside a good one", map[string]Operator{"src": {Paused: &yes}, "agg": {Input: in("block", -1)}}, "jobs.j.operators.agg.input.capacity", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			changes, err := Validate(Document{Version: 1, Jobs: map[string]Job{"j": {Operators: c.ops}}}, view)
			var fe *FieldError
			if c.field == "" {
				if err != nil || len(changes) != c.changes {
					t.Fatalf("Validate = %v, %v; want %d changes", changes, err, c.changes)
				}
				return
			}
			if !errors.As(err, &fe) || fe.Field != c.field || changes != nil {
				t.Fatalf("Validate = %v, %v; want a FieldError at %s and no changes", changes, err, c.field)
			}
		})
	}
	if _, err := Validate(Document{Version: 1, Jobs: map[string]Job{"other": {}}}, view); err == nil || !strings.Contains(err.Error(), "jobs.other") {
		t.Fatalf("unknown job: %v", err)
	}
}

func TestParse(t *testing.T) {
	cases := []struct{ doc, want string }{
		{`{"version": 2, "jobs": {}}`, ""},
		{`{"jobs": {}}`, "field version"},
		{`{"version": 1, "jobs": {"a": {"operators": {"b": {"input": {"policy": "block", "capacity": 1, "extra": 1}}}}}}`, `unknown field "extra"`},
		{`{"version": -1}`, "field version"},
		{`{"version": 1} {"version": 2}`, "more after the document"},
		{`{"version": 1`, "unexpected EOF"},
		{`[1]`, "is not desired.Document"},
		{strings.Repeat(" ", MaxDocument+1), "larger than"},
	}
	for _, c := range cases {
		_, err := Parse("f.json", []byte(c.doc))
		if c.want == "" {
			if err != nil {
				t.Errorf("Parse(%.40q) = %v", c.doc, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrDocument) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "f.json") {
			t.Errorf("Parse(%.40q) = %v, want an error naming f.json with %q", c.doc, err, c.want)
		}
	}
}

// FuzzParse: any bytes give a document or an ErrDocument, never a panic;
// a document parsed validates without a panic against a small view.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"version": 3, "jobs": {"q5": {"operators": {"bids": {"paused": true}, "count": {"input": {"policy": "sample", "capacity": 4096, "sample_every": 4, "high_water": 100}}}}}}`))
	f.Add([]byte(`{"version": 1, "jobs": {"q5": {"operators": {"count": {"input": {"policy": "throttle", "capacity": 1, "rate": 1e308}}}}}}`))
	f.Add([]byte(`{"version": 18446744073709551615}`))
	view := View{Jobs: map[string]JobView{"q5": {Operators: map[string]OperatorView{
		"bids": {Source: true}, "count": {Live: true, Input: Input{Policy: "block", Capacity: 8}}}}}}
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := Parse("fuzz", data)
		if err != nil {
			if !errors.Is(err, ErrDocument) {
				t.Fatalf("Parse error %v is not an ErrDocument", err)
			}
			return
		}
		var m Machine
		m, _ = m.Step(Read{Doc: doc, View: view})
		_ = m
	})
}

func TestValidateLatencyTarget(t *testing.T) {
	view := View{Jobs: map[string]JobView{
		"lat":   {Operators: map[string]OperatorView{}, LatencyTarget: 200 * time.Millisecond},
		"plain": {Operators: map[string]OperatorView{}},
	}}
	for _, c := range []struct {
		job, target, field string
		changes            int
	}{
		{"lat", "250ms", "", 1}, {"lat", "200ms", "", 0}, {"lat", "1h", "", 1},
		{"lat", "0s", "jobs.lat.latency_target", 0}, {"lat", "-1ms", "jobs.lat.latency_target", 0},
		{"lat", "61m", "jobs.lat.latency_target", 0}, {"lat", "fast", "jobs.lat.latency_target", 0},
		{"plain", "250ms", "jobs.plain.latency_target", 0},
	} {
		changes, err := Validate(Document{Version: 1, Jobs: map[string]Job{c.job: {LatencyTarget: c.target}}}, view)
		var fe *FieldError
		switch {
		case c.field == "" && (err != nil || len(changes) != c.changes):
			t.Errorf("%s %s: %v, %d changes; want %d", c.job, c.target, err, len(changes), c.changes)
		case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
			t.Errorf("%s %s: %v, want a FieldError at %s", c.job, c.target, err, c.field)
		}
		if len(changes) == 1 {
			ch := changes[0]
			if u := ch.Undo(); *u.LatencyTarget != 200*time.Millisecond || u.WasLatencyTarget != *ch.LatencyTarget {
				t.Errorf("%s: undo %s", ch, u)
			}
		}
	}
}

package engine

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/mailbox"
)

// TestLiveInputsDeployed: a deployment carries the live inputs and pauses
// in force (across the wire, msgpack), and a host builds its generation
// with them; what does not fit the plan or is out of range is refused.
func TestLiveInputsDeployed(t *testing.T) {
	x := wireJob(t, "here:1", "there:2", 0)
	x.live.setInput(1, mailbox.DropOldest(64), true)
	x.live.paused = map[int]bool{0: true}
	d := &wire.Deploy{Job: "wire"}
	x.liveDeploy(d)
	if got := d.Inputs[1]; got.Policy != "drop-oldest" || got.Capacity != 64 || len(d.Paused) != 1 || d.Paused[0] != 0 {
		t.Fatalf("deployment carries %+v, paused %v", d.Inputs, d.Paused)
	}
	data, err := msgpack.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back wire.Deploy
	if err := msgpack.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	h := wireJob(t, "there:2", "there:2", 0)
	if err := h.adoptLive(&back); err != nil {
		t.Fatal(err)
	}
	if c, ok := h.liveInput(1); !ok || c.Overflow != mailbox.OverflowDropOldest || c.Capacity != 64 || !h.livePaused(0) {
		t.Fatalf("the host builds with %+v (%v), paused %v", c, ok, h.livePaused(0))
	}
	for _, tc := range []struct {
		name string
		d    wire.Deploy
		want string
	}{
		{"a source's input", wire.Deploy{Inputs: map[int]wire.Input{0: {Policy: "block", Capacity: 8}}}, "task 0, which has no input"},
		{"a task the plan lacks", wire.Deploy{Inputs: map[int]wire.Input{9: {Policy: "block", Capacity: 8}}}, "task 9"},
		{"a policy of no name", wire.Deploy{Inputs: map[int]wire.Input{1: {Policy: "drop-all", Capacity: 8}}}, "not one of"},
		{"a pause of no task", wire.Deploy{Paused: []int{-1}}, "task -1 paused"},
	} {
		err := wireJob(t, "there:2", "there:2", 0).adoptLive(&tc.d)
		if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrBadInput naming %q", tc.name, err, tc.want)
		}
	}
}

// TestInputFromWire: settings from another process are checked before
// they reach a mailbox.
func TestInputFromWire(t *testing.T) {
	for _, tc := range []struct {
		in   wire.Input
		want string // "" accepted
	}{
		{wire.Input{Policy: "block", Capacity: 64}, ""},
		{wire.Input{Policy: "throttle", Capacity: 64, Rate: 100}, ""},
		{wire.Input{Policy: "sample", Capacity: 64, SampleEvery: 4, HighWater: 32}, ""},
		{wire.Input{Policy: "spill", Capacity: 64}, "no spill store in common"},
		{wire.Input{Policy: "block", Capacity: 0}, "capacity 0"},
		{wire.Input{Policy: "block", Capacity: MaxWireCapacity + 1}, "capacity"},
		{wire.Input{Policy: "throttle", Capacity: 64, Rate: math.NaN()}, "rate"},
		{wire.Input{Policy: "throttle", Capacity: 64, Rate: math.Inf(1)}, "rate"},
		{wire.Input{Policy: "sample", Capacity: 64, SampleEvery: 1}, "at least 2"},
		{wire.Input{Policy: "block", Capacity: 64, HighWater: 65}, "high-water"},
		{wire.Input{Policy: strings.Repeat("x", 1000), Capacity: 64}, "not one of"},
	} {
		c, err := InputFromWire(tc.in)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.in, err)
		case tc.want == "" && c.Validate() != nil:
			t.Errorf("%+v: accepted %+v, which does not validate", tc.in, c)
		case tc.want != "" && (!errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want ErrBadInput naming %q", tc.in, err, tc.want)
		case tc.want != "" && len(err.Error()) > 300:
			t.Errorf("%+v: the error repeats the input: %d bytes", tc.in, len(err.Error()))
		}
	}
}

// TestHostChecksChange: a host refuses a change whose task and operator
// are not its plan's, or that a distributed job cannot make.
func TestHostChecksChange(t *testing.T) {
	h := &Host{x: wireJob(t, "there:2", "there:2", 0)}
	op := h.x.plan.Chains[1][0].Name()
	ok := &wire.Change{Task: 1, Op: op, Input: &wire.Input{Policy: "drop-newest", Capacity: 32}}
	if c, err := h.CheckChange(ok); err != nil || c.Overflow != mailbox.OverflowDropNewest {
		t.Fatalf("CheckChange = %+v, %v", c, err)
	}
	for _, tc := range []struct {
		name string
		c    *wire.Change
		want string
	}{
		{"another operator", &wire.Change{Task: 1, Op: "nope", Input: ok.Input}, "no task 1 headed by operator"},
		{"no such task", &wire.Change{Task: 7, Op: op, Input: ok.Input}, "no task 7"},
		{"the source", &wire.Change{Task: 0, Op: h.x.plan.Chains[0][0].Name(), Input: ok.Input}, "is a source"},
		{"no input", &wire.Change{Task: 1, Op: op}, "sets no input"},
		{"a spill", &wire.Change{Task: 1, Op: op, Input: &wire.Input{Policy: "spill", Capacity: 32}}, "spill"},
	} {
		if _, err := h.CheckChange(tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

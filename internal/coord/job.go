package coord

import (
	"fmt"
	"slices"
	"time"
)

// Job is the state of a job's lifecycle: the generations of its instances,
// their end, the final checkpoint, restarts within a budget, drain and
// abort. The job actor feeds it what happens (Launched, InstanceFinished,
// InstanceFailed, ...) with the time of its injected clock, and carries out
// the actions Step returns (StopGeneration, ScheduleRelaunch, Relaunch,
// TakeFinalCheckpoint, ..., Fail, End).
//
// The end of a job with checkpoints: every instance reports finished twice,
// when its input ended and when its sinks closed after the final checkpoint
// (Reported holds who reported once, Closed counts the second reports).
// The first round ends with TakeFinalCheckpoint; the job ends once that
// checkpoint completed and every instance closed. A job that ran to its end
// clears its checkpoints (the next run starts afresh); a drained one keeps
// them, the final checkpoint last, to resume from.
//
// A restart stops the generation (its instances here, and the processes
// that host the others), waits until all of them stopped and the backoff
// elapsed, and launches the next generation. Messages of an older
// generation are ignored.
type Job struct {
	Name        string // the topology, for errors
	Checkpoints bool   // the job takes checkpoints
	Distributed bool   // instances run in other processes too
	// Restart is the restart budget: nil makes the first failure fail the
	// job.
	Restart *Budget

	Gen   int
	Phase Phase

	// The generation running (or being launched).
	Instances  int      // every instance of the plan
	Local      int      // of them, in this process
	Hosts      []string // the other processes running instances, sorted
	Unfinished int      // instances that have not finished their input
	Reported   map[Slot]bool
	Closed     int
	FinalDone  bool // the final checkpoint completed
	Drained    bool // Drain was asked: keep the checkpoints

	// Restarting: what must stop before the next generation launches.
	Alive       int      // instances and hosts of the old generation still running
	WaitHosts   []string // hosts whose instances are stopping, sorted
	BackoffDone bool
	Restarts    int
	Times       []time.Time // the restarts that count against the budget, oldest first
}

// Budget allows at most Max restarts within any window of length Within:
// a restart at t counts while now < t+Within.
type Budget struct {
	Max    int
	Within time.Duration
}

// Phase is where a job is in its lifecycle.
type Phase uint8

const (
	Launching  Phase = iota // a generation is being launched
	Running                 // its instances run
	Restarting              // the generation is stopping; the next follows the backoff
	Ended                   // the job failed or ended: nothing more happens
)

func (p Phase) String() string {
	switch p {
	case Launching:
		return "launching"
	case Running:
		return "running"
	case Restarting:
		return "restarting"
	case Ended:
		return "ended"
	}
	return fmt.Sprintf("Phase(%d)", uint8(p))
}

// Slot names an instance: its task and its index within the task.
type Slot struct{ Task, Instance int }

// A JobEvent is an input of the lifecycle. Every event carries the time of
// the job's clock when it happened.
type JobEvent interface{ jobEvent() }

// The lifecycle's events.
type (
	// Launched: generation Gen's instances were spawned (Local of them
	// here, the others on Hosts) and started.
	Launched struct {
		At        time.Time
		Instances int
		Local     int
		Hosts     []string
	}
	// LaunchFailed: launching the generation failed; Retryable when a
	// process may have left while it was deployed to (a distributed job
	// then restarts), with what was already started.
	LaunchFailed struct {
		At        time.Time
		Err       error
		Retryable bool
		Local     int
		Hosts     []string
	}
	// InstanceFinished: an instance of generation Gen finished its input
	// (the first report) or closed its sinks after the final checkpoint
	// (the second).
	InstanceFinished struct {
		At   time.Time
		Gen  int
		Slot Slot
	}
	// InstanceFailed: an instance of generation Gen failed with Err.
	InstanceFailed struct {
		At  time.Time
		Gen int
		Err error
	}
	// InstanceTerminated: an instance of generation Gen in this process
	// stopped.
	InstanceTerminated struct {
		At  time.Time
		Gen int
	}
	// HostStopped: the process at Addr stopped its instances of generation
	// Gen.
	HostStopped struct {
		At   time.Time
		Gen  int
		Addr string
	}
	// HostLost: the process at Addr left, or its connection broke.
	HostLost struct {
		At   time.Time
		Addr string
	}
	// BackoffElapsed: the restart backoff of generation Gen elapsed.
	BackoffElapsed struct {
		At  time.Time
		Gen int
	}
	// DrainAsked: the job was asked to drain: sources stop, in-flight
	// records finish, and the checkpoints are kept.
	DrainAsked struct{ At time.Time }
	// AbortAsked: the job was stopped; Err is its outcome.
	AbortAsked struct {
		At  time.Time
		Err error
	}
	// FinalCheckpointDone: the final checkpoint completed.
	FinalCheckpointDone struct{ At time.Time }
	// FinalCheckpointFailed: the final checkpoint could not be stored.
	FinalCheckpointFailed struct {
		At  time.Time
		Err error
	}
)

func (Launched) jobEvent()              {}
func (LaunchFailed) jobEvent()          {}
func (InstanceFinished) jobEvent()      {}
func (InstanceFailed) jobEvent()        {}
func (InstanceTerminated) jobEvent()    {}
func (HostStopped) jobEvent()           {}
func (HostLost) jobEvent()              {}
func (BackoffElapsed) jobEvent()        {}
func (DrainAsked) jobEvent()            {}
func (AbortAsked) jobEvent()            {}
func (FinalCheckpointDone) jobEvent()   {}
func (FinalCheckpointFailed) jobEvent() {}

// A JobAction is what the lifecycle asks the job actor to do.
type JobAction interface{ jobAction() }

// The lifecycle's actions.
type (
	// StopGeneration: stop generation Gen: its instances here, and those
	// of every host but Lost (which left); stop the checkpoint timer.
	StopGeneration struct {
		Gen  int
		Lost string
	}
	// ScheduleRelaunch: restart number Restart, after Err: feed
	// BackoffElapsed for Gen once the backoff's delay for it has passed.
	ScheduleRelaunch struct {
		Gen, Restart int
		Err          error
	}
	// Relaunch: launch generation Gen from the latest checkpoint, then
	// feed Launched or LaunchFailed.
	Relaunch struct{ Gen int }
	// TakeFinalCheckpoint: every instance finished its input; the
	// checkpoint coordinator takes the final checkpoint.
	TakeFinalCheckpoint struct{}
	// StopCheckpoints: start no new periodic checkpoint (a drain).
	StopCheckpoints struct{}
	// DrainSources: tell the sources of the generation to stop reading.
	DrainSources struct{ Gen int }
	// ClearCheckpoints: the job ran to its end; forget its checkpoints.
	ClearCheckpoints struct{}
	// Fail: the job ends with Err.
	Fail struct{ Err error }
	// End: the job ended well.
	End struct{}
)

func (StopGeneration) jobAction()      {}
func (ScheduleRelaunch) jobAction()    {}
func (Relaunch) jobAction()            {}
func (TakeFinalCheckpoint) jobAction() {}
func (StopCheckpoints) jobAction()     {}
func (DrainSources) jobAction()        {}
func (ClearCheckpoints) jobAction()    {}
func (Fail) jobAction()                {}
func (End) jobAction()                 {}

// Step is the lifecycle's transition function: it returns the new state and
// the actions to carry out, and changes neither s nor ev. It does no I/O,
// and the only time it reads is the events'.
func (s Job) Step(ev JobEvent) (Job, []JobAction) {
	if s.Phase == Ended {
		return s, nil
	}
	switch e := ev.(type) {
	case Launched:
		if s.Phase != Launching {
			return s, nil
		}
		s.Phase = Running
		s.Instances, s.Local, s.Hosts = e.Instances, e.Local, sortedCopy(e.Hosts)
		s.Unfinished, s.Reported, s.Closed, s.FinalDone = e.Instances, map[Slot]bool{}, 0, false
		if s.Drained { // asked while the generation was being replaced
			return s, s.drain()
		}
		return s, nil
	case LaunchFailed:
		if s.Phase != Launching {
			return s, nil
		}
		if e.Retryable && s.Distributed {
			s.Local, s.Hosts = e.Local, sortedCopy(e.Hosts)
			return s.restart(e.At, e.Err, "")
		}
		return s.fail(e.Err)
	case InstanceFinished:
		if s.Phase != Running || e.Gen != s.Gen {
			return s, nil // of a generation being replaced
		}
		if !s.Checkpoints {
			s.Unfinished--
			if s.Unfinished == 0 {
				s.Phase = Ended
				return s, []JobAction{End{}}
			}
			return s, nil
		}
		if s.Reported[e.Slot] { // its sinks closed after the final checkpoint
			s.Closed++
			return s.maybeEnd()
		}
		s.Reported = cloneMap(s.Reported)
		s.Reported[e.Slot] = true
		s.Unfinished--
		if s.Unfinished == 0 {
			// Every instance finished its input and nothing is in flight:
			// take the final checkpoint, which commits the sinks' tail.
			return s, []JobAction{TakeFinalCheckpoint{}}
		}
		return s, nil
	case InstanceFailed:
		if s.Phase != Running || e.Gen != s.Gen {
			return s, nil // a failure of a generation being replaced
		}
		return s.restart(e.At, e.Err, "")
	case InstanceTerminated:
		if s.Phase != Restarting || e.Gen != s.Gen {
			return s, nil
		}
		s.Alive--
		return s.maybeRelaunch()
	case HostStopped:
		if s.Phase != Restarting || e.Gen != s.Gen || !slices.Contains(s.WaitHosts, e.Addr) {
			return s, nil
		}
		s.WaitHosts = without(s.WaitHosts, e.Addr)
		s.Alive--
		return s.maybeRelaunch()
	case HostLost:
		switch {
		case s.Phase == Restarting && slices.Contains(s.WaitHosts, e.Addr):
			s.WaitHosts = without(s.WaitHosts, e.Addr)
			s.Alive--
			return s.maybeRelaunch()
		case s.Phase == Running && slices.Contains(s.Hosts, e.Addr):
			return s.restart(e.At, fmt.Errorf("operators: topology %q: the process at %s, which runs instances of it, left or its connection broke", s.Name, e.Addr), e.Addr)
		}
		return s, nil
	case BackoffElapsed:
		if s.Phase != Restarting || e.Gen != s.Gen {
			return s, nil
		}
		s.BackoffDone = true
		return s.maybeRelaunch()
	case DrainAsked:
		if s.Drained {
			return s, nil
		}
		s.Drained = true
		if s.Phase != Running {
			return s, nil // the next generation drains once it is launched
		}
		return s, s.drain()
	case AbortAsked:
		return s.fail(e.Err)
	case FinalCheckpointDone:
		if s.Phase != Running {
			return s, nil
		}
		s.FinalDone = true
		return s.maybeEnd()
	case FinalCheckpointFailed:
		if s.Phase != Running {
			return s, nil
		}
		return s.restart(e.At, e.Err, "")
	}
	return s, nil // the event types are sealed: not reached
}

// drain is what a drain asks of a running generation.
func (s Job) drain() []JobAction {
	var acts []JobAction
	if s.Checkpoints {
		acts = append(acts, StopCheckpoints{})
	}
	return append(acts, DrainSources{Gen: s.Gen})
}

func (s Job) fail(err error) (Job, []JobAction) {
	s.Phase = Ended
	return s, []JobAction{Fail{Err: err}}
}

// restart stops the generation and schedules the next, or fails the job
// when it may not restart. lost is a process that left, whose instances are
// not waited for.
func (s Job) restart(at time.Time, err error, lost string) (Job, []JobAction) {
	b := s.Restart
	if b == nil {
		return s.fail(err)
	}
	times := make([]time.Time, 0, len(s.Times)+1)
	for _, t := range s.Times {
		if at.Before(t.Add(b.Within)) {
			times = append(times, t)
		}
	}
	if b.Max < 0 || b.Within <= 0 || len(times) >= b.Max {
		return s.fail(fmt.Errorf("operators: topology %q: %d restarts within %v spent, giving up: %w", s.Name, b.Max, b.Within, err))
	}
	s.Times = append(times, at)
	s.Restarts++
	s.Phase, s.BackoffDone = Restarting, false
	s.WaitHosts = without(s.Hosts, lost)
	s.Alive = s.Local + len(s.WaitHosts)
	return s, []JobAction{StopGeneration{Gen: s.Gen, Lost: lost}, ScheduleRelaunch{Gen: s.Gen, Restart: s.Restarts, Err: err}}
}

// maybeRelaunch launches the next generation once the old one has stopped
// and the backoff has elapsed.
func (s Job) maybeRelaunch() (Job, []JobAction) {
	if s.Alive > 0 || !s.BackoffDone {
		return s, nil
	}
	s.Gen++
	s.Phase = Launching
	return s, []JobAction{Relaunch{Gen: s.Gen}}
}

// maybeEnd ends a job with checkpoints once its final checkpoint completed
// and every instance closed its sinks.
func (s Job) maybeEnd() (Job, []JobAction) {
	if !s.FinalDone || s.Closed < s.Instances {
		return s, nil
	}
	s.Phase = Ended
	if s.Drained {
		return s, []JobAction{End{}}
	}
	return s, []JobAction{ClearCheckpoints{}, End{}}
}

func sortedCopy(xs []string) []string {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}

// without returns xs without x, a new slice.
func without(xs []string, x string) []string {
	out := make([]string, 0, len(xs))
	for _, v := range xs {
		if v != x {
			out = append(out, v)
		}
	}
	return out
}

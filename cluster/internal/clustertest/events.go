package clustertest

import (
	"fmt"
	"sync"

	"github.com/sluicehq/sluice/cluster"
)

// Say returns a printf to standard output, one line a call, safe for
// concurrent use: how a child node tells its test what happens.
func Say() func(format string, args ...any) {
	var mu sync.Mutex
	return func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
}

// PrintEvents prints a child node's events as the tests read them:
//
//	EVENT <joined|left|excluded> <name> <id>
//	CHANGED <job> <operator> <change> <version> <unix nanoseconds>
//	TOOKOVER <job> <from> <checkpoint> <unix nanoseconds>, then what Report prints
//
// dir gives the counting job's output folder when a job is taken over.
// wait waits for the reports of the jobs taken over (call it before the
// node's process ends).
func PrintEvents(n *cluster.Node, dir func() string, say func(string, ...any)) (wait func()) {
	var reports sync.WaitGroup
	n.SubscribeJobs(func(ev cluster.JobEvent) {
		switch ev.Kind {
		case cluster.JobChanged:
			say("CHANGED %s %s %d %d %d", ev.Job, ev.Operator, ev.Change, ev.Version, ev.Time.UnixNano())
		case cluster.JobTakenOver:
			say("TOOKOVER %s %s %d %d", ev.Job, ev.From, ev.Checkpoint, ev.Time.UnixNano())
			reports.Add(1)
			go func() {
				defer reports.Done()
				Report(ev.Run, dir(), say)
			}()
		}
	})
	n.Subscribe(func(ev cluster.MemberEvent) {
		say("EVENT %v %s %s", ev.Kind, ev.Member.Name, ev.Member.ID)
	})
	return reports.Wait
}

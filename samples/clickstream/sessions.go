package clickstream

import (
	"cmp"
	"slices"
	"time"

	"github.com/sluicehq/sluice/operators"
)

// Session is a user's session as the job emits it: from the first click to
// the last one plus the gap (End), with its clicks and the distinct pages
// visited. A session updated by a click that arrived late (within the
// allowed lateness) is emitted again, with that click; a click that joins
// two sessions into one makes a result that holds the clicks of both.
type Session struct {
	User   string
	Start  time.Time // the first click
	End    time.Time // the last click + the gap
	Clicks []int64   // their Seq, ascending
	Pages  []string  // distinct, sorted
}

// Visit is the accumulator of a session: its clicks and distinct pages.
// Its functions never modify a Visit in place: a session already emitted
// keeps its value.
type Visit struct {
	Clicks []int64  `msgpack:"c"` // Seq, ascending
	Pages  []string `msgpack:"p"` // distinct, sorted
}

// AddClick returns v with c added.
func AddClick(v Visit, c Click) Visit {
	return MergeVisits(v, Visit{Clicks: []int64{c.Seq}, Pages: []string{c.Page}})
}

// MergeVisits returns the union of two sessions' visits, for sessions that
// a click joins into one.
func MergeVisits(a, b Visit) Visit {
	clicks := slices.Concat(a.Clicks, b.Clicks)
	slices.Sort(clicks)
	pages := slices.Concat(a.Pages, b.Pages)
	slices.Sort(pages)
	return Visit{Clicks: clicks, Pages: slices.Compact(pages)}
}

// Sessionize is the job's core: event time from the clicks (Timestamps,
// watermarks trailing the largest time seen by outOfOrder), the clicks
// keyed by user over parallelism instances, and session windows of gap
// kept for lateness after they fire. Clicks that arrive too late for any
// session go to late (if not nil) and are counted in the "sessions"
// operator's OperatorStats.Late.
//
//	event-time (timestamps) ==hash by user==> sessions (window) -> session (map)
func Sessionize(clicks operators.Stream[Click], outOfOrder, gap, lateness time.Duration, late operators.SinkConnector[Click], parallelism int) operators.Stream[Session] {
	timed := operators.Timestamps(clicks, "event-time", Click.EventTime, operators.OutOfOrderness(outOfOrder))
	byUser := operators.KeyBy(timed, "by-user", func(c Click) string { return c.User }, operators.Parallelism(parallelism))
	windows := operators.WindowAggregate(byUser, "sessions", operators.Sessions(gap),
		func() Visit { return Visit{} }, AddClick, MergeVisits, operators.AllowedLateness(lateness))
	if late != nil {
		operators.Sink(operators.LateRecords(byUser, windows, "late"), "late-clicks", late)
	}
	return operators.Map(windows, "session", func(w operators.Windowed[string, Visit]) Session {
		return Session{User: w.Key, Start: w.Start, End: w.End, Clicks: w.Value.Clicks, Pages: w.Value.Pages}
	})
}

// Final reduces the results of the job, in the order each user's were
// emitted, to the sessions as they finally are: a result replaces the
// earlier ones of the same user whose clicks it holds (an update, or
// sessions that a late click joined). The sessions come ordered by user
// and start. (A session's clicks are never split: two results hold the
// same clicks, or one holds the other's, or they share none.)
func Final(results []Session) []Session {
	byUser := map[string][]Session{}
	var users []string
	for _, s := range results {
		list, seen := byUser[s.User]
		if !seen {
			users = append(users, s.User)
		}
		list = slices.DeleteFunc(list, func(old Session) bool {
			_, found := slices.BinarySearch(s.Clicks, old.Clicks[0])
			return found
		})
		byUser[s.User] = append(list, s)
	}
	slices.Sort(users)
	var out []Session
	for _, u := range users {
		list := byUser[u]
		slices.SortFunc(list, func(a, b Session) int { return a.Start.Compare(b.Start) })
		out = append(out, list...)
	}
	return out
}

// ByUser groups results by user, keeping each user's in their order.
func ByUser(results []Session) map[string][]Session {
	m := map[string][]Session{}
	for _, s := range results {
		m[s.User] = append(m[s.User], s)
	}
	return m
}

// longest orders sessions by clicks, then duration, then user and start.
func longest(a, b Session) int {
	return cmp.Or(cmp.Compare(len(b.Clicks), len(a.Clicks)), cmp.Compare(b.End.Sub(b.Start), a.End.Sub(a.Start)),
		cmp.Compare(a.User, b.User), a.Start.Compare(b.Start))
}

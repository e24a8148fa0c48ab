package clickstream

import (
	"math"
	"slices"
	"time"
)

// Expected is what the job must produce for a click stream, computed by
// Expect with a plain loop.
type Expected struct {
	// Results are the sessions the job emits, each user's in the order the
	// job emits them (users interleave in any order).
	Results []Session
	// Late are the clicks that arrive after every session they could join
	// has closed, past the allowed lateness: the job's late output.
	Late []Click
	// OutOfOrder counts the clicks that arrived after a click with a later
	// event time, but ahead of the watermark.
	OutOfOrder int
	// Behind counts the clicks that arrived at or behind the watermark and
	// still joined a session: one still open, or one within its allowed
	// lateness, which is emitted again.
	Behind int
}

// Expect computes, with a plain loop over the clicks in their arrival
// order, what the sessionizing job does with them: the watermark after
// each click is the largest event time seen so far less outOfOrder and one
// nanosecond (the job reads one click per batch, so its watermark follows
// every click); a click joins the sessions of its user that overlap
// [t, t+gap) into one; a session fires when the watermark reaches its last
// instant, and is kept for lateness afterwards; a click whose session
// would end (less one nanosecond) more than lateness before the watermark
// is late. At the end of the input every session not yet fired fires.
func Expect(clicks []Click, outOfOrder, gap, lateness time.Duration) Expected {
	type sess struct {
		start, end int64 // [first click, last click + gap)
		v          Visit
		fired      bool
	}
	var (
		exp        Expected
		open       = map[string][]sess{}
		users      []string // sorted
		wm, maxSet = int64(math.MinInt64), int64(math.MinInt64)
		g, lt, ooo = int64(gap), int64(lateness), int64(outOfOrder)
	)
	emit := func(user string, s sess) {
		exp.Results = append(exp.Results, Session{User: user, Start: time.Unix(0, s.start).UTC(),
			End: time.Unix(0, s.end).UTC(), Clicks: s.v.Clicks, Pages: s.v.Pages})
	}
	for _, c := range clicks {
		t := c.At.UnixNano()
		merged := sess{start: t, end: t + g, v: Visit{Clicks: []int64{c.Seq}, Pages: []string{c.Page}}}
		var rest []sess
		for _, s := range open[c.User] {
			if s.start < t+g && t < s.end {
				merged.start, merged.end = min(merged.start, s.start), max(merged.end, s.end)
				merged.v = MergeVisits(merged.v, s.v)
			} else {
				rest = append(rest, s)
			}
		}
		switch {
		case merged.end-1+lt <= wm:
			exp.Late = append(exp.Late, c)
		default:
			switch {
			case t <= wm:
				exp.Behind++
			case t < maxSet:
				exp.OutOfOrder++
			}
			if merged.end-1 <= wm { // within the allowed lateness: emitted at once
				merged.fired = true
				emit(c.User, merged)
			}
			if _, seen := open[c.User]; !seen {
				i, _ := slices.BinarySearch(users, c.User)
				users = slices.Insert(users, i, c.User)
			}
			rest = append(rest, merged)
			slices.SortFunc(rest, func(a, b sess) int { return cmpInt64(a.start, b.start) })
			open[c.User] = rest
		}

		maxSet = max(maxSet, t)
		if next := maxSet - ooo - 1; next > wm {
			wm = next
			for _, u := range users {
				list := open[u] // sorted by start, so by end: sessions are disjoint
				for i := range list {
					if !list[i].fired && list[i].end-1 <= wm {
						emit(u, list[i])
						list[i].fired = true
					}
				}
				open[u] = slices.DeleteFunc(list, func(s sess) bool { return s.fired && s.end-1+lt <= wm })
			}
		}
	}
	for _, u := range users {
		for _, s := range open[u] {
			if !s.fired {
				emit(u, s)
			}
		}
	}
	return exp
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

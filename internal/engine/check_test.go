package engine

import (
	"testing"

	"github.com/sluicehq/sluice/mailbox"
)

func TestAccountErrors(t *testing.T) {
	var dropped [len(mailbox.Stats{}.Dropped)]int64
	dropped[0] = 2
	for _, c := range []struct {
		name  string
		s     mailbox.Stats
		ended bool
		errs  int
	}{
		{"balanced", mailbox.Stats{Posted: 10, Delivered: 5, Depth: 3, Dropped: dropped}, false, 0},
		{"spilled counts as queued", mailbox.Stats{Posted: 10, Delivered: 8, SpillPending: 2}, false, 0},
		{"a record lost", mailbox.Stats{Posted: 10, Delivered: 9}, false, 1},
		{"queued after the end", mailbox.Stats{Posted: 10, Delivered: 7, Depth: 3}, true, 1},
		{"spilled after the end", mailbox.Stats{Posted: 10, Delivered: 7, SpillPending: 3}, true, 1},
		{"lost and queued after the end", mailbox.Stats{Posted: 10, Delivered: 5, Depth: 3}, true, 2},
	} {
		if errs := accountErrors("op", c.s, c.ended); len(errs) != c.errs {
			t.Errorf("%s: %v, want %d errors", c.name, errs, c.errs)
		}
	}
}

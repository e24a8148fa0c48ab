package clickstream_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/samples/clickstream"
)

// The sample, run small: its report is the same on every run, since the
// job reads one click per batch and a watermark follows every click.
func ExampleSample() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := clickstream.DefaultConfig()
	cfg.Users, cfg.Clicks = 10, 2000
	s := clickstream.New()
	s.Configure(cfg, 2, 3)
	top, err := s.Topology()
	if err != nil {
		fmt.Println(err)
		return
	}
	sys, err := actors.NewSystem(actors.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sys.Stop(ctx)
	run, err := sys.Run(ctx, top)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := run.Wait(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if err := s.Report(os.Stdout); err != nil {
		fmt.Println(err)
	}
	// Output:
	// 2000 clicks of 10 users (seed 1): 188 arrived out of order within 5s, 40 were delayed beyond it
	// 437 sessions (gap 30s) in 449 results: 30 clicks arrived behind the watermark and still joined a session (open, or fired and within the allowed lateness of 1m0s: emitted again)
	// 10 clicks arrived past the allowed lateness: counted late, sent to the late output
	// every session and late click equals the direct computation
	// longest sessions:
	//    1  user-009  10:38:43 - 10:43:08   27 clicks  12 pages
	//    2  user-005  10:11:08 - 10:15:33   21 clicks  10 pages
	//    3  user-002  10:34:11 - 10:37:46   21 clicks   9 pages
}

// Expect is the plain loop the job is checked against: here a session
// that fires, is updated by a click within the allowed lateness, and a
// click that comes too late for any session.
func ExampleExpect() {
	at := func(sec int) time.Time { return clickstream.Epoch.Add(time.Duration(sec) * time.Second) }
	clicks := []clickstream.Click{ // in arrival order
		{Seq: 0, User: "ann", Page: "/", At: at(0)},
		{Seq: 1, User: "ann", Page: "/cart", At: at(10)},
		{Seq: 3, User: "ann", Page: "/", At: at(80)},     // the watermark passes 40s: [0s, 40s) fires
		{Seq: 2, User: "ann", Page: "/help", At: at(15)}, // behind it, within the allowed lateness
		{Seq: 4, User: "ann", Page: "/", At: at(200)},    // [0s, 45s) is dropped, [80s, 110s) fires
		{Seq: 5, User: "ann", Page: "/", At: at(5)},      // too late
	}
	exp := clickstream.Expect(clicks, 0, 30*time.Second, time.Minute)
	for _, s := range exp.Results {
		fmt.Printf("%s [%s, %s) clicks %v pages %v\n", s.User, s.Start.Format(time.TimeOnly), s.End.Format(time.TimeOnly), s.Clicks, s.Pages)
	}
	fmt.Println("late:", exp.Late[0].Seq, "| behind the watermark, joined:", exp.Behind)
	// Output:
	// ann [09:00:00, 09:00:40) clicks [0 1] pages [/ /cart]
	// ann [09:00:00, 09:00:45) clicks [0 1 2] pages [/ /cart /help]
	// ann [09:01:20, 09:01:50) clicks [3] pages [/]
	// ann [09:03:20, 09:03:50) clicks [4] pages [/]
	// late: 5 | behind the watermark, joined: 1
}

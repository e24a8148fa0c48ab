package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/mailbox"
	"github.com/sluicehq/sluice/persistence"
)

func storeCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "store",
		Short: "look into sluice store files",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return fmt.Errorf("%s: name a subcommand (see --help)", cmd.CommandPath())
		},
	}
	c.AddCommand(&cobra.Command{
		Use:   "inspect FILE",
		Short: "list a store's journals, snapshots, checkpoints and spill queues (read-only)",
		Long: "inspect opens a store file read-only, so that it never changes it, and lists the\n" +
			"persistence ids with their sequence ranges, the snapshots, the newest checkpoint of\n" +
			"each job and the spill queues. A file written by another program, by a newer sluice,\n" +
			"or damaged is refused with an error that says so. A store in use by a running\n" +
			"sluice is locked: inspect waits a second, then says so.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return inspectStore(g.stdout, args[0]) },
	})
	c.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "check a store's B+tree in full (read-only)",
		Long: "check opens a store file read-only and checks it in full, whatever its size: its\n" +
			"format marker, every bucket and key read back, then bbolt's consistency check (page\n" +
			"references, the freelist, key order). Opening a store checks files up to 64 MiB this\n" +
			"way; check does it for larger ones on demand. It prints \"ok\" or the damage found,\n" +
			"and exits non-zero for a damaged, foreign, newer or empty file.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := store.Check(args[0]); err != nil {
				return err
			}
			st, err := os.Stat(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "store %s: ok (%s checked)\n", args[0], bytesHuman(st.Size()))
			return nil
		},
	})
	return c
}

// openReadOnly opens the store file at path read-only and checks its format
// marker. Nothing is ever written to the file.
func openReadOnly(path string) (*bolt.DB, int, error) {
	f, version, err := store.OpenReadOnly(path)
	if err != nil {
		return nil, 0, err
	}
	return f.DB, version, nil
}

func inspectStore(w io.Writer, path string) (err error) {
	db, version, err := openReadOnly(path)
	if err != nil {
		return err
	}
	defer db.Close()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("store %s: %w: %v", path, store.ErrCorrupt, r)
		}
	}()
	inv, err := persistence.Inspect(db)
	if err != nil {
		return err
	}
	queues, qerr := mailbox.NewSpillStore(db).Queues()
	if qerr != nil && queues == nil {
		return fmt.Errorf("store %s: spill queues: %w", path, qerr)
	}
	var size int64
	_ = db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil })
	fmt.Fprintf(w, "store %s: %s, format version %d\n", path, bytesHuman(size), version)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	section := func(title string, n int) bool {
		tw.Flush()
		fmt.Fprintf(w, "\n%s (%d)", title, n)
		if n == 0 {
			fmt.Fprintln(w, ": none")
			return false
		}
		fmt.Fprintln(w, ":")
		return true
	}
	if section("journals", len(inv.Journals)) {
		fmt.Fprintln(tw, "  PERSISTENCE ID\tEVENTS\tLOWEST\tHIGHEST\tBYTES")
		for _, j := range inv.Journals {
			lowest := "-"
			if j.Events > 0 {
				lowest = fmt.Sprint(j.Lowest)
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\t%d\n", j.ID, j.Events, lowest, j.Highest, j.Bytes)
		}
	}
	if l := inv.Log; l.Entries > 0 {
		tw.Flush()
		fmt.Fprintf(w, "  log: %d group commits not compacted yet (%d events, %s)", l.Entries, l.Events, bytesHuman(l.Bytes))
		if l.Damaged > 0 {
			fmt.Fprintf(w, "; %d damaged", l.Damaged)
		}
		fmt.Fprintln(w)
	}
	if section("snapshots", len(inv.Snapshots)) {
		fmt.Fprintln(tw, "  PERSISTENCE ID\tSEQ\tSIZE\tTIME")
		for _, s := range inv.Snapshots {
			when := s.Time.UTC().Format(time.RFC3339)
			if s.Err != nil {
				when = "unreadable: " + s.Err.Error()
			}
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\n", s.ID, s.Seq, s.Size, when)
		}
	}
	if section("checkpoints", len(inv.Checkpoints)) {
		fmt.Fprintln(tw, "  JOB\tCHECKPOINT\tTIME\tSTATES\tOFFSETS\tBYTES")
		for _, c := range inv.Checkpoints {
			if c.Err != nil {
				fmt.Fprintf(tw, "  %s\t%d\tunreadable: %v\t\t\t%d\n", c.Job, c.ID, c.Err, c.Bytes)
				continue
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\t%d\t%d\n", c.Job, c.ID, c.Time.UTC().Format(time.RFC3339), c.States, c.Offsets, c.Bytes)
		}
	}
	if section("spill queues", len(queues)) {
		fmt.Fprintln(tw, "  QUEUE\tMESSAGES\tGROUPS\tBYTES\tDAMAGED")
		for _, q := range queues {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\n", q.Name, q.Messages, q.Groups, q.Bytes, q.Damaged)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if qerr != nil {
		return fmt.Errorf("store %s: spill queues: %w", path, qerr)
	}
	return nil
}

func bytesHuman(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/internal/savepoint"
	"github.com/sluicehq/sluice/internal/stage"
)

func savepointCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "savepoint",
		Short: "look into savepoints",
		Long: "A savepoint is a job's state in a directory of its own, written by Job.Savepoint or by\n" +
			"`sluice run SAMPLE --savepoint DIR` (on Ctrl-C), from which a job of the same topology\n" +
			"starts at any parallelism (FromSavepoint, `sluice run SAMPLE --from-savepoint DIR`).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return fmt.Errorf("%s: name a subcommand (see --help)", cmd.CommandPath())
		},
	}
	c.AddCommand(&cobra.Command{
		Use:   "inspect DIR",
		Short: "print what a savepoint holds (read-only)",
		Long: "inspect reads a savepoint's MANIFEST and state files, checks each file's size and\n" +
			"SHA-256 and decodes it, and prints the job, the checkpoint, the plan's fingerprint, every\n" +
			"operator with its parallelism and the key-group range and state size of each instance,\n" +
			"and the sources' offsets. A damaged, truncated, foreign or newer-format savepoint is\n" +
			"refused with an error naming the file. It only reads.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return inspectSavepoint(g.stdout, args[0]) },
	})
	return c
}

func inspectSavepoint(w io.Writer, dir string) error {
	sp, err := savepoint.Open(dir)
	if err != nil {
		return err
	}
	m := sp.Manifest
	fmt.Fprintf(w, "savepoint %s\n", dir)
	fmt.Fprintf(w, "  format       %s version %d\n", m.Kind, m.Version)
	fmt.Fprintf(w, "  id           %s\n", m.ID)
	fmt.Fprintf(w, "  job          %s\n", m.Job)
	fmt.Fprintf(w, "  checkpoint   %d, taken %s\n", m.Checkpoint, sp.Taken().UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(w, "  fingerprint  %s\n", m.Plan.Fingerprint)
	fmt.Fprintf(w, "  key groups   %d\n", stage.KeyGroups)
	fmt.Fprintln(w, "operators:")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tKIND\tPARALLELISM\tSTATE")
	for _, o := range m.Plan.Operators {
		var parts []string
		total := int64(0)
		for i := range o.Parallelism {
			b, ok := sp.States[fmt.Sprintf("%s/%d", o.Name, i)]
			if !ok {
				continue
			}
			total += int64(len(b))
			if o.KeyGrouped {
				lo, hi := stage.KeyGroupRange(i, o.Parallelism)
				parts = append(parts, fmt.Sprintf("%d: groups [%d, %d) %s", i, lo, hi, bytesHuman(int64(len(b)))))
			}
		}
		desc := "none"
		switch {
		case o.Source:
			var offs []string
			for i := range o.Parallelism {
				offs = append(offs, fmt.Sprintf("%d@%d", i, m.Offsets[fmt.Sprintf("%s/%d", o.Name, i)]))
			}
			desc = "offsets " + strings.Join(offs, " ")
		case o.KeyGrouped && len(parts) > 0:
			desc = "per key: " + strings.Join(parts, "; ")
		case total > 0:
			desc = fmt.Sprintf("%s in all (not per key: keeps its parallelism)", bytesHuman(total))
		}
		fin := 0
		for i := range o.Parallelism {
			if m.Offsets[fmt.Sprintf("%s/%d#finished", o.Head, i)] != 0 {
				fin++
			}
		}
		if fin > 0 {
			desc += fmt.Sprintf(" (%d of %d instances finished)", fin, o.Parallelism)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", o.Name, o.Kind, o.Parallelism, desc)
	}
	tw.Flush()
	fmt.Fprintln(w, "files:")
	for _, f := range m.Files {
		fmt.Fprintf(w, "  %s  %s  %s  sha256 %s\n", f.Name, f.Operator, bytesHuman(f.Size), f.SHA256)
	}
	return nil
}

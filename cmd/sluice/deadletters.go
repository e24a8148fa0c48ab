package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/supervision"
)

// deadLettersCmd is `sluice deadletters list|show|replay|purge`: the dead
// letters kept in a store file (see package supervision).
func deadLettersCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "deadletters",
		Short: "list, show, replay or purge the dead letters of a store file",
		Long: `The dead letters of a store file: records that an operator gave up on, with
the job, operator and instance, the error, the attempts and the time.

  sluice deadletters list   --store FILE [--job J] [--operator O] [--limit N]
  sluice deadletters show   --store FILE SEQ
  sluice deadletters replay --store FILE SEQ | --all [--job J] [--operator O] [--delete]
  sluice deadletters purge  --store FILE --all | [--job J] [--operator O]

list and show, and replay without --delete, open the file read-only.
replay writes the payloads as JSON lines to stdout, to be fed back into a
job (an ingress, say); with --delete it then removes what it wrote.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return fmt.Errorf("%s: name a subcommand: list, show, replay or purge", cmd.CommandPath())
		},
	}
	c.AddCommand(dlListCmd(g), dlShowCmd(g), dlReplayCmd(g), dlPurgeCmd(g))
	return c
}

// dlFlags are the flags the subcommands share.
type dlFlags struct {
	store    string
	job      string
	operator string
}

func (f *dlFlags) addStore(c *cobra.Command) {
	c.Flags().StringVar(&f.store, "store", "", "the store file (required)")
	_ = c.MarkFlagRequired("store")
}

func (f *dlFlags) addFilter(c *cobra.Command) {
	c.Flags().StringVar(&f.job, "job", "", "only the dead letters of this job")
	c.Flags().StringVar(&f.operator, "operator", "", "only the dead letters of this operator")
}

func (f *dlFlags) filter() supervision.Filter {
	return supervision.Filter{Job: f.job, Operator: f.operator}
}

// open opens the store read-only, or read-write for the commands that
// delete. Either way the file must exist: a typo must not create a store.
func (f *dlFlags) open(write bool) (*supervision.BoltDeadLetters, error) {
	if !write {
		return supervision.OpenDeadLettersReadOnly(f.store)
	}
	if _, err := os.Stat(f.store); err != nil {
		return nil, fmt.Errorf("deadletters: %w", err)
	}
	return supervision.OpenDeadLetters(f.store)
}

func parseSeq(s string) (uint64, error) {
	seq, err := strconv.ParseUint(s, 10, 64)
	if err != nil || seq == 0 {
		return 0, fmt.Errorf("deadletters: %q is not a sequence number (see 'sluice deadletters list')", s)
	}
	return seq, nil
}

const dlTime = "2006-01-02T15:04:05.000Z07:00"

// oneLine keeps a multi-line error message on its line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func dlListCmd(g *globals) *cobra.Command {
	var f dlFlags
	var limit int
	c := &cobra.Command{
		Use:   "list --store FILE [--job J] [--operator O] [--limit N]",
		Short: "one line per dead letter: seq, time, job/operator/instance, attempts, error",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := f.open(false)
			if err != nil {
				return err
			}
			defer s.Close()
			ds, listErr := s.List(f.filter(), limit)
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			for _, d := range ds {
				fmt.Fprintf(tw, "%d\t%s\t%s/%s/%d\tattempts=%d\t%s\n", d.Seq, d.Time.UTC().Format(dlTime),
					d.Job, d.Operator, d.Instance, d.Attempts, oneLine(d.Error))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if u, err := s.Usage(); err == nil && u.Dropped > 0 {
				fmt.Fprintf(g.stderr, "%d dead letters were dropped at the store's cap\n", u.Dropped)
			}
			return listErr // records that do not decode, named by seq
		},
	}
	f.addStore(c)
	f.addFilter(c)
	c.Flags().IntVar(&limit, "limit", 0, "at most this many (0: all)")
	return c
}

func dlShowCmd(g *globals) *cobra.Command {
	var f dlFlags
	c := &cobra.Command{
		Use:   "show --store FILE SEQ",
		Short: "print one dead letter, its payload rendered as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := parseSeq(args[0])
			if err != nil {
				return err
			}
			s, err := f.open(false)
			if err != nil {
				return err
			}
			defer s.Close()
			d, err := s.Get(seq)
			if err != nil {
				return err
			}
			var b bytes.Buffer
			fmt.Fprintf(&b, "seq:       %d\n", d.Seq)
			fmt.Fprintf(&b, "time:      %s\n", d.Time.UTC().Format(dlTime))
			fmt.Fprintf(&b, "job:       %s\n", d.Job)
			fmt.Fprintf(&b, "operator:  %s\n", d.Operator)
			fmt.Fprintf(&b, "instance:  %d\n", d.Instance)
			fmt.Fprintf(&b, "attempts:  %d\n", d.Attempts)
			if d.TraceID != "" {
				fmt.Fprintf(&b, "trace id:  %s\n", d.TraceID)
			}
			fmt.Fprintf(&b, "error:     %s\n", d.Error)
			b.WriteString("payload:   " + renderPayload(d) + "\n")
			_, err = g.stdout.Write(b.Bytes())
			return err
		},
	}
	f.addStore(c)
	return c
}

// renderPayload is the payload as indented JSON; a payload that is not
// msgpack is shown as text (operators keep a record that msgpack cannot
// encode in its printed form) or, failing that, in hex.
func renderPayload(d supervision.DeadLetter) string {
	v, err := d.DecodePayload()
	if err == nil {
		js, jerr := json.MarshalIndent(v, "           ", "  ")
		if jerr == nil {
			return string(js)
		}
		err = jerr
	}
	if utf8.Valid(d.Payload) {
		return fmt.Sprintf("(not msgpack) %q", d.Payload)
	}
	return fmt.Sprintf("(does not decode: %v) 0x%s", err, hex.EncodeToString(d.Payload))
}

func dlReplayCmd(g *globals) *cobra.Command {
	var f dlFlags
	var all, del bool
	c := &cobra.Command{
		Use:   "replay --store FILE SEQ | --all [--job J] [--operator O] [--delete]",
		Short: "write dead letters' payloads as JSON lines to stdout, to be fed back",
		Long: `replay writes the payload of each chosen dead letter as one line of JSON to
stdout, in sequence order. With --delete it then removes the dead letters it
wrote (if the command dies in between, a replay repeats them: at-least-once).
A payload that is not msgpack cannot be replayed: it is reported on stderr,
kept, and the command fails after the others are written.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 1) == all {
				return errors.New("deadletters replay: give either a SEQ or --all")
			}
			if len(args) == 1 && (f.job != "" || f.operator != "") {
				return errors.New("deadletters replay: --job and --operator go with --all")
			}
			s, err := f.open(del)
			if err != nil {
				return err
			}
			defer s.Close()
			var ds []supervision.DeadLetter
			var readErr error
			if all {
				ds, readErr = s.List(f.filter(), 0)
			} else {
				seq, err := parseSeq(args[0])
				if err != nil {
					return err
				}
				d, err := s.Get(seq)
				if err != nil {
					return err
				}
				ds = []supervision.DeadLetter{d}
			}
			written, skipped, err := replay(g.stdout, g.stderr, ds)
			if err != nil {
				return err // stdout failed: delete nothing
			}
			if del {
				for _, seq := range written {
					if err := s.Delete(seq); err != nil {
						return err
					}
				}
			}
			if skipped > 0 {
				readErr = errors.Join(readErr, fmt.Errorf("deadletters replay: %d dead letters could not be replayed (see above)", skipped))
			}
			return readErr
		},
	}
	f.addStore(c)
	f.addFilter(c)
	c.Flags().BoolVar(&all, "all", false, "replay every dead letter that passes --job and --operator")
	c.Flags().BoolVar(&del, "delete", false, "remove the dead letters once written")
	return c
}

// replay writes one JSON line per payload and returns the sequence numbers
// written and the number skipped.
func replay(out, errOut io.Writer, ds []supervision.DeadLetter) (written []uint64, skipped int, err error) {
	for _, d := range ds {
		v, err := d.DecodePayload()
		var line []byte
		if err == nil {
			if line, err = json.Marshal(v); err != nil {
				err = fmt.Errorf("dead letter %d: payload as JSON: %w", d.Seq, err)
			}
		}
		if err != nil {
			fmt.Fprintf(errOut, "sluice: deadletters replay: %v: skipped\n", err)
			skipped++
			continue
		}
		if _, err := out.Write(append(line, '\n')); err != nil {
			return written, skipped, fmt.Errorf("deadletters replay: write dead letter %d: %w", d.Seq, err)
		}
		written = append(written, d.Seq)
	}
	return written, skipped, nil
}

func dlPurgeCmd(g *globals) *cobra.Command {
	var f dlFlags
	var all bool
	c := &cobra.Command{
		Use:   "purge --store FILE --all | [--job J] [--operator O]",
		Short: "remove dead letters and print how many",
		Long: `purge removes the dead letters that pass --job and --operator, or with --all
every dead letter, readable or not.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter := f.filter()
			if all == (filter != supervision.Filter{}) {
				return errors.New("deadletters purge: give --job and/or --operator, or --all")
			}
			s, err := f.open(true)
			if err != nil {
				return err
			}
			defer s.Close()
			n, err := s.Purge(filter)
			fmt.Fprintf(g.stdout, "purged %d dead letters from %s\n", n, f.store)
			return err
		},
	}
	f.addStore(c)
	f.addFilter(c)
	c.Flags().BoolVar(&all, "all", false, "remove every dead letter")
	return c
}

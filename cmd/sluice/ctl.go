package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/telemetry"
)

// tokenEnv names the environment variable that holds the admin API's
// bearer token, for `--admin` and for `sluice ctl`.
const tokenEnv = "SLUICE_ADMIN_TOKEN"

// readToken reads the token from a file (its first line) or, without one,
// from the environment.
func readToken(file string) (string, error) {
	if file == "" {
		return os.Getenv(tokenEnv), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	tok, _, _ := strings.Cut(string(b), "\n")
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", fmt.Errorf("admin token: %s is empty", file)
	}
	return tok, nil
}

// adminFlags serve the admin API from a process that runs jobs.
type adminFlags struct {
	addr, tokenFile, desired, savepoints string
}

func (f *adminFlags) add(c *cobra.Command, persistent bool) {
	fs := c.Flags()
	if persistent {
		fs = c.PersistentFlags()
	}
	fs.StringVar(&f.addr, "admin", "", "serve the admin API (sluice ctl) at http://ADDR/v1/ (a port alone binds 127.0.0.1)")
	fs.StringVar(&f.tokenFile, "admin-token-file", "", "file whose first line is the bearer token that changes through the admin API need (default: $"+tokenEnv+"; without either the API is read only)")
	fs.StringVar(&f.desired, "desired", "", "with --admin: a desired-state JSON document to apply, watched for edits")
	fs.StringVar(&f.savepoints, "admin-savepoints", "", "with --admin: the directory under which sluice ctl savepoint JOB NAME writes savepoints (without it, ctl savepoint takes a checkpoint now)")
}

// start serves the API when --admin was given (nil, no-op otherwise).
func (f *adminFlags) start(g *globals, tp telemetry.Providers) (*admin.Server, func(), error) {
	if f.addr == "" {
		if f.desired != "" {
			return nil, nil, errors.New("--desired needs --admin")
		}
		return nil, func() {}, nil
	}
	tok, err := readToken(f.tokenFile)
	if err != nil {
		return nil, nil, err
	}
	log, err := g.logger()
	if err != nil {
		return nil, nil, err
	}
	srv, err := admin.New(admin.Options{Token: tok, Logger: log, TracerProvider: tp.Tracer, SavepointDir: f.savepoints})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	url, wait, err := srv.Serve(ctx, f.addr)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("--admin: %w", err)
	}
	fmt.Fprintf(g.stderr, "admin API at %s/v1/\n", url)
	if _, loopback, _ := admin.ListenAddr(f.addr); !loopback {
		fmt.Fprintf(g.stderr, "warning: --admin %s is reachable beyond this machine (changes need the token; the API has no TLS)\n", f.addr)
	}
	if tok == "" {
		fmt.Fprintf(g.stderr, "admin API is read only: no token (give --admin-token-file or $%s)\n", tokenEnv)
	}
	return srv, func() { cancel(); _ = wait() }, nil
}

// watch starts applying the desired-state file once the jobs are added.
func (f *adminFlags) watch(srv *admin.Server) func() {
	if srv == nil || f.desired == "" {
		return func() {}
	}
	return srv.WatchFile(f.desired, 0)
}

func ctlCmd(g *globals) *cobra.Command {
	var addr, tokenFile string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "ctl",
		Short: "drive the admin API of a process that runs jobs (sluice run --admin, sluice node --admin)",
		Long: `Drive a running process's control plane. Reads need no token; changes need
the bearer token, from --token-file or $` + tokenEnv + `.

  sluice ctl list                                   the jobs
  sluice ctl show JOB                               inputs, accounting, checkpoints, plan
  sluice ctl history JOB                            the changes made to the job
  sluice ctl pause JOB SOURCE / resume JOB SOURCE   stop a source reading / let it read
  sluice ctl savepoint JOB [NAME]                   take a checkpoint now; with NAME, a savepoint under --admin-savepoints
  sluice ctl stop JOB [--savepoint NAME]            drain, keeping the final checkpoint; with NAME, stop with a savepoint under --admin-savepoints
  sluice ctl rescale JOB OPERATOR=N...              stop with a savepoint, start again from it at the new parallelism
  sluice ctl set-policy JOB OPERATOR --policy P [--capacity N] [--sample-every N] [--rate R]
  sluice ctl apply FILE                             push a desired-state document (JSON)
  sluice ctl desired                                the desired state: desired vs applied`,
	}
	c.PersistentFlags().StringVar(&addr, "addr", "127.0.0.1:7070", "the admin API's address (HOST:PORT, or a URL)")
	c.PersistentFlags().StringVar(&tokenFile, "token-file", "", "file whose first line is the bearer token (default: $"+tokenEnv+")")
	c.PersistentFlags().DurationVar(&timeout, "timeout", time.Minute, "how long a call may take")
	client := func() (*admin.Client, error) {
		tok, err := readToken(tokenFile)
		if err != nil {
			return nil, err
		}
		base := addr
		if !strings.Contains(base, "://") {
			base = "http://" + base
		}
		who := "sluice ctl"
		if u, err := user.Current(); err == nil {
			who = u.Username
		}
		if h, err := os.Hostname(); err == nil {
			who += "@" + h
		}
		return &admin.Client{Base: base, Token: tok, Who: who}, nil
	}
	do := func(f func(ctx context.Context, cl *admin.Client, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			cl, err := client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return f(ctx, cl, args)
		}
	}
	out := g.stdout
	c.AddCommand(&cobra.Command{Use: "list", Short: "list the jobs", Args: cobra.NoArgs,
		RunE: do(func(ctx context.Context, cl *admin.Client, _ []string) error {
			jobs, err := cl.Jobs(ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB\tSTATE\tELAPSED")
			for _, j := range jobs {
				fmt.Fprintf(tw, "%s\t%s\t%.1fs\n", j.Name, j.State, j.Elapsed)
			}
			return tw.Flush()
		})})
	c.AddCommand(&cobra.Command{Use: "show JOB", Short: "a job's inputs, their accounting, checkpoints and plan", Args: cobra.ExactArgs(1),
		RunE: do(func(ctx context.Context, cl *admin.Client, args []string) error {
			st, err := cl.Status(ctx, args[0])
			if err != nil {
				return err
			}
			printJobStatus(out, st)
			return nil
		})})
	c.AddCommand(&cobra.Command{Use: "history JOB", Short: "the changes made to a job, applied or rejected", Args: cobra.ExactArgs(1),
		RunE: do(func(ctx context.Context, cl *admin.Client, args []string) error {
			h, err := cl.History(ctx, args[0])
			if err != nil {
				return err
			}
			for _, ev := range h {
				line := fmt.Sprintf("%s %-9s %-8s %s", ev.At.Format(time.RFC3339), ev.What, ev.Result, ev.Target)
				if ev.Detail != "" {
					line += " " + ev.Detail
				}
				if ev.Version != 0 {
					line += fmt.Sprintf(" (desired v%d)", ev.Version)
				}
				line += " by " + ev.Who
				if ev.Error != "" {
					line += ": " + ev.Error
				}
				fmt.Fprintln(out, line)
			}
			return nil
		})})
	for _, verb := range []string{"pause", "resume"} {
		c.AddCommand(&cobra.Command{Use: verb + " JOB SOURCE", Short: verb + " a source", Args: cobra.ExactArgs(2),
			RunE: do(func(ctx context.Context, cl *admin.Client, args []string) error {
				if err := cl.Pause(ctx, args[0], args[1], verb == "pause"); err != nil {
					return err
				}
				fmt.Fprintf(out, "%s/%s: %sd\n", args[0], args[1], verb)
				return nil
			})})
	}
	c.AddCommand(&cobra.Command{Use: "savepoint JOB [NAME]", Short: "take a checkpoint of a job now; with NAME, write it as a savepoint into NAME under the process's --admin-savepoints",
		Args: cobra.RangeArgs(1, 2),
		RunE: do(func(ctx context.Context, cl *admin.Client, args []string) error {
			if len(args) == 2 {
				id, dir, err := cl.SavepointTo(ctx, args[0], args[1])
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "%s: savepoint %s of checkpoint %d (sluice savepoint inspect %s)\n", args[0], dir, id, dir)
				return nil
			}
			id, err := cl.Savepoint(ctx, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%s: checkpoint %d\n", args[0], id)
			return nil
		})})
	var stopSavepoint string
	stop := &cobra.Command{Use: "stop JOB", Short: "drain a job, keeping its final checkpoint to resume from; with --savepoint, stop it with a savepoint", Args: cobra.ExactArgs(1),
		RunE: do(func(ctx context.Context, cl *admin.Client, args []string) error {
			if stopSavepoint != "" {
				id, dir, err := cl.StopWithSavepoint(ctx, args[0], stopSavepoint)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "%s: stopped with savepoint %s of final checkpoint %d (sluice run ... --from-savepoint %s)\n", args[0], dir, id, dir)
				return nil
			}
			id, err := cl.Stop(ctx, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%s: stopped, final checkpoint %d\n", args[0], id)
			return nil
		})}
	stop.Flags().StringVar(&stopSavepoint, "savepoint", "", "stop with a savepoint written into NAME under the process's --admin-savepoints (nothing is processed after it)")
	c.AddCommand(stop)
	c.AddCommand(&cobra.Command{Use: "rescale JOB OPERATOR=N...", Short: "change operators' parallelism: stop the job with a savepoint and start it again from it", Args: cobra.MinimumNArgs(2),
		RunE: do(func(ctx context.Context, cl *admin.Client, args []string) error {
			par, err := parseParallelism(args[1:])
			if err != nil {
				return err
			}
			r, err := cl.Rescale(ctx, args[0], par)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%s: rescaled %v (was %v); paused %v (stopping %v); savepoint %s of checkpoint %d\n",
				args[0], r.Parallelism, r.Was, r.Pause.Round(time.Millisecond), r.Stopping.Round(time.Millisecond), r.Savepoint, r.Checkpoint)
			return nil
		})})
	var in admin.Input
	sp := &cobra.Command{Use: "set-policy JOB OPERATOR", Short: "change an operator's input while the job runs", Args: cobra.ExactArgs(2),
		RunE: do(func(ctx context.Context, cl *admin.Client, args []string) error {
			got, err := cl.SetInput(ctx, args[0], args[1], in)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%s/%s: input %s\n", args[0], args[1], got)
			return nil
		})}
	sp.Flags().StringVar(&in.Policy, "policy", "", "block, drop-newest, drop-oldest, sample, throttle or spill (default: unchanged)")
	sp.Flags().IntVar(&in.Capacity, "capacity", 0, "records (default: unchanged)")
	sp.Flags().IntVar(&in.SampleEvery, "sample-every", 0, "sample: keep one record in N")
	sp.Flags().Float64Var(&in.Rate, "rate", 0, "throttle: records per second")
	sp.Flags().IntVar(&in.HighWater, "high-water", 0, "sample, throttle: the depth above which they shed (default three quarters of the capacity)")
	c.AddCommand(sp)
	c.AddCommand(&cobra.Command{Use: "apply FILE", Short: "push a desired-state document: applied whole, or rejected whole with the reason", Args: cobra.ExactArgs(1),
		RunE: do(func(ctx context.Context, cl *admin.Client, args []string) error {
			doc, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			ds, err := cl.Push(ctx, doc)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "applied: good v%d\n", ds.Good)
			return nil
		})})
	c.AddCommand(&cobra.Command{Use: "desired", Short: "the desired state: the version read, the version each job runs, the last rejection", Args: cobra.NoArgs,
		RunE: do(func(ctx context.Context, cl *admin.Client, _ []string) error {
			ds, err := cl.Desired(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "source %s: desired v%d, good v%d\n", orNone(ds.Source), ds.Desired, ds.Good)
			for job, v := range ds.Applied {
				fmt.Fprintf(out, "  %s: applied v%d\n", job, v)
			}
			if ds.Rejected != 0 || ds.Reason != "" {
				fmt.Fprintf(out, "last rejected v%d: %s\n", ds.Rejected, ds.Reason)
			}
			return nil
		})})
	return c
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func printJobStatus(w io.Writer, st admin.JobStatus) {
	fmt.Fprintf(w, "job %s: %s, %.1fs", st.Name, st.State, st.Elapsed)
	if st.Error != "" {
		fmt.Fprintf(w, " (%s)", st.Error)
	}
	fmt.Fprintf(w, "; checkpoints %d (last %d), restarts %d", st.Checkpoints.Completed, st.Checkpoints.LastID, st.Checkpoints.Restarts)
	if st.Desired != 0 {
		fmt.Fprintf(w, "; desired v%d, applied v%d", st.Desired, st.Applied)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATOR\tx\tINPUT\tPOSTED\tDELIVERED\tDROPPED\tQUEUED\tSPILLED\t")
	for _, in := range st.Inputs {
		name := in.Operator
		if len(in.Fused) > 0 {
			name += " (+" + strings.Join(in.Fused, ", ") + ")"
		}
		switch {
		case in.Source:
			state := "reading"
			if in.Paused {
				state = "paused"
			}
			fmt.Fprintf(tw, "%s\t%d\tsource, %s\t\t\t\t\t\t\n", name, in.Parallelism, state)
		default:
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t\n", name, in.Parallelism, in.Input, in.Posted, in.Delivered, in.Dropped, in.Queued, in.SpillPending)
		}
	}
	_ = tw.Flush()
	if st.Plan != "" {
		fmt.Fprintf(w, "\n%s", st.Plan)
	}
}

// parseParallelism reads OPERATOR=N arguments.
func parseParallelism(args []string) (map[string]int, error) {
	par := map[string]int{}
	for _, a := range args {
		op, n, ok := strings.Cut(a, "=")
		p, err := strconv.Atoi(n)
		if !ok || op == "" || err != nil || p < 1 {
			return nil, fmt.Errorf("rescale: %q: want OPERATOR=N, N at least 1", a)
		}
		par[op] = p
	}
	return par, nil
}

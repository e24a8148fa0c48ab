// Command sluice runs sluice's samples and shows their plans.
//
//	sluice samples                     # list the samples
//	sluice run wordcount [flags]       # run one, with a live progress line on stderr
//	sluice plan wordcount [flags]      # print its physical plan (fused chains, parallelism, edges)
//	sluice cluster-wordcount --nodes 3 # word count across 3 local node processes
//	sluice savepoint inspect DIR       # what a savepoint holds (read-only)
//	sluice run nexmark-q5 --admin 7070 # ... with the admin API; then, in another shell:
//	sluice ctl show nexmark-q5         # drive it: list, show, pause, resume, savepoint, stop, set-policy
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot(os.Stdout, os.Stderr).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		stop()
		os.Exit(1)
	}
}

type globals struct {
	logLevel string
	stdout   io.Writer
	stderr   io.Writer
}

func (g *globals) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: lvl})), nil
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "sluice",
		Short:         "sluice runs stream topologies in which every operator is a supervised actor",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "warn", "log level: debug, info, warn, error")
	root.AddCommand(samplesCmd(g), runCmd(g), planCmd(g))
	root.AddCommand(storeCmd(g), savepointCmd(g))
	root.AddCommand(deadLettersCmd(g))
	root.AddCommand(nexmarkCmd(g))
	root.AddCommand(nodeCmd(g), clusterWordCountCmd(g))
	root.AddCommand(ctlCmd(g))
	return root
}

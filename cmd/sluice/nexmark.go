package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/samples/nexmark"
)

func nexmarkCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "nexmark",
		Short: "the Nexmark benchmark: generate its event stream",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return fmt.Errorf("%s: name a subcommand (see --help)", cmd.CommandPath())
		},
	}
	cfg := nexmark.DefaultConfig()
	gen := &cobra.Command{
		Use:   "gen [--events N] [--generators K] [--BeamKnob value ...]",
		Short: "write the Nexmark event stream to stdout, one JSON event a line",
		Long: "gen writes the event stream of Beam's Nexmark generator to stdout as JSON lines, in\n" +
			"the order of its generators taken round-robin. The knobs keep Beam's names and\n" +
			"defaults (--numEvents 100000, --numEventGenerators 100, --firstEventRate 10000, ...);\n" +
			"--events and --generators are short for --numEvents and --numEventGenerators.\n" +
			"The same knobs give the same bytes on every run and every machine.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeEvents(cmd.Context(), g.stdout, cfg)
		},
	}
	fs := flag.NewFlagSet("nexmark gen", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	gen.Flags().AddGoFlagSet(fs)
	c.AddCommand(gen)
	return c
}

// writeEvents writes cfg's whole event stream to w, stopping early if ctx
// ends (the stream of --events 0 is practically endless).
func writeEvents(ctx context.Context, w io.Writer, cfg nexmark.Config) error {
	s, err := nexmark.NewStream(cfg)
	if err != nil {
		return err
	}
	out := nexmark.NewWriter(w)
	for n := 0; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		ev, ok := s.Next()
		if !ok {
			break
		}
		if err := out.Write(ev); err != nil {
			return fmt.Errorf("nexmark gen: write event %d: %w", s.Offset(), err)
		}
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("nexmark gen: write: %w", err)
	}
	return nil
}

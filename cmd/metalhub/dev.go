package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/metalhub/metalhub/internal/cli"
	"github.com/metalhub/metalhub/internal/cmd/infrahubemucmd"
	"github.com/metalhub/metalhub/internal/cmd/redfishemucmd"
	"github.com/metalhub/metalhub/internal/dev"
)

func devCommand() *cobra.Command {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	opts := dev.DefaultOptions()
	opts.BindFlags(fs)
	// Human-readable logs at info, into the log file the run names (the live table is the show).
	zapOpts := zap.Options{Development: true, Level: zapcore.InfoLevel}
	zapOpts.BindFlags(fs)
	c := &cobra.Command{
		Use:   "dev [flags]",
		Short: "local control plane + emulated fleet + the operator, for a first look (make run)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := dev.Run(c.Context(), opts, c.OutOrStdout(), c.ErrOrStderr(), &zapOpts, nil); err != nil {
				fmt.Fprintln(c.ErrOrStderr(), "metalhub dev:", err)
				return cli.ExitCode(1)
			}
			return nil
		},
	}
	goFlags(c, fs)
	return c
}

func runEmulate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	emulators := map[string]struct {
		summary string
		run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
	}{
		"infrahub": {"Infrahub API (login, stored queries, artifacts)", infrahubemucmd.Main},
		"bmc":      {"a fleet of Redfish BMCs (power, boot override, inventory, faults)", redfishemucmd.Main},
	}
	if len(args) == 0 || emulators[args[0]].run == nil {
		fmt.Fprintln(stderr, "Usage: metalhub emulate <emulator> [flags]\n\nEmulators:")
		for _, name := range slices.Sorted(maps.Keys(emulators)) {
			fmt.Fprintf(stderr, "  %-10s %s\n", name, emulators[name].summary)
		}
		return 2
	}
	if args[0] == "bmc" { // redfishemucmd parses its own "bmc" word
		return redfishemucmd.Main(ctx, args, stdout, stderr)
	}
	return emulators[args[0]].run(ctx, args[1:], stdout, stderr)
}

package main

import (
	"flag"
	"fmt"

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

// emulateCommand groups the emulators, each run on its own until interrupted.
func emulateCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "emulate bmc|infrahub [flags]",
		Short: "run an emulator: emulate bmc|infrahub [flags]",
		Args:  cobra.NoArgs,
		RunE:  cli.NeedSubcommand,
	}
	c.AddCommand(redfishemucmd.Command(), infrahubemucmd.Command())
	return c
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/metalhub/metalhub/internal/cmd/infrahubemucmd"
	"github.com/metalhub/metalhub/internal/cmd/redfishemucmd"
	"github.com/metalhub/metalhub/internal/dev"
)

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("metalhub dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := dev.DefaultOptions()
	opts.BindFlags(fs)
	// Human-readable logs at info: the live table on stdout is the main show.
	zapOpts := zap.Options{Development: true, Level: zapcore.InfoLevel}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	log := zap.New(zap.UseFlagOptions(&zapOpts), zap.WriteTo(stderr))
	ctrl.SetLogger(log)
	if err := dev.Run(ctx, opts, stdout, log, nil); err != nil {
		fmt.Fprintln(stderr, "metalhub dev:", err)
		return 1
	}
	return 0
}

func runEmulate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	emulators := map[string]command{
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

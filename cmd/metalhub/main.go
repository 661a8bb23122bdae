// Command metalhub is the metalhub operator and its companion tools.
//
//	metalhub [manager flags]          run the operator (same as `metalhub manager`)
//	metalhub manager [flags]          run the operator
//	metalhub dev [flags]              local control plane + the operator, for a first look
//	metalhub emulate bmc [flags]      a fleet of emulated Redfish BMCs
//	metalhub emulate infrahub [flags] an Infrahub API emulator
//	metalhub bmc inspect [flags]      check a BMC before registering it
//	metalhub version                  print the version
//
// Run `metalhub <command> -h` for a command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/metalhub/metalhub/internal/cmd/bmccmd"
	"github.com/metalhub/metalhub/internal/cmd/migratecmd"
	"github.com/metalhub/metalhub/internal/manager"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// command is one subcommand: it gets its arguments (without its own name) and returns an exit code.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func commands() map[string]command {
	return map[string]command{
		"manager": {"run the operator", runManager},
		"dev":     {"local control plane + the operator, for a first look", runDev},
		"emulate": {"run an emulator: bmc or infrahub", runEmulate},
		"bmc":     {"check a BMC before registering it: inspect, power, boot-once", bmccmd.Main},
		"migrate": {"before switching from metal-operator: migrate plan (read-only)", migratecmd.Main},
		"move":    {"move the fleet to another cluster: --to-kubeconfig F [--dry-run]", migratecmd.MoveMain},
		"version": {"print the version", func(_ context.Context, _ []string, stdout, _ io.Writer) int {
			fmt.Fprintln(stdout, version)
			return 0
		}},
	}
}

func main() {
	ctx := ctrl.SetupSignalHandler()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	// No subcommand (or only flags) runs the operator, as a container entrypoint expects.
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			usage(stderr, cmds)
		}
		return runManager(ctx, args, stdout, stderr)
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "metalhub: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	return cmd.run(ctx, args[1:], stdout, stderr)
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "Usage: metalhub <command> [flags]\n\nCommands:")
	for _, name := range slices.Sorted(maps.Keys(cmds)) {
		fmt.Fprintf(w, "  %-10s %s\n", name, cmds[name].summary)
	}
	fmt.Fprintln(w, "\nWithout a command, metalhub runs the operator.")
}

func runManager(ctx context.Context, args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("metalhub manager", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := manager.DefaultOptions()
	opts.BindFlags(fs)
	kubeconfig := fs.String("kubeconfig", "", "Path to a kubeconfig; defaults to $KUBECONFIG, then in-cluster config, then ~/.kube/config.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "metalhub manager: unexpected arguments %q\n", fs.Args())
		return 2
	}
	log := zap.New(zap.UseFlagOptions(&zapOpts), zap.WriteTo(stderr))
	ctrl.SetLogger(log)

	cfg, err := restConfig(*kubeconfig)
	if err != nil {
		log.Error(err, "loading cluster configuration")
		return 1
	}
	log.Info("starting metalhub", "version", version)
	if err := manager.Run(ctx, cfg, opts, log); err != nil {
		log.Error(err, "manager stopped with an error")
		return 1
	}
	log.Info("metalhub stopped")
	return 0
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("finding cluster configuration: %w", err)
	}
	return cfg, nil
}

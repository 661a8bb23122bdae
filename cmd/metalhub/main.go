// Command metalhub is the metalhub operator and its companion tools, one binary with cobra
// subcommands (`metalhub help` lists them; `metalhub completion bash|zsh|fish` prints shell
// completion). Without a command, or with only flags, it runs the operator, as a container
// entrypoint expects.
//
// It only wires the commands together: the operator is internal/manager's and each tool lives in
// its own package (internal/cli, internal/cmd/*, internal/dev).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/metalhub/metalhub/internal/cli"
	"github.com/metalhub/metalhub/internal/cmd/bmccmd"
	"github.com/metalhub/metalhub/internal/cmd/migratecmd"
	"github.com/metalhub/metalhub/internal/manager"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx := cli.SignalContext()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes the command line and returns the exit code: 0, 1 when the command failed, 2 on
// a bad command line.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// No subcommand (or only flags) runs the operator. Help alone is the root's.
	if len(args) == 0 || (strings.HasPrefix(args[0], "-") && !isHelp(args[0])) {
		args = append([]string{"manager"}, args...)
	}
	return cli.Execute(ctx, newRoot(stdin, stdout, stderr), args, stdout, stderr)
}

func isHelp(a string) bool { return a == "-h" || a == "--help" || a == "-help" }

func newRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "metalhub",
		Short: "the metalhub operator and its companion tools",
		Long: `metalhub runs the operator (metalhub manager, also without a command) and the tools around it:
a local environment (dev), the fleet's web view (dashboard), everyday commands on servers
(servers, cordon, park, power, console), emulators, BMC checks, migration and move.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddGroup(&cobra.Group{ID: "fleet", Title: "Everyday commands on the fleet:"},
		&cobra.Group{ID: "run", Title: "Running metalhub:"},
		&cobra.Group{ID: "tools", Title: "Tools:"})

	mgr := managerCommand()
	mgr.GroupID = "run"
	dev := devCommand()
	dev.GroupID = "run"
	root.AddCommand(mgr, dev)
	for _, c := range []*cobra.Command{
		emulateCommand(),
		bmccmd.Command(),
		migratecmd.Command(),
		migratecmd.MoveCommand(),
	} {
		c.GroupID = "tools"
		root.AddCommand(c)
	}
	root.AddCommand(&cobra.Command{
		Use: "version", Short: "print the version", GroupID: "tools", Args: cobra.NoArgs,
		Run: func(c *cobra.Command, _ []string) { fmt.Fprintln(c.OutOrStdout(), version) },
	})
	for _, c := range cli.FleetCommands() {
		c.GroupID = "fleet"
		root.AddCommand(c)
	}
	for _, c := range cli.DeliveryCommands() {
		c.GroupID = "tools"
		root.AddCommand(c)
	}
	root.SetCompletionCommandGroupID("tools")
	root.SetHelpCommandGroupID("tools")
	return root
}

// goFlags adds a standard-library flag set (the operator's and the dev environment's options
// bind there) to a cobra command, so they are parsed, listed in help and completed like the rest.
func goFlags(c *cobra.Command, fs *flag.FlagSet) {
	c.Flags().AddGoFlagSet(fs)
}

func managerCommand() *cobra.Command {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	opts := manager.DefaultOptions()
	opts.BindFlags(fs)
	kubeconfig := fs.String("kubeconfig", "", "Path to a kubeconfig; defaults to $KUBECONFIG, then in-cluster config, then ~/.kube/config.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	c := &cobra.Command{
		Use:   "manager [flags]",
		Short: "run the operator (also what metalhub does without a command)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			stderr := c.ErrOrStderr()
			log := zap.New(zap.UseFlagOptions(&zapOpts), zap.WriteTo(stderr))
			ctrl.SetLogger(log)
			cfg, err := restConfig(*kubeconfig)
			if err != nil {
				log.Error(err, "loading cluster configuration")
				return cli.ExitCode(1)
			}
			log.Info("starting metalhub", "version", version)
			if err := manager.Run(c.Context(), cfg, opts, log); err != nil {
				log.Error(err, "manager stopped with an error")
				return cli.ExitCode(1)
			}
			log.Info("metalhub stopped")
			return nil
		},
	}
	goFlags(c, fs)
	return c
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

// Package migratecmd implements "metalhub migrate plan", a read-only look at a cluster the
// IronCore metal-operator manages before switching it to metalhub (docs/migration.md), and
// "metalhub move", the fleet copied to another cluster.
//
// It holds only the commands' flags and output: what a plan says and how a move goes are
// internal/migrate's. It never acts on a BMC, and plan writes nothing.
package migratecmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalhub/metalhub/internal/cli"
	"github.com/metalhub/metalhub/internal/migrate"
	"github.com/metalhub/metalhub/internal/scheme"
)

// Main runs "migrate"; args exclude the leading "migrate". It returns 0, 1 when something
// blocks a clean switch or the cluster could not be read, 2 on a bad command line.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := Command()
	c.CompletionOptions.DisableDefaultCmd = true // "metalhub completion" is the binary's
	return cli.Execute(ctx, c, args, stdout, stderr)
}

// MoveMain runs "move"; args exclude the leading "move". Exit codes as Main's.
func MoveMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Execute(ctx, MoveCommand(), args, stdout, stderr)
}

// Command is "migrate" with its one subcommand, plan.
func Command() *cobra.Command {
	c := &cobra.Command{
		Use:   "migrate plan [flags]",
		Short: "before switching from metal-operator: migrate plan (read-only)",
		Long: `Look at a cluster the IronCore metal-operator manages before switching it to metalhub
(docs/migration.md).`,
		Args: cobra.NoArgs,
		RunE: cli.NeedSubcommand,
	}
	c.AddCommand(planCommand())
	return c
}

func planCommand() *cobra.Command {
	var kubeconfig, selector string
	c := &cobra.Command{
		Use:   "plan",
		Short: "read-only: what metalhub will adopt and what blocks a clean switch",
		Long: `Read-only: every BMC and Server, the state metalhub will adopt, the BMC actions it would take
on start (none expected), and what blocks a clean switch (exit status 1).`,
		Example: `  metalhub migrate plan
  metalhub migrate plan --kubeconfig source.kubeconfig --selector rack=r1`,
		Args: cobra.ExactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			stderr := c.ErrOrStderr()
			var o migrate.Options
			if selector != "" {
				sel, err := labels.Parse(selector)
				if err != nil {
					return cli.Usage(fmt.Errorf("--selector: %w", err))
				}
				o.Selector = sel
			}
			cl, err := clientFor(kubeconfig)
			if err != nil {
				fmt.Fprintf(stderr, "migrate: %v\n", err)
				return cli.ExitCode(1)
			}
			p, err := migrate.Make(c.Context(), cl, o)
			if err != nil {
				fmt.Fprintf(stderr, "migrate: %v\n", err)
				return cli.ExitCode(1)
			}
			p.Print(c.OutOrStdout())
			if p.Blocked() {
				return cli.ExitCode(1) // the plan printed says what blocks
			}
			return nil
		},
	}
	c.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG, then ~/.kube/config)")
	c.Flags().StringVar(&selector, "selector", "", "label selector of the BMCs and Servers to look at (default: all)")
	return c
}

// MoveCommand is "move": the fleet to another cluster.
func MoveCommand() *cobra.Command {
	var (
		from, to, selector string
		dryRun, stopped    bool
		pauseTimeout       time.Duration
	)
	c := &cobra.Command{
		Use:   "move --to-kubeconfig FILE [flags]",
		Short: "move the fleet to another cluster: --to-kubeconfig F [--dry-run]",
		Long: `Copies BMCs, BMCSecrets, Endpoints, Servers, claims, boot configurations, maintenances (both
groups) and the ignition Secrets they name to another cluster: pauses the source and waits
until the source's metalhub acknowledges the pause on every object (or --source-stopped says
it is gone), creates everything on the target in dependency order (paused), unpauses the
target and marks the source moved. The source stays paused; a finished move is not run again.`,
		Example: `  metalhub move --to-kubeconfig target.kubeconfig --dry-run
  metalhub move --to-kubeconfig target.kubeconfig --kubeconfig source.kubeconfig --selector rack=r1`,
		Args: cobra.ExactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			stderr := c.ErrOrStderr()
			var sel labels.Selector
			if selector != "" {
				var err error
				if sel, err = labels.Parse(selector); err != nil {
					return cli.Usage(fmt.Errorf("--selector: %w", err))
				}
			}
			if to == "" {
				return cli.Usage(errors.New("--to-kubeconfig is required"))
			}
			src, err := clientFor(from)
			if err != nil {
				fmt.Fprintf(stderr, "move: source: %v\n", err)
				return cli.ExitCode(1)
			}
			dst, err := clientFor(to)
			if err != nil {
				fmt.Fprintf(stderr, "move: target: %v\n", err)
				return cli.ExitCode(1)
			}
			o := migrate.MoveOptions{DryRun: dryRun, Out: c.OutOrStdout(), PauseTimeout: pauseTimeout, SourceStopped: stopped, Selector: sel}
			if err := migrate.Move(c.Context(), src, dst, o); err != nil {
				fmt.Fprintf(stderr, "move: %v\n", err)
				return cli.ExitCode(1)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&from, "kubeconfig", "", "kubeconfig of the source cluster (default: $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&to, "to-kubeconfig", "", "kubeconfig of the target cluster (required)")
	f.BoolVar(&dryRun, "dry-run", false, "print what would move, change nothing")
	f.DurationVar(&pauseTimeout, "pause-timeout", migrate.DefaultPauseTimeout, "how long to wait for the source's metalhub to acknowledge the pause of every object")
	f.BoolVar(&stopped, "source-stopped", false, "the source's manager is gone (or is not metalhub): move without its acknowledgement of the pause")
	f.StringVar(&selector, "selector", "", "label selector of the BMCs to move, with their Servers, claims, boot configurations and maintenances (default: all)")
	return c
}

func clientFor(kubeconfig string) (client.Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return client.New(cfg, client.Options{Scheme: scheme.New()})
}

// Package migratecmd implements "metalhub migrate": look at a cluster the IronCore metal-operator
// manages before switching it to metalhub (docs/migration.md).
package migratecmd

import (
	"context"
	"flag"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalhub/metalhub/internal/migrate"
	"github.com/metalhub/metalhub/internal/scheme"
)

// Exit codes.
const (
	exitOK      = 0
	exitBlocked = 1 // something blocks a clean switch, or the cluster could not be read
	exitUsage   = 2
)

const usage = `usage: migrate plan [flags]

plan  read-only: every BMC and Server, the state metalhub will adopt, the BMC actions it
      would take on start (none expected), and what blocks a clean switch (exit status 1)

flags:
`

// Main runs the command; args exclude the leading "migrate".
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG, then ~/.kube/config)")
	selector := fs.String("selector", "", "label selector of the BMCs and Servers to look at (default: all)")
	if len(args) == 0 || args[0] != "plan" {
		fs.Usage()
		return exitUsage
	}
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	var o migrate.Options
	if *selector != "" {
		sel, err := labels.Parse(*selector)
		if err != nil {
			fmt.Fprintf(stderr, "migrate: --selector: %v\n", err)
			return exitUsage
		}
		o.Selector = sel
	}
	c, err := clientFor(*kubeconfig)
	if err != nil {
		fmt.Fprintf(stderr, "migrate: %v\n", err)
		return exitBlocked
	}
	p, err := migrate.Make(ctx, c, o)
	if err != nil {
		fmt.Fprintf(stderr, "migrate: %v\n", err)
		return exitBlocked
	}
	p.Print(stdout)
	if p.Blocked() {
		return exitBlocked
	}
	return exitOK
}

const moveUsage = `usage: move --to-kubeconfig FILE [flags]

Copies BMCs, BMCSecrets, Endpoints, Servers, claims, boot configurations, maintenances (both
groups) and the ignition Secrets they name to another cluster: pauses the source and waits
until the source's metalhub acknowledges the pause on every object (or --source-stopped says
it is gone), creates everything on the target in dependency order (paused), unpauses the
target and marks the source moved. The source stays paused; a finished move is not run again.

flags:
`

// MoveMain runs "metalhub move"; args exclude the leading "move".
func MoveMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("move", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, moveUsage); fs.PrintDefaults() }
	from := fs.String("kubeconfig", "", "kubeconfig of the source cluster (default: $KUBECONFIG, then ~/.kube/config)")
	to := fs.String("to-kubeconfig", "", "kubeconfig of the target cluster (required)")
	dryRun := fs.Bool("dry-run", false, "print what would move, change nothing")
	pauseTimeout := fs.Duration("pause-timeout", migrate.DefaultPauseTimeout, "how long to wait for the source's metalhub to acknowledge the pause of every object")
	stopped := fs.Bool("source-stopped", false, "the source's manager is gone (or is not metalhub): move without its acknowledgement of the pause")
	selector := fs.String("selector", "", "label selector of the BMCs to move, with their Servers, claims, boot configurations and maintenances (default: all)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	var sel labels.Selector
	if *selector != "" {
		var err error
		if sel, err = labels.Parse(*selector); err != nil {
			fmt.Fprintf(stderr, "move: --selector: %v\n", err)
			return exitUsage
		}
	}
	if *to == "" {
		fmt.Fprintln(stderr, "move: --to-kubeconfig is required")
		fs.Usage()
		return exitUsage
	}
	src, err := clientFor(*from)
	if err != nil {
		fmt.Fprintf(stderr, "move: source: %v\n", err)
		return exitBlocked
	}
	dst, err := clientFor(*to)
	if err != nil {
		fmt.Fprintf(stderr, "move: target: %v\n", err)
		return exitBlocked
	}
	if err := migrate.Move(ctx, src, dst, migrate.MoveOptions{DryRun: *dryRun, Out: stdout, PauseTimeout: *pauseTimeout, SourceStopped: *stopped, Selector: sel}); err != nil {
		fmt.Fprintf(stderr, "move: %v\n", err)
		return exitBlocked
	}
	return exitOK
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

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
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		fmt.Fprintf(stderr, "migrate: kubeconfig: %v\n", err)
		return exitBlocked
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
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

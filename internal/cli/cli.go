// Package cli holds metalhub's everyday commands on the fleet — servers, cordon, uncordon, park,
// unpark, power, console, dashboard, cleaning report — as cobra commands with kubectl's connection flags, so
// they act with the user's kubeconfig and so the user's RBAC. They write exactly what the
// dashboard's buttons write (internal/fleetops).
//
// It writes no object itself, so that the CLI and the dashboard cannot drift apart, and it never
// uses the operator's identity. It reaches a BMC only for the console, through bmcaccess, which
// reads the credentials with the user's rights and proves the BMC's identity first.
package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/scheme"
)

// ExitCode ends a command with that code, its message already printed.
type ExitCode int

func (e ExitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// usageError is a bad command line: exit code 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// Usage marks err as a bad command line.
func Usage(err error) error { return usageError{err} }

// IsUsage reports whether err is a bad command line, including cobra's own argument checks.
func IsUsage(err error) bool {
	var u usageError
	if errors.As(err, &u) {
		return true
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "accepts ") ||
		strings.HasPrefix(msg, "requires ") || strings.Contains(msg, "unknown flag") || strings.Contains(msg, "unknown shorthand flag")
}

// kube is the connection a fleet command makes: kubectl's flags (--kubeconfig, --context, ...).
type kube struct {
	flags *genericclioptions.ConfigFlags
}

func newKube(c *cobra.Command) *kube {
	k := &kube{flags: genericclioptions.NewConfigFlags(true)}
	k.flags.AddFlags(c.PersistentFlags())
	return k
}

func (k *kube) client() (client.WithWatch, error) {
	cfg, err := k.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	return c, nil
}

// completeServers completes a SERVER argument with the names of the servers the user may list.
func (k *kube) completeServers(max int) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) >= max {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		cl, err := k.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		list := &metalv1alpha1.ServerList{}
		if err := cl.List(context.Background(), list); err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var names []cobra.Completion
		for _, s := range list.Items {
			if strings.HasPrefix(s.Name, toComplete) {
				names = append(names, s.Name)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// FleetCommands are the everyday commands, each with kubectl's connection flags.
func FleetCommands() []*cobra.Command {
	return []*cobra.Command{
		serversCommand(),
		cordonCommand(true), cordonCommand(false),
		parkCommand(true), parkCommand(false),
		rediscoverCommand(), acceptInventoryCommand(), clearHardwareFaultCommand(),
		cleaningCommand(),
		powerCommand(),
		consoleCommand(),
		dashboardCommand(),
	}
}

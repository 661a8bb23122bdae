package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	"github.com/metalhub/metalhub/internal/fleetops"
)

// eachServerCommand is a command that does one thing to each server it names, in order, and
// prints one line per server (say); it stops at the first error.
func eachServerCommand(name, short, long string, do func(ctx context.Context, cl client.Client, server string) (bool, error),
	say func(server string, changed bool) string) *cobra.Command {
	c := &cobra.Command{
		Use:   name + " SERVER...",
		Short: short,
		Long:  long,
		Args:  cobra.MinimumNArgs(1),
	}
	k := newKube(c)
	c.ValidArgsFunction = k.completeServers(1 << 20)
	c.RunE = func(c *cobra.Command, args []string) error {
		cl, err := k.client()
		if err != nil {
			return err
		}
		for _, s := range args {
			changed, err := do(c.Context(), cl, s)
			if err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), say(s, changed))
		}
		return nil
	}
	return c
}

// cordonCommand is cordon (on) or uncordon: spec.unclaimable, which keeps claims from binding a
// server; one bound already stays bound.
func cordonCommand(on bool) *cobra.Command {
	name, short := "uncordon", "let claims bind the servers again (spec.unclaimable=false)"
	if on {
		name, short = "cordon", "keep claims from binding the servers (spec.unclaimable=true); a bound claim stays"
	}
	return eachServerCommand(name, short, "",
		func(ctx context.Context, cl client.Client, s string) (bool, error) {
			return fleetops.SetUnclaimable(ctx, cl, s, on)
		},
		func(s string, changed bool) string { return fmt.Sprintf("server/%s %s", s, verbed(name, changed)) })
}

// parkCommand is park (on) or unpark: a parked server is left alone by the operator, its power
// untouched, until unparked.
func parkCommand(park bool) *cobra.Command {
	name, short := "unpark", "return parked servers to where they were"
	if park {
		name, short = "park", "park servers: the operator leaves them alone, power untouched, until unparked"
	}
	return eachServerCommand(name, short, "",
		func(ctx context.Context, cl client.Client, s string) (bool, error) {
			return fleetops.Park(ctx, cl, s, park)
		},
		func(s string, changed bool) string {
			if changed {
				return fmt.Sprintf("server/%s %s requested", s, name)
			}
			// Already there, or already asked for: the operator has not necessarily acted yet.
			return fmt.Sprintf("server/%s: nothing to do (%s, or %s already requested)", s, verbed(name, false), name)
		})
}

// operationCommand writes a one-off operation that needs no BMC answer to wait for.
func operationCommand(name, op, short, long string) *cobra.Command {
	return eachServerCommand(name, short, long,
		func(ctx context.Context, cl client.Client, s string) (bool, error) {
			return fleetops.Request(ctx, cl, s, op)
		},
		func(s string, changed bool) string {
			if changed {
				return fmt.Sprintf("server/%s %s requested", s, name)
			}
			return fmt.Sprintf("server/%s: %s already requested", s, name)
		})
}

func rediscoverCommand() *cobra.Command {
	return operationCommand("rediscover", metalv1alpha1.OperationRediscover,
		"run discovery again on Available servers and compare what it finds with their inventory",
		`Ask the operator to discover an Available, unclaimed server again: it goes back to Initial,
boots the discovery image and reports its hardware. Less hardware than the server's baseline (a
GPU, NIC, drive, memory or CPU threads gone) raises the InventoryDrift condition and a Warning
event. A server that is claimed or in maintenance by then refuses it (an UnsupportedOperation
event says so).`)
}

func acceptInventoryCommand() *cobra.Command {
	return operationCommand("accept-inventory", metalv1alpha1.OperationAcceptInventory,
		"make the last discovery's inventory the servers' baseline, ending their InventoryDrift",
		`Accept the hardware the last discovery found as the server's baseline: the hardware was
removed on purpose. The InventoryDrift condition goes, and later discoveries compare with the
new baseline.`)
}

func clearHardwareFaultCommand() *cobra.Command {
	return operationCommand("clear-hardware-fault", metalv1alpha1.OperationClearHardwareFault,
		"end the servers' HardwareFault after the repair (the fault record and the policy's taint go)",
		`Clear a server's hardware fault once it is repaired: the HardwareFault condition, the fault
record (annotation health.metalhub.io/fault) and the taint the fault policy set go. The critical
entries in the BMC's log stay history and are not raised again. A maintenance the policy opened
is yours to finish.`)
}

func verbed(verb string, changed bool) string {
	past := map[string]string{"cordon": "cordoned", "uncordon": "uncordoned", "park": "parked", "unpark": "not parked"}[verb]
	if !changed && (verb == "cordon" || verb == "uncordon") {
		return "already " + past
	}
	return past
}

// powerCommand asks the operator for a power operation through the operation annotation: it
// carries it out exactly once, and a second request while one is pending is refused.
func powerCommand() *cobra.Command {
	var wait bool
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "power " + strings.Join(fleetops.PowerVerbs(), "|") + " SERVER",
		Short: "power a server on, off, restart it (through the operator, exactly once)",
		Long: `Ask the operator for a power operation on a server. It is written to the server's operation
annotation with a request token; the operator issues it to the BMC exactly once (a crash or a
lost answer never issues it twice) and reports the outcome under the token. A request while
another operation on the server is pending is refused.

  on            force-on-server
  off           force-off-server
  restart       graceful-restart-server
  hard-restart  hard-restart-server
  cycle         power-cycle-server`,
		Example: `  metalhub power restart my-server
  metalhub power off my-server --wait=false`,
		Args: cobra.ExactArgs(2),
	}
	k := newKube(c)
	c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return fleetops.PowerVerbs(), cobra.ShellCompDirectiveNoFileComp
		}
		return k.completeServers(2)(cmd, args, toComplete)
	}
	c.Flags().BoolVar(&wait, "wait", true, "Wait until the operator reports how the operation ended.")
	c.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "How long --wait waits.")
	c.RunE = func(c *cobra.Command, args []string) error {
		verb, server := args[0], args[1]
		if _, ok := fleetops.PowerOps[verb]; !ok {
			return Usage(fmt.Errorf("unknown power operation %q: one of %s", verb, strings.Join(fleetops.PowerVerbs(), ", ")))
		}
		cl, err := k.client()
		if err != nil {
			return err
		}
		token, err := fleetops.RequestPower(c.Context(), cl, server, verb)
		var pending *fleetops.PendingError
		if errors.As(err, &pending) {
			fmt.Fprintf(c.ErrOrStderr(), "refused: %v\n", err)
			return ExitCode(1)
		}
		if err != nil {
			return err
		}
		out := c.OutOrStdout()
		fmt.Fprintf(out, "server/%s power %s requested (%s, request %s)\n", server, verb, fleetops.PowerOps[verb], token)
		if !wait {
			return nil
		}
		ctx, cancel := context.WithTimeout(c.Context(), timeout)
		defer cancel()
		outcome, err := fleetops.WaitOutcome(ctx, cl, server, token)
		if err != nil {
			return fmt.Errorf("waiting for the outcome of request %s: %w (the operator carries it out anyway; kubectl describe server %s)", token, err, server)
		}
		fmt.Fprintf(out, "server/%s power %s: %s\n", server, verb, outcome)
		if outcome != intent.ResultDone {
			return ExitCode(1)
		}
		return nil
	}
	return c
}

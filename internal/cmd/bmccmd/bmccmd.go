// Package bmccmd implements "metalhub bmc": check a BMC before registering
// it (inventory, power, one-time boot, virtual media) with the same client the
// controllers use.
//
// It talks to the BMC named by its flags and to nothing else: it reads and writes no Kubernetes
// object, and so it is for a BMC not registered yet (the controllers would not know of its changes
// to one they manage).
package bmccmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/cli"
)

// PasswordEnv is read when --password is not given, so the password need not
// appear in shell history or process listings.
const PasswordEnv = "METALHUB_BMC_PASSWORD"

// Main runs the command; args exclude the leading "bmc". It returns 0, 1 when
// the BMC operation failed, 2 on a bad command line.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := Command()
	c.CompletionOptions.DisableDefaultCmd = true // "metalhub completion" is the binary's
	return cli.Execute(ctx, c, args, stdout, stderr)
}

var powerWords = []string{"on", "off", "graceful-off", "restart", "force-restart"}

// Command is "bmc" with its subcommands; the connection flags are persistent so
// they may come before or after the subcommand, as they always could.
func Command() *cobra.Command {
	t := &tool{}
	c := &cobra.Command{
		Use:   "bmc",
		Short: "check a BMC before registering it: inspect, power, boot-once",
		Long: `Check a BMC before registering it (inventory, power, one-time boot, virtual media) with the
same client the controllers use.

The password is taken from --password or the ` + PasswordEnv + ` environment variable.`,
		Example: `  export ` + PasswordEnv + `=...
  metalhub bmc inspect --address https://192.0.2.10 --username admin
  metalhub bmc power on --address 192.0.2.10 --username admin --wait 2m`,
		// "bmc help" printed the usage before cobra; the tree's help command covers the rest.
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 1 && args[0] == "help" {
				return nil
			}
			return cobra.NoArgs(c, args)
		},
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				return c.Help()
			}
			return cli.NeedSubcommand(c, args)
		},
	}
	f := c.PersistentFlags()
	f.StringVar(&t.address, "address", "", "BMC address: https://host[:port] (https is assumed without a scheme)")
	f.StringVar(&t.username, "username", "", "BMC username")
	// No default from the environment here: help would print the password.
	f.StringVar(&t.password, "password", "", "BMC password (default: $"+PasswordEnv+")")
	f.BoolVar(&t.insecure, "insecure", false, "do not verify the BMC's TLS certificate")
	f.StringVar(&t.caFile, "ca-file", "", "PEM file with the CA(s) that signed the BMC certificate")
	f.DurationVar(&t.timeout, "timeout", 10*time.Second, "timeout of each request to the BMC")
	f.StringVar(&t.system, "system", "", "system ID (default: the only system)")
	f.BoolVar(&t.forceFallback, "force-fallback", false, "power: use the forced reset when the graceful one is not supported")
	f.DurationVar(&t.wait, "wait", 0, "power on|off|graceful-off: wait up to this long for the new state")
	f.StringVar(&t.uri, "uri", "", "boot-once http: the URI the system boots (Boot.HttpBootUri)")

	c.AddCommand(
		&cobra.Command{
			Use:   "systems",
			Short: "list the BMC's systems",
			Args:  cobra.ExactArgs(0),
			RunE:  t.with(func(ctx context.Context, _ []string) error { return t.systems(ctx) }),
		},
		&cobra.Command{
			Use:   "inspect",
			Short: "print the JSON inventory of every system (or --system)",
			Args:  cobra.ExactArgs(0),
			RunE:  t.with(func(ctx context.Context, _ []string) error { return t.inspect(ctx) }),
		},
		&cobra.Command{
			Use:       "power " + strings.Join(powerWords, "|"),
			Short:     "request a power change of one system",
			Long:      "Request a power change of one system (--system, or the only one); --wait waits for on or off.",
			Example:   "  metalhub bmc power graceful-off --address 192.0.2.10 --username admin --force-fallback",
			ValidArgs: powerWords,
			Args: func(_ *cobra.Command, args []string) error {
				if len(args) != 1 || powerAction(args[0]) == "" {
					return cli.Usage(errors.New("power needs one of " + strings.Join(powerWords, ", ")))
				}
				return nil
			},
			RunE: t.with(func(ctx context.Context, args []string) error {
				return t.power(ctx, powerAction(args[0]), strings.ToLower(args[0]))
			}),
		},
		&cobra.Command{
			Use:   "boot-once pxe|http|cd",
			Short: "boot one system once, on its next boot, from PXE, UEFI HTTP or the virtual CD",
			Long: `Boot one system once, on its next boot, from PXE, UEFI HTTP (--uri: the HttpBootUri; else
what DHCP offers) or the virtual CD.`,
			Example:   "  metalhub bmc boot-once http --uri https://boot.example/shim.efi --address 192.0.2.10 --username admin",
			ValidArgs: []string{"pxe", "http", "cd"},
			Args: func(_ *cobra.Command, args []string) error {
				if len(args) != 1 || bootTarget(args[0]) == "" {
					return cli.Usage(errors.New("boot-once needs a target: pxe, http or cd"))
				}
				if t.uri != "" && bootTarget(args[0]) != bmc.BootUefiHttp {
					return cli.Usage(errors.New("--uri goes with boot-once http only"))
				}
				return nil
			},
			RunE: t.with(func(ctx context.Context, args []string) error { return t.bootOnce(ctx, bootTarget(args[0])) }),
		},
		t.mediaCommand(),
	)
	return c
}

func (t *tool) mediaCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "media list|insert URI|eject [URI]",
		Short: "list, insert or eject the virtual CD of one system",
		Args:  cobra.NoArgs,
		RunE:  cli.NeedSubcommand,
	}
	c.AddCommand(
		&cobra.Command{
			Use:   "list",
			Short: "list the system's virtual media devices",
			Args:  cobra.ExactArgs(0),
			RunE:  t.with(func(ctx context.Context, _ []string) error { return t.mediaList(ctx) }),
		},
		&cobra.Command{
			Use:     "insert URI",
			Short:   "mount URI (an ISO) in the system's virtual CD",
			Example: "  metalhub bmc media insert http://images.example/live.iso --address 192.0.2.10 --username admin",
			Args:    cobra.ExactArgs(1),
			RunE:    t.with(func(ctx context.Context, args []string) error { return t.mediaInsert(ctx, args[0]) }),
		},
		&cobra.Command{
			Use:   "eject [URI]",
			Short: "eject URI (default: whatever is in the virtual CD)",
			Args:  cobra.MaximumNArgs(1),
			RunE: t.with(func(ctx context.Context, args []string) error {
				image := ""
				if len(args) == 1 {
					image = args[0]
				}
				return t.mediaEject(ctx, image)
			}),
		},
	)
	return c
}

// with connects to the BMC, runs fn and lets the connection go.
func (t *tool) with(fn func(ctx context.Context, args []string) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		t.stdout, t.stderr = c.OutOrStdout(), c.ErrOrStderr()
		if err := t.connect(); err != nil {
			return err
		}
		defer t.pool.Close()
		return fn(c.Context(), args)
	}
}

func bootTarget(s string) bmc.BootTarget {
	switch strings.ToLower(s) {
	case "pxe":
		return bmc.BootPxe
	case "http":
		return bmc.BootUefiHttp
	case "cd":
		return bmc.BootCd
	}
	return ""
}

type tool struct {
	stdout, stderr io.Writer

	address, username, password, caFile, system, uri string
	insecure, forceFallback                          bool
	timeout, wait                                    time.Duration

	pool *bmc.Pool
	bmc  bmc.BMC
}

func powerAction(s string) bmc.PowerAction {
	switch strings.ToLower(s) {
	case "on":
		return bmc.PowerOn
	case "off":
		return bmc.PowerOff
	case "graceful-off":
		return bmc.PowerGracefulOff
	case "restart":
		return bmc.PowerRestart
	case "force-restart":
		return bmc.PowerForceRestart
	}
	return ""
}

func (t *tool) connect() error {
	if t.address == "" {
		return cli.Usage(errors.New("--address is required"))
	}
	if t.password == "" {
		t.password = os.Getenv(PasswordEnv)
	}
	if t.username == "" || t.password == "" {
		return cli.Usage(fmt.Errorf("--username and --password (or $%s) are required", PasswordEnv))
	}
	if t.insecure && t.caFile != "" {
		return cli.Usage(errors.New("--insecure and --ca-file exclude each other"))
	}
	ep := bmc.Endpoint{Address: t.address, Username: t.username, Password: t.password, InsecureSkipVerify: t.insecure}
	if t.caFile != "" {
		pem, err := os.ReadFile(t.caFile)
		if err != nil {
			return cli.Usage(fmt.Errorf("read --ca-file: %w", err))
		}
		ep.CACert = pem
	}
	t.pool = bmc.NewPool(bmc.Options{RequestTimeout: t.timeout})
	b, err := t.pool.Get(ep)
	if err != nil {
		t.pool.Close()
		return t.fail(err)
	}
	t.bmc = b
	return nil
}

// fail prints err with a hint for its reason.
func (t *tool) fail(err error) error {
	fmt.Fprintf(t.stderr, "error: %v\n", err)
	if hint := hints[bmc.ReasonOf(err)]; hint != "" {
		fmt.Fprintf(t.stderr, "hint: %s\n", hint)
	}
	return cli.ExitCode(1)
}

var hints = map[bmc.Reason]string{
	bmc.ReasonAuthenticationFailed:  "check --username and --password",
	bmc.ReasonConnectionFailed:      "check --address and that the BMC is reachable from here",
	bmc.ReasonTimeout:               "the BMC did not answer in time; raise --timeout or retry later",
	bmc.ReasonTLSVerificationFailed: "pass the CA that signed the BMC certificate with --ca-file, or --insecure to skip verification",
	bmc.ReasonUnavailable:           "the BMC answered with a server error; it may be busy or rebooting",
	bmc.ReasonUnsupported:           "the BMC does not support this request",
	bmc.ReasonInvalidConfig:         "check --address and --ca-file",
}

func (t *tool) systems(ctx context.Context) error {
	systems, err := t.bmc.Systems(ctx)
	if err != nil {
		return t.fail(err)
	}
	return t.printJSON(systems)
}

type inspection struct {
	Address string           `json:"address"`
	Manager *bmc.ManagerInfo `json:"manager,omitempty"`
	Systems []*bmc.Inventory `json:"systems"`
	Errors  []string         `json:"errors,omitempty"`
}

func (t *tool) inspect(ctx context.Context) error {
	out := inspection{Address: t.address, Systems: []*bmc.Inventory{}}
	ids := []string{t.system}
	if t.system == "" {
		systems, err := t.bmc.Systems(ctx)
		if err != nil {
			return t.fail(err)
		}
		ids = ids[:0]
		for _, s := range systems {
			ids = append(ids, s.ID)
		}
	}
	var failed error
	for _, id := range ids {
		inv, err := t.bmc.Inventory(ctx, id)
		if err != nil {
			out.Errors = append(out.Errors, err.Error())
			fmt.Fprintf(t.stderr, "error: %v\n", err)
			failed = cli.ExitCode(1)
			continue
		}
		out.Systems = append(out.Systems, inv)
		for _, f := range inv.FailedSections {
			fmt.Fprintf(t.stderr, "warning: system %s: section %s unreadable: %s\n", id, f.Section, f.Reason)
		}
	}
	if m, err := t.bmc.Manager(ctx); err == nil {
		out.Manager = m
	} else {
		fmt.Fprintf(t.stderr, "warning: manager unreadable: %v\n", err)
	}
	// What could be read is printed even when a system could not be.
	if err := t.printJSON(out); err != nil {
		return err
	}
	return failed
}

// pickSystem returns --system or the only system; with several it lists
// them, since guessing would act on the wrong machine.
func (t *tool) pickSystem(ctx context.Context) (string, error) {
	if t.system != "" {
		return t.system, nil
	}
	systems, err := t.bmc.Systems(ctx)
	if err != nil {
		return "", t.fail(err)
	}
	switch len(systems) {
	case 0:
		fmt.Fprintln(t.stderr, "error: the BMC reports no systems")
		return "", cli.ExitCode(1)
	case 1:
		return systems[0].ID, nil
	}
	ids := make([]string, len(systems))
	for i, s := range systems {
		ids[i] = s.ID
	}
	return "", cli.Usage(fmt.Errorf("the BMC has %d systems; choose one with --system: %s", len(ids), strings.Join(ids, ", ")))
}

func (t *tool) power(ctx context.Context, action bmc.PowerAction, word string) error {
	id, err := t.pickSystem(ctx)
	if err != nil {
		return err
	}
	var opts []bmc.PowerOption
	if t.forceFallback {
		opts = append(opts, bmc.WithForceFallback())
	}
	if err := t.bmc.Power(ctx, id, action, opts...); err != nil {
		return t.fail(err)
	}
	fmt.Fprintf(t.stdout, "power %s accepted for system %s; the power state changes asynchronously\n", word, id)
	want := map[bmc.PowerAction]bmc.PowerState{bmc.PowerOn: bmc.PowerStateOn, bmc.PowerOff: bmc.PowerStateOff, bmc.PowerGracefulOff: bmc.PowerStateOff}[action]
	if t.wait <= 0 || want == "" {
		return nil
	}
	deadline := time.Now().Add(t.wait)
	for {
		st, err := t.bmc.System(ctx, id)
		if err != nil {
			return t.fail(err)
		}
		if st.PowerState == want {
			fmt.Fprintf(t.stdout, "system %s is %s\n", id, st.PowerState)
			return nil
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(t.stderr, "error: system %s is still %s after %s\n", id, st.PowerState, t.wait)
			return cli.ExitCode(1)
		}
		select {
		case <-ctx.Done():
			return t.fail(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (t *tool) bootOnce(ctx context.Context, target bmc.BootTarget) error {
	id, err := t.pickSystem(ctx)
	if err != nil {
		return err
	}
	var opts []bmc.BootOption
	if t.uri != "" {
		opts = append(opts, bmc.WithHTTPBootURI(t.uri))
	}
	if err := t.bmc.SetBootOnce(ctx, id, target, opts...); err != nil {
		return t.fail(err)
	}
	fmt.Fprintf(t.stdout, "system %s will boot from %s once, on its next boot\n", id, target)
	return nil
}

func (t *tool) mediaList(ctx context.Context) error {
	id, err := t.pickSystem(ctx)
	if err != nil {
		return err
	}
	slots, err := t.bmc.VirtualMedia(ctx, id)
	if err != nil {
		return t.fail(err)
	}
	return t.printJSON(slots)
}

func (t *tool) mediaInsert(ctx context.Context, image string) error {
	id, err := t.pickSystem(ctx)
	if err != nil {
		return err
	}
	if err := t.bmc.InsertMedia(ctx, id, image); err != nil {
		return t.fail(err)
	}
	fmt.Fprintf(t.stdout, "%s is in the virtual CD of system %s\n", image, id)
	return nil
}

// mediaEject ejects image, or whatever is in the virtual CD when image is empty.
func (t *tool) mediaEject(ctx context.Context, image string) error {
	id, err := t.pickSystem(ctx)
	if err != nil {
		return err
	}
	if err := t.bmc.EjectMedia(ctx, id, image); err != nil {
		return t.fail(err)
	}
	fmt.Fprintf(t.stdout, "virtual CD of system %s ejected\n", id)
	return nil
}

func (t *tool) printJSON(v any) error {
	enc := json.NewEncoder(t.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(t.stderr, "error: write output: %v\n", err)
		return cli.ExitCode(1)
	}
	return nil
}

// Package bmccmd implements "metalhub bmc": check a BMC before registering
// it (inventory, power, one-time boot, virtual media) with the same client the
// controllers use.
package bmccmd

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
)

// PasswordEnv is read when --password is not given, so the password need not
// appear in shell history or process listings.
const PasswordEnv = "METALHUB_BMC_PASSWORD"

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the BMC operation failed
	exitUsage = 2 // bad command line
)

const usage = `usage: bmc <command> [arguments] [flags]

commands:
  systems                         list the BMC's systems
  inspect                         print the JSON inventory of every system (or --system)
  power on|off|graceful-off|restart|force-restart
                                  request a power change of one system
  boot-once pxe|http|cd           boot one system once, on its next boot, from PXE, UEFI HTTP
                                  (--uri: the HttpBootUri; else what DHCP offers) or the
                                  virtual CD
  media list                      list the system's virtual media devices
  media insert URI                mount URI (an ISO) in the system's virtual CD
  media eject [URI]               eject URI (default: whatever is in the virtual CD)

The password is taken from --password or the %s environment variable.

flags:
`

// Main runs the command; args exclude the leading "bmc".
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr}
	c.fs = flag.NewFlagSet("bmc", flag.ContinueOnError)
	c.fs.SetOutput(stderr)
	c.fs.Usage = func() {
		fmt.Fprintf(stderr, usage, PasswordEnv)
		c.fs.PrintDefaults()
	}
	c.fs.StringVar(&c.address, "address", "", "BMC address: https://host[:port] (https is assumed without a scheme)")
	c.fs.StringVar(&c.username, "username", "", "BMC username")
	c.fs.StringVar(&c.password, "password", "", "BMC password (default: $"+PasswordEnv+")")
	c.fs.BoolVar(&c.insecure, "insecure", false, "do not verify the BMC's TLS certificate")
	c.fs.StringVar(&c.caFile, "ca-file", "", "PEM file with the CA(s) that signed the BMC certificate")
	c.fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "timeout of each request to the BMC")
	c.fs.StringVar(&c.system, "system", "", "system ID (default: the only system)")
	c.fs.BoolVar(&c.forceFallback, "force-fallback", false, "power: use the forced reset when the graceful one is not supported")
	c.fs.DurationVar(&c.wait, "wait", 0, "power on|off|graceful-off: wait up to this long for the new state")
	c.fs.StringVar(&c.uri, "uri", "", "boot-once http: the URI the system boots (Boot.HttpBootUri)")

	pos, err := parseInterspersed(c.fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if len(pos) == 0 {
		c.fs.Usage()
		return exitUsage
	}
	cmd, rest := pos[0], pos[1:]
	switch cmd {
	case "systems", "inspect":
		if len(rest) != 0 {
			return c.usageError("%s takes no arguments, got %q", cmd, rest)
		}
	case "power":
		if len(rest) != 1 || powerAction(rest[0]) == "" {
			return c.usageError("power needs one of on, off, graceful-off, restart, force-restart")
		}
	case "boot-once":
		if len(rest) != 1 || bootTarget(rest[0]) == "" {
			return c.usageError("boot-once needs a target: pxe, http or cd")
		}
		if c.uri != "" && bootTarget(rest[0]) != bmc.BootUefiHttp {
			return c.usageError("--uri goes with boot-once http only")
		}
	case "media":
		switch {
		case len(rest) == 1 && rest[0] == "list":
		case len(rest) == 2 && rest[0] == "insert":
		case (len(rest) == 1 || len(rest) == 2) && rest[0] == "eject":
		default:
			return c.usageError("media needs list, insert URI or eject [URI]")
		}
	case "help":
		c.fs.Usage()
		return exitOK
	default:
		return c.usageError("unknown command %q", cmd)
	}
	if code := c.connect(); code != exitOK {
		return code
	}
	defer c.pool.Close()

	switch cmd {
	case "systems":
		return c.systems(ctx)
	case "inspect":
		return c.inspect(ctx)
	case "power":
		return c.power(ctx, powerAction(rest[0]), strings.ToLower(rest[0]))
	case "media":
		return c.media(ctx, rest)
	default:
		return c.bootOnce(ctx, bootTarget(rest[0]))
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

type cli struct {
	stdout, stderr io.Writer
	fs             *flag.FlagSet

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

// parseInterspersed lets flags follow positional arguments ("power on
// --system X"), which the flag package alone does not.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func (c *cli) usageError(format string, args ...any) int {
	fmt.Fprintf(c.stderr, "error: "+format+"\n", args...)
	fmt.Fprintln(c.stderr, "run with -h for usage")
	return exitUsage
}

func (c *cli) connect() int {
	if c.address == "" {
		return c.usageError("--address is required")
	}
	if c.password == "" {
		c.password = os.Getenv(PasswordEnv)
	}
	if c.username == "" || c.password == "" {
		return c.usageError("--username and --password (or $%s) are required", PasswordEnv)
	}
	if c.insecure && c.caFile != "" {
		return c.usageError("--insecure and --ca-file exclude each other")
	}
	ep := bmc.Endpoint{Address: c.address, Username: c.username, Password: c.password, InsecureSkipVerify: c.insecure}
	if c.caFile != "" {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			fmt.Fprintf(c.stderr, "error: read --ca-file: %v\n", err)
			return exitUsage
		}
		ep.CACert = pem
	}
	c.pool = bmc.NewPool(bmc.Options{RequestTimeout: c.timeout})
	b, err := c.pool.Get(ep)
	if err != nil {
		c.pool.Close()
		return c.fail(err)
	}
	c.bmc = b
	return exitOK
}

// fail prints err with a hint for its reason.
func (c *cli) fail(err error) int {
	fmt.Fprintf(c.stderr, "error: %v\n", err)
	if hint := hints[bmc.ReasonOf(err)]; hint != "" {
		fmt.Fprintf(c.stderr, "hint: %s\n", hint)
	}
	return exitError
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

func (c *cli) systems(ctx context.Context) int {
	systems, err := c.bmc.Systems(ctx)
	if err != nil {
		return c.fail(err)
	}
	return c.printJSON(systems)
}

type inspection struct {
	Address string           `json:"address"`
	Manager *bmc.ManagerInfo `json:"manager,omitempty"`
	Systems []*bmc.Inventory `json:"systems"`
	Errors  []string         `json:"errors,omitempty"`
}

func (c *cli) inspect(ctx context.Context) int {
	out := inspection{Address: c.address, Systems: []*bmc.Inventory{}}
	ids := []string{c.system}
	if c.system == "" {
		systems, err := c.bmc.Systems(ctx)
		if err != nil {
			return c.fail(err)
		}
		ids = ids[:0]
		for _, s := range systems {
			ids = append(ids, s.ID)
		}
	}
	code := exitOK
	for _, id := range ids {
		inv, err := c.bmc.Inventory(ctx, id)
		if err != nil {
			out.Errors = append(out.Errors, err.Error())
			fmt.Fprintf(c.stderr, "error: %v\n", err)
			code = exitError
			continue
		}
		out.Systems = append(out.Systems, inv)
		for _, f := range inv.FailedSections {
			fmt.Fprintf(c.stderr, "warning: system %s: section %s unreadable: %s\n", id, f.Section, f.Reason)
		}
	}
	if m, err := c.bmc.Manager(ctx); err == nil {
		out.Manager = m
	} else {
		fmt.Fprintf(c.stderr, "warning: manager unreadable: %v\n", err)
	}
	if rc := c.printJSON(out); rc != exitOK {
		return rc
	}
	return code
}

// pickSystem returns --system or the only system; with several it lists
// them, since guessing would act on the wrong machine.
func (c *cli) pickSystem(ctx context.Context) (string, int) {
	if c.system != "" {
		return c.system, exitOK
	}
	systems, err := c.bmc.Systems(ctx)
	if err != nil {
		return "", c.fail(err)
	}
	switch len(systems) {
	case 0:
		fmt.Fprintln(c.stderr, "error: the BMC reports no systems")
		return "", exitError
	case 1:
		return systems[0].ID, exitOK
	}
	ids := make([]string, len(systems))
	for i, s := range systems {
		ids[i] = s.ID
	}
	fmt.Fprintf(c.stderr, "error: the BMC has %d systems; choose one with --system: %s\n", len(ids), strings.Join(ids, ", "))
	return "", exitUsage
}

func (c *cli) power(ctx context.Context, action bmc.PowerAction, word string) int {
	id, code := c.pickSystem(ctx)
	if code != exitOK {
		return code
	}
	var opts []bmc.PowerOption
	if c.forceFallback {
		opts = append(opts, bmc.WithForceFallback())
	}
	if err := c.bmc.Power(ctx, id, action, opts...); err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.stdout, "power %s accepted for system %s; the power state changes asynchronously\n", word, id)
	want := map[bmc.PowerAction]bmc.PowerState{bmc.PowerOn: bmc.PowerStateOn, bmc.PowerOff: bmc.PowerStateOff, bmc.PowerGracefulOff: bmc.PowerStateOff}[action]
	if c.wait <= 0 || want == "" {
		return exitOK
	}
	deadline := time.Now().Add(c.wait)
	for {
		st, err := c.bmc.System(ctx, id)
		if err != nil {
			return c.fail(err)
		}
		if st.PowerState == want {
			fmt.Fprintf(c.stdout, "system %s is %s\n", id, st.PowerState)
			return exitOK
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(c.stderr, "error: system %s is still %s after %s\n", id, st.PowerState, c.wait)
			return exitError
		}
		select {
		case <-ctx.Done():
			return c.fail(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *cli) bootOnce(ctx context.Context, target bmc.BootTarget) int {
	id, code := c.pickSystem(ctx)
	if code != exitOK {
		return code
	}
	var opts []bmc.BootOption
	if c.uri != "" {
		opts = append(opts, bmc.WithHTTPBootURI(c.uri))
	}
	if err := c.bmc.SetBootOnce(ctx, id, target, opts...); err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.stdout, "system %s will boot from %s once, on its next boot\n", id, target)
	return exitOK
}

func (c *cli) media(ctx context.Context, args []string) int {
	id, code := c.pickSystem(ctx)
	if code != exitOK {
		return code
	}
	switch args[0] {
	case "list":
		slots, err := c.bmc.VirtualMedia(ctx, id)
		if err != nil {
			return c.fail(err)
		}
		return c.printJSON(slots)
	case "insert":
		if err := c.bmc.InsertMedia(ctx, id, args[1]); err != nil {
			return c.fail(err)
		}
		fmt.Fprintf(c.stdout, "%s is in the virtual CD of system %s\n", args[1], id)
	default:
		image := ""
		if len(args) == 2 {
			image = args[1]
		}
		if err := c.bmc.EjectMedia(ctx, id, image); err != nil {
			return c.fail(err)
		}
		fmt.Fprintf(c.stdout, "virtual CD of system %s ejected\n", id)
	}
	return exitOK
}

func (c *cli) printJSON(v any) int {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(c.stderr, "error: write output: %v\n", err)
		return exitError
	}
	return exitOK
}

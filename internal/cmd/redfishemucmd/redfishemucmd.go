// Package redfishemucmd implements "metalhub emulate bmc": a fleet of emulated
// Redfish BMCs on consecutive ports, for trying metalhub without hardware.
//
// It only parses flags and serves: how a BMC behaves is internal/emulator/redfish's, and it
// touches no cluster.
package redfishemucmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"github.com/metalhub/metalhub/internal/cli"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/syncbuf"
)

// Main runs the command; args exclude the leading "emulate" and start with
// "bmc", as "metalhub emulate" passes them. It returns 0 when interrupted, 1
// when the emulator could not start, 2 on a bad command line.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &cobra.Command{Use: "emulate", Args: cobra.NoArgs, RunE: cli.NeedSubcommand}
	e.CompletionOptions.DisableDefaultCmd = true // "metalhub completion" is the binary's
	e.AddCommand(Command())
	return cli.Execute(ctx, e, args, stdout, stderr)
}

// Command is "bmc", to be added under "emulate".
func Command() *cobra.Command {
	f := &flags{}
	c := &cobra.Command{
		Use:   "bmc [flags]",
		Short: "a fleet of Redfish BMCs (power, boot override, inventory, faults)",
		Long: `Runs emulated Redfish BMCs until interrupted. BMC i listens on the --listen
port + i (port 0 picks free ports). Each line printed names one BMC, its URL,
credentials and system IDs; with --ssh-console a second line names its SSH
serial console.`,
		Example: `  metalhub emulate bmc --servers 4 --control 127.0.0.1:7999
  metalhub emulate bmc --listen 127.0.0.1:0 --power-delay 0 --ssh-console`,
		Args: cobra.ExactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error { return f.run(c.Context(), c.OutOrStdout(), c.ErrOrStderr()) },
	}
	fs := c.Flags()
	fs.IntVar(&f.servers, "servers", 1, "number of BMCs")
	fs.IntVar(&f.perBMC, "systems-per-bmc", 0, "systems behind each BMC (default: the --latency preset's, 1 for fast)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8000", "address of BMC 0; BMC i uses port+i (port 0: free ports)")
	fs.StringVar(&f.control, "control", "", "address for the control API (faults, records), e.g. 127.0.0.1:7999; empty: off")
	fs.StringVar(&f.username, "username", "admin", "username every BMC accepts")
	fs.StringVar(&f.password, "password", "password", "password every BMC accepts")
	fs.DurationVar(&f.powerDelay, "power-delay", 3*time.Second, "time a power transition takes (0: instant)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed for the generated inventory")
	fs.BoolVar(&f.tls, "tls", false, "serve HTTPS with a self-signed certificate (printed)")
	fs.IntVar(&f.maxSessions, "max-sessions", 16, "open sessions each BMC allows")
	fs.StringVar(&f.latency, "latency", redfish.LatencyFast, "how fast and how much at once each BMC answers: "+
		"fast (at once, no cap), typical (median 250ms within 100ms-2s, 4 at once, 30s silent after a reset, 8 systems per BMC) "+
		"or slow (median 1s up to 5s, 2 at once, 60s silent after a reset, 16 systems per BMC)")
	fs.BoolVar(&f.sshConsole, "ssh-console", false, "give each BMC an SSH serial console on a free port (printed, with the host key fingerprint): "+
		"log in with the BMC's credentials and run \"console <systemID>\"")
	return c
}

// run serves the fleet until ctx ends.
func (f *flags) run(ctx context.Context, stdout, stderr io.Writer) error {
	opts, err := f.options()
	if err != nil {
		return cli.Usage(err)
	}
	out := syncbuf.NewWriter(stdout)
	opts.OnBoot = func(ev redfish.BootEvent) {
		fmt.Fprintf(out, "pxe-boot bmc=%d system=%s uuid=%s macs=%s\n", ev.BMC, ev.SystemID, ev.UUID, strings.Join(ev.MACs, ","))
	}
	em, err := redfish.Start(opts)
	if err != nil {
		fmt.Fprintf(stderr, "error: start emulator: %v\n", err)
		return cli.ExitCode(1)
	}
	defer em.Close()

	var ctl *http.Server
	if f.control != "" {
		l, err := net.Listen("tcp", f.control)
		if err != nil {
			fmt.Fprintf(stderr, "error: listen for the control API on %s: %v\n", f.control, err)
			return cli.ExitCode(1)
		}
		ctl = &http.Server{Handler: em.ControlHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = ctl.Serve(l) }()
		defer ctl.Close()
		fmt.Fprintf(out, "control http://%s/emulator/bmcs (records: /emulator/records)\n", l.Addr())
	}
	delay := "instant"
	if opts.PowerDelay > 0 {
		delay = opts.PowerDelay.String()
	}
	fmt.Fprintf(out, "emulating %d BMCs with %d system(s) each, power delay %s, latency %s\n", opts.BMCs, em.Options().SystemsPerBMC, delay, opts.Latency)
	for _, b := range em.BMCs() {
		i := b.Info()
		fmt.Fprintf(out, "bmc %d %s username=%s password=%s vendor=%s systems=%s\n",
			i.Index, i.URL, i.Username, i.Password, i.Vendor, strings.Join(i.SystemIDs, ","))
	}
	if opts.SSHConsole {
		fmt.Fprintf(out, "ssh-console host-key %s\n", ssh.FingerprintSHA256(em.SSHHostKey()))
		for _, b := range em.BMCs() {
			host, port, _ := net.SplitHostPort(b.SSHAddress())
			user, _ := b.Credentials()
			fmt.Fprintf(out, "bmc %d ssh-console %s (ssh -p %s %s@%s console %s)\n",
				b.Index(), b.SSHAddress(), port, user, host, b.SystemIDs()[0])
		}
	}
	if opts.TLS {
		fmt.Fprintf(out, "ca-certificate:\n%s", em.CACertPEM())
	}
	<-ctx.Done()
	return nil
}

type flags struct {
	servers, perBMC    int
	listen, control    string
	username, password string
	powerDelay         time.Duration
	seed               uint64
	tls                bool
	maxSessions        int
	sshConsole         bool
	latency            string
}

func (f *flags) options() (redfish.Options, error) {
	if f.servers < 1 || f.perBMC < 0 {
		return redfish.Options{}, errors.New("--servers must be at least 1, --systems-per-bmc not negative")
	}
	latency, err := redfish.Preset(f.latency)
	if err != nil {
		return redfish.Options{}, fmt.Errorf("--latency: %w", err)
	}
	host, portStr, err := net.SplitHostPort(f.listen)
	if err != nil {
		return redfish.Options{}, fmt.Errorf("--listen %q: %w", f.listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port+f.servers-1 > 65535 {
		return redfish.Options{}, fmt.Errorf("--listen %q: port must leave room for %d BMCs", f.listen, f.servers)
	}
	delay := f.powerDelay
	if delay == 0 {
		delay = -1 // the library reads 0 as "default"
	}
	return redfish.Options{
		BMCs: f.servers, SystemsPerBMC: f.perBMC, Host: host, BasePort: port, Seed: f.seed,
		Username: f.username, Password: f.password, PowerDelay: delay, TLS: f.tls, MaxSessions: f.maxSessions,
		SSHConsole: f.sshConsole, Latency: latency,
	}, nil
}

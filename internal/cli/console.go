package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/console"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
)

// consoleOptions are console's flags.
type consoleOptions struct {
	knownHosts  string
	fingerprint string
	insecure    bool
	timeout     time.Duration
}

func consoleCommand() *cobra.Command {
	var o consoleOptions
	c := &cobra.Command{
		Use:   "console SERVER",
		Short: "open a server's serial console through its BMC (SSH)",
		Long: `Open the serial console of a server through its BMC's SSH serial console (Redfish
SerialConsole.SSH: the port and the command that selects the system's console). The BMC's
address and credentials are read with your kubeconfig from the server's BMC and BMCSecret, so
your RBAC decides; the system is proven to be the server's (UUID, serial number) before the
console opens. The BMC's host key is checked against known_hosts, or a fingerprint you checked
out of band. A BMC's spec.consoleProtocol (SSH, SSHLenovo) sets the port where Redfish says
nothing. Type ~. at the start of a line to leave.`,
		Example: `  metalhub console my-server
  metalhub console my-server --host-key-fingerprint SHA256:...`,
		Args: cobra.ExactArgs(1),
	}
	k := newKube(c)
	c.ValidArgsFunction = k.completeServers(1)
	c.Flags().StringVar(&o.knownHosts, "known-hosts", "", "known_hosts file with the BMCs' SSH host keys (default ~/.ssh/known_hosts).")
	c.Flags().StringVar(&o.fingerprint, "host-key-fingerprint", "", "Accept only this host key (SHA256:..., as ssh-keygen -lf prints it) instead of known_hosts.")
	c.Flags().BoolVar(&o.insecure, "insecure-ignore-host-key", false, "Accept any host key (anyone on the path can read the console and type into it).")
	c.Flags().DurationVar(&o.timeout, "connect-timeout", 30*time.Second, "How long finding and reaching the console may take.")
	c.RunE = func(c *cobra.Command, args []string) error {
		cl, err := k.client()
		if err != nil {
			return err
		}
		return runConsole(c.Context(), cl, args[0], o, c.InOrStdin(), c.OutOrStdout(), c.ErrOrStderr())
	}
	return c
}

// consoleTarget finds where s's serial console is: the BMC's host, credentials, the SSH port
// and the entry command, from the proven system's Redfish SerialConsole and the BMC's
// spec.consoleProtocol.
func consoleTarget(ctx context.Context, cl client.Reader, s *metalv1alpha1.Server) (console.Target, error) {
	ep, err := bmcaccess.ServerEndpoint(ctx, cl, s)
	if err != nil {
		return console.Target{}, fmt.Errorf("finding the BMC of server %s: %w", s.Name, err)
	}
	u, err := url.Parse(ep.Address)
	if err != nil {
		return console.Target{}, fmt.Errorf("BMC address %q: %w", ep.Address, err)
	}
	var proto *metalv1alpha1.ConsoleProtocol
	if s.Spec.BMCRef != nil {
		b := &metalv1alpha1.BMC{}
		if err := cl.Get(ctx, client.ObjectKey{Name: s.Spec.BMCRef.Name}, b); err == nil {
			proto = b.Spec.ConsoleProtocol
		}
	}
	if proto != nil && proto.Name == "IPMI" {
		return console.Target{}, fmt.Errorf("BMC %s offers its console over IPMI Serial-over-LAN only; use ipmitool sol activate", s.Spec.BMCRef.Name)
	}
	pool := bmc.NewPool(bmc.Options{})
	defer pool.Close()
	conn, system, err := bmcaccess.ServerBMC(ctx, cl, pool, s)
	if err != nil {
		return console.Target{}, fmt.Errorf("reaching the BMC of server %s: %w", s.Name, err)
	}
	sc, err := conn.SerialConsole(ctx, system)
	if err != nil {
		return console.Target{}, fmt.Errorf("reading the serial console of server %s: %w", s.Name, err)
	}
	port := sc.Port
	if proto != nil {
		port = int(proto.Port)
		if sc.EntryCommand == "" && proto.Name == "SSHLenovo" {
			// XClarity's SSH CLI selects the host's console with this command.
			sc.EntryCommand = "console 1"
		}
	} else if !sc.SSHEnabled {
		hint := ""
		if sc.IPMIEnabled {
			hint = " (it offers IPMI Serial-over-LAN: ipmitool sol activate)"
		}
		return console.Target{}, fmt.Errorf("the BMC of server %s has no SSH serial console%s; if it does, set its spec.consoleProtocol", s.Name, hint)
	}
	return console.Target{Address: net.JoinHostPort(u.Hostname(), strconv.Itoa(port)), Username: ep.Username,
		Password: ep.Password, EntryCommand: sc.EntryCommand}, nil
}

func runConsole(ctx context.Context, cl client.Reader, name string, o consoleOptions, in io.Reader, out, errOut io.Writer) error {
	hostKey, err := console.HostKeyCallback(o.knownHosts, o.fingerprint, o.insecure)
	if err != nil {
		return Usage(err)
	}
	s := &metalv1alpha1.Server{}
	if err := cl.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
		return fmt.Errorf("reading server %s: %w", name, err)
	}
	dctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	t, err := consoleTarget(dctx, cl, s)
	if err != nil {
		return err
	}
	sess, err := console.Dial(dctx, t, hostKey)
	if err != nil {
		if errors.Is(err, console.ErrUnknownHostKey) || errors.Is(err, console.ErrHostKeyMismatch) {
			fmt.Fprintln(errOut, err)
			return ExitCode(1)
		}
		return fmt.Errorf("opening the console of server %s at %s: %w", name, t.Address, err)
	}
	defer sess.Close()

	// A terminal goes raw, so keystrokes (Ctrl-C too) reach the server; its size follows the window.
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fd := int(f.Fd())
		state, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("raw terminal: %w", err)
		}
		defer func() { _ = term.Restore(fd, state) }()
		resize := func() {
			if w, h, err := term.GetSize(fd); err == nil {
				_ = sess.Resize(w, h)
			}
		}
		resize()
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for range winch {
				resize()
			}
		}()
	}
	fmt.Fprintf(errOut, "Connected to the serial console of server %s (%s). Type ~. at the start of a line to leave.\r\n", name, t.Address)
	if err := sess.Attach(ctx, in, out); err != nil {
		return fmt.Errorf("console of server %s: %w", name, err)
	}
	fmt.Fprintf(errOut, "\r\nConnection to the console of server %s closed.\r\n", name)
	return nil
}

// Package dev is `metalhub dev` (`make run`): everything a newcomer needs to see metalhub work
// on one machine — a local control plane (or an existing cluster) with the CRDs, an emulated BMC
// fleet whose PXE boots run the real discovery probe, an Infrahub emulator with sample
// artifacts, and the operator in the same process, with a live table of what happens. Ctrl-C
// stops all of it.
//
// It holds no operator logic: it runs internal/manager as the binary does, and creates only what a
// user would (BMCSecrets, BMCs, the Infrahub credentials and a sample InfrahubSync). It must not
// touch real hardware: every BMC it registers is an emulator it started.
package dev

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/config/crd"
	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/cli"
	"github.com/metalhub/metalhub/internal/controller/delivery/receiver"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcevents"
	"github.com/metalhub/metalhub/internal/controlplane"
	"github.com/metalhub/metalhub/internal/dashboard"
	"github.com/metalhub/metalhub/internal/manager"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/telemetry"
	"github.com/metalhub/metalhub/internal/webhook"
)

// Options configure a dev run.
type Options struct {
	// DataDir keeps etcd's data, the kubeconfig and the fleet's power states between runs;
	// empty means a temporary directory removed on exit.
	DataDir string
	// Kubeconfig points at an existing cluster to use instead of a local control plane.
	Kubeconfig string
	// Servers is the size of the emulated fleet (one system per BMC).
	Servers int
	// NoEmulators runs only the control plane and the operator.
	NoEmulators bool
	// BMCBasePort puts emulated BMC i on 127.0.0.1:BMCBasePort+i.
	BMCBasePort int
	// PowerDelay is how long an emulated power transition takes.
	PowerDelay time.Duration
	// BMCLatency is the emulated BMCs' latency preset (fast, typical, slow: redfish.Preset);
	// dev keeps one system per BMC whatever the preset's chassis.
	BMCLatency string
	// EmulatorControlAddress serves the BMC emulator's recorder and fault menu.
	EmulatorControlAddress string
	// InfrahubAddress is where the Infrahub emulator listens.
	InfrahubAddress string
	// RegistryAddress is where the discovery registry listens (the emulated servers post there).
	RegistryAddress string
	// Table prints the live table of servers and syncs: redrawn in place on a terminal, printed
	// again when it changes otherwise.
	Table bool
	// LogFile receives the operator's and the emulators' logs: "-" is stderr; empty is
	// metalhub-dev.log in the data dir (with a temporary data dir, a file kept in the temp dir)
	// while the table is on, stderr when it is off.
	LogFile string
	// WebhookPort is where the operator serves the admission webhooks to the local control
	// plane (127.0.0.1 only; 0 picks a free port). With Kubeconfig set the webhooks are off:
	// another cluster's API server cannot reach this process.
	WebhookPort int
	// AddressFile, if set, receives the addresses the run listens on (JSON, Addresses) once
	// everything is up: with port 0 in an address, the port the system picked.
	AddressFile string
	// DashboardAddress serves the fleet's web view (metalhub dashboard); "off" turns it off.
	DashboardAddress string
	// DashboardActions shows the dashboard's buttons that write (cordon, park, power).
	DashboardActions bool
	// Manager configures the operator run in-process.
	Manager manager.Options
}

// DefaultOptions bind everything to loopback so a dev run exposes nothing.
func DefaultOptions() Options {
	m := manager.DefaultOptions()
	m.MetricsAddr = "127.0.0.1:8080"
	m.HealthAddr = "127.0.0.1:8081"
	m.Metal.PowerPoll = 500 * time.Millisecond
	// A released server is cleaned before it is Available again: the emulated disks are files
	// its OS wrote to, and the agent erases them for real.
	m.Metal.CleaningPolicy = metalv1alpha1.CleaningPolicyAllDisks
	// A local run is one admin's: the samples name no ServiceAccount, and the operator applies
	// them as itself.
	m.Delivery.AllowOperatorIdentity = true
	// The Infrahub emulator serves plain HTTP on loopback.
	m.Delivery.AllowPlainHTTPCredentials = true
	// And announces changed artifacts to the receiver, with the key dev keeps in this Secret.
	m.Delivery.ReceiverBindAddress = "127.0.0.1:8084"
	m.Delivery.ReceiverSecret = "default/" + webhookKeySecret
	// The emulated servers' power and temperatures, on the dashboard's tiles and /metrics.
	m.Metal.TelemetryInterval = 15 * time.Second
	return Options{
		Servers: 8, BMCBasePort: 18000, PowerDelay: time.Second, BMCLatency: "fast",
		EmulatorControlAddress: "127.0.0.1:17999", InfrahubAddress: "127.0.0.1:8300", RegistryAddress: "127.0.0.1:8082",
		Table: true, Manager: m, WebhookPort: webhook.DefaultPort,
		// A local run is one admin's, who came to try things: the buttons are on.
		DashboardAddress: dashboard.DefaultOptions().Address, DashboardActions: true,
	}
}

// BindFlags registers the dev flags on fs.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "Keep etcd's data, the kubeconfig and the fleet's power states here so a second run resumes (default: temporary, removed on exit).")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Use the cluster of this kubeconfig instead of starting a local control plane.")
	fs.IntVar(&o.Servers, "servers", o.Servers, "Number of emulated servers (one BMC each).")
	fs.BoolVar(&o.NoEmulators, "no-emulators", o.NoEmulators, "Run only the control plane and the operator: no emulated BMCs or Infrahub.")
	fs.IntVar(&o.BMCBasePort, "bmc-base-port", o.BMCBasePort, "Emulated BMC i listens on 127.0.0.1:<port+i>; 0 picks a free port for each.")
	fs.DurationVar(&o.PowerDelay, "power-delay", o.PowerDelay, "How long an emulated power transition takes.")
	fs.StringVar(&o.BMCLatency, "bmc-latency", o.BMCLatency, "How fast and how much at once the emulated BMCs answer: fast (at once), "+
		"typical (median 250ms, 4 requests at once, 30s silent after a reset) or slow (median 1s, 2 at once, 60s silent).")
	fs.StringVar(&o.EmulatorControlAddress, "emulator-control-address", o.EmulatorControlAddress, "Address of the BMC emulator's recorder and fault menu (/emulator/...).")
	fs.StringVar(&o.InfrahubAddress, "infrahub-address", o.InfrahubAddress, "Address of the Infrahub emulator.")
	fs.StringVar(&o.RegistryAddress, "registry-address", o.RegistryAddress, "Address of the discovery registry the emulated servers report to.")
	fs.BoolVar(&o.Table, "table", o.Table, "Print a live table of servers and syncs (redrawn in place on a terminal).")
	fs.StringVar(&o.LogFile, "log-file", o.LogFile, "Write the logs to this file (\"-\": stderr). Default: metalhub-dev.log in the data dir while the table is on, so the table stays readable; stderr with --table=false.")
	fs.IntVar(&o.WebhookPort, "webhook-port", o.WebhookPort, "Port on 127.0.0.1 of the operator's admission webhooks, which the local control plane calls (0 picks a free one; off with --kubeconfig).")
	fs.StringVar(&o.Manager.MetricsAddr, "metrics-bind-address", o.Manager.MetricsAddr, "Address of the operator's metrics endpoint; \"0\" disables it.")
	fs.StringVar(&o.Manager.Delivery.ReceiverBindAddress, "receiver-address", o.Manager.Delivery.ReceiverBindAddress,
		"Address of the operator's Infrahub webhook receiver, which the Infrahub emulator's webhook calls on every changed artifact; \"0\": off, the syncs poll.")
	fs.StringVar(&o.Manager.HealthAddr, "health-probe-bind-address", o.Manager.HealthAddr, "Address of the operator's /healthz and /readyz.")
	fs.StringVar(&o.AddressFile, "address-file", o.AddressFile, "Write the addresses this run listens on (operator endpoints, emulators, BMCs) as JSON to this file once it is up; a port 0 in any address or --bmc-base-port 0 picks free ports, which the file names.")
	fs.StringVar(&o.DashboardAddress, "dashboard-address", o.DashboardAddress, "Address of the fleet's web view (as metalhub dashboard serves it); port 0 picks a free one, \"off\" turns it off.")
	fs.BoolVar(&o.DashboardActions, "dashboard-actions", o.DashboardActions, "Show the dashboard's buttons that write (cordon, park, power), as the local admin.")
	fs.Var(cleaning.Flag(&o.Manager.Metal.CleaningPolicy), "cleaning-policy", "What is erased of a released server's emulated disks before it is Available again: None, Metadata, RootDisk or AllDisks (see the operator's flag).")
	fs.Var(&o.Manager.Controllers, "controllers", "Controller families to run: metal, delivery, or both.")
	fs.DurationVar(&o.Manager.Metal.HardwareLogPoll, "hardware-log-poll-interval", o.Manager.Metal.HardwareLogPoll, "How often each server's hardware log (SEL) is read; the emulated BMCs also send events, which bring a read at once.")
	fs.DurationVar(&o.Manager.Metal.TelemetryInterval, "telemetry-interval", o.Manager.Metal.TelemetryInterval, "How often each emulated server's Redfish telemetry is read (see the operator's flag): the dashboard's tiles show its power draw, hottest temperature and failed power supplies or fans. 0: off.")
	fs.Var(&o.Manager.Metal.HardwareFaultPolicy, "hardware-fault-policy", "What a critical hardware event does: None, Taint or TaintAndMaintenance (see the operator's flag).")
}

// Run runs the dev environment until ctx is cancelled: the table and what to do next go to out,
// the logs (built from zapOpts) to the log file, or errOut. ready, if not nil, is called with
// the kubeconfig path once everything is registered and the operator is about to start.
func Run(ctx context.Context, o Options, out, errOut io.Writer, zapOpts *zap.Options, ready func(kubeconfig string)) error {
	// A reader that went away (`make run | tee`, Ctrl-C ends tee first) must not kill the run
	// before it stops the control plane: writes fail instead, and are dropped.
	signal.Ignore(syscall.SIGPIPE)
	cfg, kubeconfig, dataDir, stop, err := cluster(o, out)
	if err != nil {
		return err
	}
	logPath, logOut, closeLog, err := logDestination(o, dataDir, errOut)
	if err != nil {
		stop()
		return err
	}
	defer closeLog()
	log := zap.New(zap.UseFlagOptions(zapOpts), zap.WriteTo(logOut))
	ctrl.SetLogger(log)
	if logPath != "" {
		fmt.Fprintf(out, "logs go to %s\n", logPath)
	}
	if o.Kubeconfig == "" {
		// A self-signed CA and certificate, generated once into the data dir; the webhook
		// configuration pointing at 127.0.0.1 is installed once the server answers.
		o.Manager.Webhook = webhook.Options{Enabled: true, Host: "127.0.0.1", Port: o.WebhookPort,
			CertDir: filepath.Join(dataDir, "webhook-certs")}
	} else {
		log.Info("admission webhooks off: the cluster's API server cannot call this process; CRD rules still apply")
	}
	defer stop()
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}

	if o.Manager.Webhook.Enabled {
		// A configuration left by an earlier run on this data dir would refuse the samples
		// registered below until the operator serves again; it is installed anew once it does.
		if err := webhook.UninstallLocal(ctx, c); err != nil {
			return err
		}
	}
	if !o.NoEmulators {
		o.Manager.Metal.RegistryBindAddress = o.RegistryAddress
	}
	// The operator's endpoints are bound first: the registry's URL goes into the discovery
	// ignition, and the webhook's into the webhook configuration.
	listeners, err := manager.Listen(o.Manager)
	if err != nil {
		return err
	}
	o.Manager.Listeners = listeners
	handedOver := false
	defer func() {
		if !handedOver {
			_ = listeners.Close()
		}
	}()
	addrs := Addresses{Addresses: listeners.Addresses()}
	if !o.NoEmulators {
		o.Manager.Metal.RegistryURL = "http://" + addrs.Registry
		// The emulated BMCs deliver their events to the receiver on the registry's listener.
		if o.Manager.Metal.HardwareEventsURL == "" {
			o.Manager.Metal.HardwareEventsURL = "http://" + addrs.Registry + bmcevents.EventsPath
		}
	}
	if o.Manager.Webhook.Enabled {
		if o.Manager.Webhook.Port, err = port(addrs.Webhook); err != nil {
			return err
		}
	}
	knownHosts := ""
	if !o.NoEmulators {
		emus, err := startEmulators(o, c, out, log)
		if err != nil {
			return err
		}
		defer emus.close()
		if addrs.Receiver != "" {
			emus.receiverURL = "http://" + addrs.Receiver + receiver.Path
		}
		if err := emus.register(ctx, c); err != nil {
			return err
		}
		addrs.EmulatorControl, addrs.Infrahub, addrs.BMCs = emus.addresses()
		if dataDir != "" {
			knownHosts = filepath.Join(dataDir, "known_hosts")
			if err := emus.writeKnownHosts(knownHosts); err != nil {
				return err
			}
		}
	}
	if o.Manager.Metal.TelemetryInterval > 0 && o.Manager.Metal.Telemetry == nil {
		// The collector's readings, which the dashboard's tiles show: it runs in this process.
		o.Manager.Metal.Telemetry = telemetry.NewMetrics(o.Manager.Metal.TelemetryMaxSensorsPerServer)
	}
	dashboardURL := ""
	if o.DashboardAddress != "off" {
		do := dashboard.Options{Address: o.DashboardAddress, AllowActions: o.DashboardActions}
		if o.Manager.Metal.TelemetryInterval > 0 {
			do.Telemetry = o.Manager.Metal.Telemetry
		}
		if addrs.EmulatorControl != "" {
			do.RecorderURL = "http://" + addrs.EmulatorControl
		}
		d, err := dashboard.New(cfg, do, log.WithName("dashboard"))
		if errors.Is(err, dashboard.ErrActionsNeedAuth) {
			// dashboard.New names its own command's flags; these are dev's.
			return fmt.Errorf("starting the dashboard: --dashboard-address %s is not loopback: "+
				"anyone reaching it could press its buttons as the local admin; add --dashboard-actions=false or listen on 127.0.0.1", o.DashboardAddress)
		}
		if err != nil {
			return fmt.Errorf("starting the dashboard: %w", err)
		}
		dashboardURL = d.URL()
		addrs.Dashboard = dashboardURL
		go func() {
			if err := d.Run(ctx); err != nil {
				log.Error(err, "dashboard stopped")
			}
		}()
	}
	handedOver = true // New closes them if it fails, the manager once it stops
	mgr, err := manager.New(cfg, o.Manager, log)
	if err != nil {
		return err
	}
	if o.Manager.Webhook.Enabled {
		if err := mgr.Add(localWebhooks{mgr: mgr, c: c, o: o.Manager.Webhook, log: log.WithName("webhook")}); err != nil {
			return err
		}
	}

	up := upText(o, kubeconfig, dashboardURL, logPath, knownHosts)
	fmt.Fprint(out, "\n"+up)
	if o.Table {
		go liveTable(ctx, c, out, strings.TrimRight(up, "\n"), 2*time.Second)
	}
	if o.AddressFile != "" {
		if err := manager.WriteAddressFile(o.AddressFile, addrs); err != nil {
			return err
		}
	}
	if ready != nil {
		ready(kubeconfig)
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}

// Addresses are where a dev run listens (host:port), as --address-file writes them.
type Addresses struct {
	manager.Addresses
	// EmulatorControl serves the BMC recorder and fault menu.
	EmulatorControl string `json:"emulatorControl,omitempty"`
	Infrahub        string `json:"infrahub,omitempty"`
	// BMCs are the emulated BMCs, BMC i at index i.
	BMCs []string `json:"bmcs,omitempty"`
	// Dashboard is the web view's URL.
	Dashboard string `json:"dashboard,omitempty"`
}

func port(addr string) (int, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("address %q: %w", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return 0, fmt.Errorf("address %q: %w", addr, err)
	}
	return n, nil
}

var assetsDir string

// cluster starts a local control plane, or connects to the one o.Kubeconfig names and installs
// the CRDs there. It returns a config, a kubeconfig path for users, the data directory (empty
// for another cluster) and a stop function.
func cluster(o Options, out io.Writer) (*rest.Config, string, string, func(), error) {
	crds, err := crd.CRDs()
	if err != nil {
		return nil, "", "", nil, err
	}
	if o.Kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		if err != nil {
			return nil, "", "", nil, fmt.Errorf("reading kubeconfig %s: %w", o.Kubeconfig, err)
		}
		fmt.Fprintf(out, "installing %d CRDs into the cluster of %s\n", len(crds), o.Kubeconfig)
		if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: crds}); err != nil {
			return nil, "", "", nil, fmt.Errorf("installing CRDs: %w", err)
		}
		return cfg, o.Kubeconfig, "", func() {}, nil
	}

	dataDir, cleanup := o.DataDir, func() {}
	if dataDir == "" {
		tmp, err := os.MkdirTemp("", "metalhub-dev-")
		if err != nil {
			return nil, "", "", nil, err
		}
		dataDir, cleanup = tmp, func() { _ = os.RemoveAll(tmp) }
	} else if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, "", "", nil, fmt.Errorf("creating data dir: %w", err)
	}
	fmt.Fprintf(out, "starting kube-apiserver and etcd (data in %s)\n", dataDir)
	cp, err := controlplane.Start(controlplane.Options{DataDir: dataDir})
	if err != nil {
		cleanup()
		return nil, "", "", nil, err
	}
	assetsDir = cp.AssetsDir
	// A second Ctrl-C exits at once: the control plane goes with it.
	unhook := cli.OnForcedExit(cp.Kill)
	stop := func() {
		unhook()
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(out, "stopping control plane: %v\n", err)
		}
		cleanup()
	}
	kubeconfig := filepath.Join(dataDir, "kubeconfig")
	if err := cp.WriteAdminKubeconfig(kubeconfig); err != nil {
		stop()
		return nil, "", "", nil, err
	}
	return cp.Config, kubeconfig, dataDir, stop, nil
}

// localWebhooks registers the operator's webhooks with the local control plane once the
// webhook server answers (a configuration left by an earlier run with --data-dir is updated).
type localWebhooks struct {
	mgr ctrl.Manager
	c   client.Client
	o   webhook.Options
	log logr.Logger
}

// NeedLeaderElection is false: it must run even if leader election is turned on.
func (localWebhooks) NeedLeaderElection() bool { return false }

func (l localWebhooks) Start(ctx context.Context) error {
	started := l.mgr.GetWebhookServer().StartedChecker()
	for started(&http.Request{}) != nil {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
	ca, err := os.ReadFile(filepath.Join(l.o.CertDir, webhook.CAFile))
	if err != nil {
		return fmt.Errorf("reading the webhook CA: %w", err)
	}
	if err := webhook.InstallLocal(ctx, l.c, webhook.LocalURL(l.o), ca); err != nil {
		return err
	}
	if err := webhook.WaitActive(ctx, l.c, 30*time.Second); err != nil {
		return err
	}
	l.log.Info("admission webhooks registered", "url", webhook.LocalURL(l.o))
	return nil
}

// logDestination opens where the logs go (see Options.LogFile) and returns its path ("" for
// stderr).
func logDestination(o Options, dataDir string, errOut io.Writer) (string, io.Writer, func(), error) {
	path := o.LogFile
	switch {
	case path == "-" || (path == "" && !o.Table):
		return "", errOut, func() {}, nil
	case path == "" && o.DataDir != "":
		path = filepath.Join(dataDir, "metalhub-dev.log")
	case path == "":
		// The temporary data dir goes on exit; the log is worth keeping.
		f, err := os.CreateTemp("", "metalhub-dev-*.log")
		if err != nil {
			return "", nil, nil, fmt.Errorf("creating the log file: %w", err)
		}
		return f.Name(), f, func() { _ = f.Close() }, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return "", nil, nil, fmt.Errorf("opening the log file: %w", err)
	}
	return path, f, func() { _ = f.Close() }, nil
}

// upText says what runs and what to try next; on a terminal it stays above the live table.
func upText(o Options, kubeconfig, dashboardURL, logPath, knownHosts string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "metalhub dev is up. In another shell:\n  export KUBECONFIG=%s\n", kubeconfig)
	if o.Kubeconfig == "" {
		fmt.Fprintf(&b, "  alias kubectl=%s\n", filepath.Join(assetsDir, "kubectl"))
	}
	fmt.Fprintf(&b, "  kubectl get bmcs,servers,serverclaims,infrahubsyncs,vidraresources\n")
	if !o.NoEmulators {
		fmt.Fprintf(&b, "  kubectl apply -f config/samples/dev/serverclaim.yaml   # claim a server and power it on\n")
		fmt.Fprintf(&b, "  bin/metalhub servers | power restart <server> | park <server>\n")
	}
	if knownHosts != "" {
		fmt.Fprintf(&b, "  bin/metalhub console <server> --known-hosts %s\n", knownHosts)
	}
	if dashboardURL != "" {
		fmt.Fprintf(&b, "dashboard: %s\n", dashboardURL)
	}
	if logPath != "" {
		fmt.Fprintf(&b, "logs: %s\n", logPath)
	}
	fmt.Fprintf(&b, "Ctrl-C stops everything.\n")
	return b.String()
}

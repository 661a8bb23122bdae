// Package metal is the assembly of the metal.ironcore.dev family: its Options and flags, and
// Setup, which starts the indexes, the discovery registry (with the metadata service), the BMC
// event receiver, the event sink, the BMC connection pool and the family's reconcilers (BMCs,
// BMCUsers, Servers, claims, boot configurations, maintenances and their groups, readiness rules,
// ServerWirings), each of which lives in a package of its own. It also lends "metalhub migrate
// plan" the family's rules (switch.go).
//
// It holds no reconciler. No controller or shared package of the family may import it
// (hack/layers.sh checks this), so that the wiring stays above what it wires.
package metal

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccert"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccontroller"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcuser"
	"github.com/metalhub/metalhub/internal/controller/metal/claim"
	"github.com/metalhub/metalhub/internal/controller/metal/health"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/controller/metal/server"
	"github.com/metalhub/metalhub/internal/controller/metal/wiring"
	"github.com/metalhub/metalhub/internal/discovery"
	"github.com/metalhub/metalhub/internal/eventsink"
	"github.com/metalhub/metalhub/internal/metadata"
	"github.com/metalhub/metalhub/internal/registry"
	"github.com/metalhub/metalhub/internal/telemetry"
)

// Options configure the metal family.
type Options struct {
	// Options (package server) configure the Server controller; the fields other controllers share
	// (request timeout, retry, concurrency, shards) are read from here too.
	server.Options
	// BMCUserAgent names this replica in every Redfish request (set by the manager).
	BMCUserAgent string
	// BMCMaxConcurrentRequests caps in-flight requests per BMC.
	BMCMaxConcurrentRequests int
	// BMCResync is the steady-state look at a reachable BMC.
	BMCResync time.Duration
	// RegistryBindAddress is where the discovery registry listens; "0" turns it off (another
	// replica or process serves it).
	RegistryBindAddress string
	// RegistryURL is the registry's URL as the servers reach it, written into the discovery
	// ignition. Empty leaves the ignition out of the round's Secret.
	RegistryURL string
	// MetadataIPIdentification lets the metadata service answer a request without a token for
	// the Server whose discovery-reported addresses hold its source address (metal-operator's
	// way, for clients that cannot send the claim's token). Off by default: a re-leased address
	// gets another machine's user data.
	MetadataIPIdentification bool
	// ProbeImage is the container image with metalprobe, started by the discovery ignition.
	ProbeImage string
	// IgnitionTemplateFile overrides the built-in discovery ignition template.
	IgnitionTemplateFile string
	// Pool, if set, is used instead of a new pool.
	Pool *bmc.Pool
	// Claims configure the claim controller (package claim).
	Claims claim.Options
	// Events, if set, records the family's events; Setup otherwise starts a provider of its own.
	Events *eventsink.Provider
	// HardwareEventsURL is where BMCs deliver Redfish events (the manager's event receiver as the
	// BMCs reach it); set, every BMC with an EventService gets a subscription to it.
	HardwareEventsURL string
	// TelemetryInterval is how often every server's Redfish telemetry (power, temperatures, fans,
	// PSU and component health) is read into Prometheus gauges (package telemetry); 0 is off.
	TelemetryInterval time.Duration
	// TelemetryMaxSensorsPerServer caps one server's sensor series (0: the package's default).
	TelemetryMaxSensorsPerServer int
	// Telemetry, if set, is where the collector keeps its readings, so that another part of
	// this process (the dashboard under metalhub dev) can show them; Setup otherwise makes its
	// own. Unused while TelemetryInterval is 0.
	Telemetry *telemetry.Metrics
	// TelemetryYield, when set and true, holds the collector's reads back (telemetry.Collector
	// Yield): lifecycle work goes first (the manager sets apilimit's Slots.Busy: claims binding,
	// the controllers' writes queueing).
	TelemetryYield func() bool
}

// PoolOptions are the BMC pool's options these give (bmcaccess.NewPool).
func (o Options) PoolOptions() bmc.Options {
	return bmc.Options{MaxConcurrentRequests: o.BMCMaxConcurrentRequests, RequestTimeout: o.BMCRequestTimeout, UserAgent: o.BMCUserAgent}
}

// DefaultOptions are the settings for a real fleet.
func DefaultOptions() Options {
	return Options{
		Options:                  server.DefaultOptions(),
		BMCMaxConcurrentRequests: bmc.DefaultMaxConcurrentRequests,
		BMCResync:                15 * time.Minute,
		RegistryBindAddress:      ":8082",
		ProbeImage:               "metalprobe:latest",
		Claims:                   claim.DefaultOptions(),
	}
}

// BindFlags registers the family's flags.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.BMCRequestTimeout, "bmc-request-timeout", o.BMCRequestTimeout, "Timeout of every Redfish request, from the moment it has one of the BMC's request slots (--bmc-max-concurrent-requests) until its answer.")
	fs.DurationVar(&o.BMCPassTimeout, "bmc-pass-timeout", o.BMCPassTimeout, "Timeout of one pass's Redfish requests together (a server's, a BMC's, a BMCUser's, a BMC certificate's), the waits for the BMC's request slots included: a pass makes several requests in turn, and the systems of a chassis manager share its slots. At least --bmc-request-timeout.")
	fs.DurationVar(&o.BMCResetSettle, "bmc-reset-settle", o.BMCResetSettle, "How long after a reset of unknown outcome (a timeout, a 5xx answer, a crash) an unchanged LastResetTime (the BMC's Manager, or a server's ComputerSystem for its forced restarts) means it never arrived, so it is issued again.")
	fs.IntVar(&o.BMCMaxConcurrentRequests, "bmc-max-concurrent-requests", o.BMCMaxConcurrentRequests, "Cap on in-flight Redfish requests per BMC.")
	fs.IntVar(&o.Concurrency, "metal-concurrency", o.Concurrency, "Parallel reconciles per metal controller.")
	fs.DurationVar(&o.ServerResync, "server-resync", o.ServerResync, "Steady-state observation interval of a server (one Redfish request).")
	fs.DurationVar(&o.BMCResync, "bmc-resync", o.BMCResync, "Steady-state observation interval of a BMC.")
	fs.DurationVar(&o.PowerPoll, "power-poll", o.PowerPoll, "Observation interval while a power change is in flight.")
	fs.DurationVar(&o.PowerTimeout, "power-timeout", o.PowerTimeout, "How long a power change may take before it is issued again.")
	fs.DurationVar(&o.RetryAfter, "retry-after", o.RetryAfter, "Look again after a failed pass or while waiting on something unwatched (a BMC, a boot provider).")
	fs.StringVar(&o.DiscoveryNamespace, "discovery-namespace", o.DiscoveryNamespace, "Namespace of discovery boot configurations and their Secrets.")
	fs.StringVar(&o.DiscoveryImage, "discovery-image", o.DiscoveryImage, "OS image servers boot for discovery.")
	fs.StringVar((*string)(&o.DiscoveryBootMethod), "discovery-boot-method", string(o.DiscoveryBootMethod), "How servers boot the discovery image: PXE, HTTP (UEFI HTTP boot) or VirtualMedia (the ISO at --discovery-boot-uri in the BMC's virtual CD; for sites without DHCP).")
	fs.StringVar(&o.DiscoveryBootURI, "discovery-boot-uri", o.DiscoveryBootURI, "Image the BMC boots for discovery with --discovery-boot-method HTTP (optional: else what DHCP offers) or VirtualMedia (required: the ISO).")
	fs.DurationVar(&o.DiscoveryTimeout, "discovery-timeout", o.DiscoveryTimeout, "Time after which a server without a discovery report goes back to Initial.")
	fs.Var(cleaning.Flag(&o.CleaningPolicy), "cleaning-policy", "What is erased of a server's disks when its claim is released, before it is Available again: None, Metadata (partition tables and signatures of every disk), RootDisk (sanitize the root disk, wipe the others' metadata) or AllDisks (sanitize every disk). A server's spec.cleaningPolicy overrides it; a claim's may narrow it.")
	fs.BoolVar(&o.CleanDiscovered, "cleaning-on-discovery", o.CleanDiscovered, "Clean a discovered server that metalhub never cleaned (by --cleaning-policy or its own) before it is first Available.")
	fs.BoolVar(&o.CleaningBMCErase, "cleaning-bmc-erase", o.CleaningBMCErase, "Erase an AllDisks cleaning through the BMC (Drive.SecureErase, Volume.Initialize) where it offers that for every drive, instead of booting the cleaning agent; the proof is then the BMC's task outcome, with no block read back.")
	fs.DurationVar(&o.CleaningTimeout, "cleaning-timeout", o.CleaningTimeout, "Time from a cleaning round's boot to its report after which the server is put in Error.")
	fs.IntVar(&o.ErrorThreshold, "server-error-threshold", o.ErrorThreshold, "Consecutive BMC failures after which a server is put in Error.")
	fs.BoolVar(&o.ExternalBootProvider, "external-boot-provider", o.ExternalBootProvider,
		"Another boot provider (the IronCore boot-operator) reports ServerBootConfigurations; the built-in one stays out.")
	o.Claims.BindFlags(fs)
	fs.StringVar(&o.RegistryBindAddress, "registry-bind-address", o.RegistryBindAddress, "Address the discovery registry listens on; \"0\" turns it off.")
	fs.StringVar(&o.RegistryURL, "registry-url", o.RegistryURL, "URL of the discovery registry as servers reach it (written into the discovery ignition).")
	fs.BoolVar(&o.MetadataIPIdentification, "metadata-ip-identification", o.MetadataIPIdentification, "Metadata service: also answer a request without the claim's token for the server whose discovery-reported addresses hold its source address (metal-operator's way). Those addresses are never refreshed: a re-leased address gets another machine's user data.")
	fs.StringVar(&o.ProbeImage, "probe-image", o.ProbeImage, "Container image with metalprobe that the discovery ignition starts.")
	fs.StringVar(&o.IgnitionTemplateFile, "discovery-ignition-template", o.IgnitionTemplateFile, "File with a Go template overriding the built-in discovery ignition.")
	fs.DurationVar(&o.HardwareLogPoll, "hardware-log-poll-interval", o.HardwareLogPoll, "How often each server's hardware log (SEL) is read for critical events; 0 turns it off. An event from the BMC (--hardware-events-url) brings a read at once.")
	fs.DurationVar(&o.TelemetryInterval, "telemetry-interval", o.TelemetryInterval, "How often each server's Redfish telemetry (power draw, temperatures, fans, PSU, memory and processor health) is read and exported as metalhub_server_* gauges; 0 (the default) turns it off. Reads go through the BMC pool's per-BMC cap and skip a BMC that is busy or failing fast.")
	fs.IntVar(&o.TelemetryMaxSensorsPerServer, "telemetry-max-sensors-per-server", telemetry.DefaultMaxSensorsPerServer, "Cap on one server's sensor series (power supplies first, then fans, then temperatures); the rest is counted in metalhub_telemetry_sensors_dropped_total.")
	fs.Var(&o.HardwareFaultPolicy, "hardware-fault-policy", "What a critical hardware event does beyond the HardwareFault condition, event and metric: None, Taint (new claims avoid the server) or TaintAndMaintenance (and a ServerMaintenance for a server no claim holds).")
	fs.StringVar(&o.HardwareFaultMaintenanceNamespace, "hardware-fault-maintenance-namespace", o.HardwareFaultMaintenanceNamespace, "Namespace of the ServerMaintenances the fault policy opens (default: --discovery-namespace).")
	fs.StringVar(&o.HardwareEventsURL, "hardware-events-url", o.HardwareEventsURL, "URL of the manager's Redfish event receiver (/v1/events on the registry's listener) as BMCs reach it; set, BMCs with an EventService are subscribed to it. Empty: the log is only polled.")
}

// validateDiscoveryBoot checks the discovery boot flags as the API checks a boot configuration.
func (o *Options) validateDiscoveryBoot() error {
	switch o.DiscoveryBootMethod {
	case "", metalv1alpha1.BootMethodPXE, metalv1alpha1.BootMethodHTTP:
	case metalv1alpha1.BootMethodVirtualMedia:
		if o.DiscoveryBootURI == "" {
			return fmt.Errorf("--discovery-boot-method VirtualMedia needs --discovery-boot-uri: the ISO the BMC mounts")
		}
	default:
		return fmt.Errorf("--discovery-boot-method %q: want PXE, HTTP or VirtualMedia", o.DiscoveryBootMethod)
	}
	return nil
}

// validateTimeouts checks that a pass can wait for at least one request's answer.
func (o *Options) validateTimeouts() error {
	if o.BMCPassTimeout > 0 && o.BMCPassTimeout < o.BMCRequestTimeout {
		return fmt.Errorf("--bmc-pass-timeout %s is shorter than --bmc-request-timeout %s: a pass could not wait for one request's answer", o.BMCPassTimeout, o.BMCRequestTimeout)
	}
	return nil
}

// ignition builds the discovery ignition renderer; the template is checked now so a bad one
// fails at start-up, not at the first discovery.
func (o *Options) ignition() error {
	if o.Ignition != nil || o.RegistryURL == "" {
		return nil
	}
	tmpl := ""
	if o.IgnitionTemplateFile != "" {
		b, err := os.ReadFile(o.IgnitionTemplateFile)
		if err != nil {
			return fmt.Errorf("reading discovery ignition template: %w", err)
		}
		tmpl = string(b)
	}
	t, err := discovery.ParseIgnitionTemplate(tmpl)
	if err != nil {
		return err
	}
	if o.CleaningPolicy != "" && o.CleaningPolicy != metalv1alpha1.CleaningPolicyNone && !discovery.Cleans(t) {
		return fmt.Errorf("--discovery-ignition-template does not start metalprobe with --clean={{ .CleaningPolicy }}, and --cleaning-policy is %s: cleaning rounds would never clean", o.CleaningPolicy)
	}
	url, image := o.RegistryURL, o.ProbeImage
	o.Ignition = func(s *metalv1alpha1.Server, token string, cleaning metalv1alpha1.CleaningPolicy) ([]byte, error) {
		return discovery.RenderIgnition(discovery.Params{RegistryURL: url, ServerUUID: s.Spec.SystemUUID, Token: token, ProbeImage: image,
			CleaningPolicy: string(cleaning)}, tmpl)
	}
	return nil
}

// Setup registers the family's indexes and reconcilers with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if err := index.Setup(ctx, mgr); err != nil {
		return err
	}
	if err := o.ignition(); err != nil {
		return err
	}
	if err := o.validateDiscoveryBoot(); err != nil {
		return err
	}
	if err := o.validateTimeouts(); err != nil {
		return err
	}
	if o.HardwareEvents == nil {
		o.HardwareEvents = health.NewEventReceiver(mgr.GetClient(), ctrl.Log.WithName("bmc-events"))
	}
	if o.RegistryBindAddress != "0" && o.RegistryBindAddress != "" {
		if _, err := registry.Setup(ctx, mgr, registry.Options{BindAddress: o.RegistryBindAddress, DiscoveryNamespace: o.DiscoveryNamespace,
			Metadata: metadata.Handler(mgr.GetClient(), mgr.GetAPIReader(), ctrl.Log.WithName("metadata"),
				metadata.Options{IPIdentification: o.MetadataIPIdentification}),
			Events: o.HardwareEvents}); err != nil {
			return fmt.Errorf("discovery registry: %w", err)
		}
	}
	if o.Events == nil {
		ev, err := eventsink.New(mgr, eventsink.Options{})
		if err != nil {
			return err
		}
		o.Events = ev
	}
	pool := o.Pool
	if pool == nil {
		var err error
		if pool, err = bmcaccess.NewPool(mgr, o.PoolOptions()); err != nil {
			return err
		}
	}
	if err := (&bmccontroller.Reconciler{
		Client: mgr.GetClient(), Pool: pool, Recorder: o.Events.Recorder("bmc-controller"),
		Resync: o.BMCResync, RetryAfter: o.RetryAfter, RequestTimeout: o.BMCRequestTimeout, PassTimeout: o.PassTimeout(),
		ResetSettle: o.BMCResetSettle, EventsURL: o.HardwareEventsURL, Shards: o.Shards,
	}).SetupWithManager(mgr, o.Concurrency); err != nil {
		return fmt.Errorf("bmc controller: %w", err)
	}
	if err := (&bmcuser.Reconciler{
		Client: mgr.GetClient(), Pool: pool, Recorder: o.Events.Recorder("bmcuser-controller"),
		RetryAfter: o.RetryAfter, RequestTimeout: o.BMCRequestTimeout, PassTimeout: o.PassTimeout(), Shards: o.Shards,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("bmcuser controller: %w", err)
	}
	if err := (&bmccert.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Pool: pool, Recorder: o.Events.Recorder("bmccertificate-controller"),
		RetryAfter: o.RetryAfter, Resync: o.BMCResync, RequestTimeout: o.BMCRequestTimeout, PassTimeout: o.PassTimeout(), Shards: o.Shards,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("bmc certificate controller: %w", err)
	}
	if err := (&server.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Pool: pool, Recorder: o.Events.Recorder("server-controller"), Options: o.Options,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("server controller: %w", err)
	}
	if err := setupTelemetry(mgr, o, pool); err != nil {
		return err
	}
	if err := index.SetupWiring(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := (&wiring.Reconciler{
		Client: mgr.GetClient(), Recorder: o.Events.Recorder("serverwiring-controller"), Concurrency: o.Concurrency, Shards: o.Shards,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("serverwiring controller: %w", err)
	}
	return setupClaims(ctx, mgr, o)
}

// setupTelemetry starts the telemetry collector (--telemetry-interval > 0) and registers its
// gauges on controller-runtime's metrics registry.
func setupTelemetry(mgr ctrl.Manager, o Options, pool *bmc.Pool) error {
	if o.TelemetryInterval <= 0 {
		return nil
	}
	m := o.Telemetry
	if m == nil {
		m = telemetry.NewMetrics(o.TelemetryMaxSensorsPerServer)
	}
	if err := ctrlmetrics.Registry.Register(m); err != nil {
		// A process that sets the family up again (the benchmarks: a manager per run) shows
		// the newest collector's readings, not the stopped one's.
		var dup prometheus.AlreadyRegisteredError
		if !errors.As(err, &dup) {
			return fmt.Errorf("telemetry metrics: %w", err)
		}
		ctrlmetrics.Registry.Unregister(dup.ExistingCollector)
		if err := ctrlmetrics.Registry.Register(m); err != nil {
			return fmt.Errorf("telemetry metrics: %w", err)
		}
	}
	if err := mgr.Add(&telemetry.Collector{
		Client: mgr.GetClient(), Pool: pool, Metrics: m, Interval: o.TelemetryInterval,
		ReadTimeout: 3 * o.BMCRequestTimeout, Shards: o.Shards, Log: ctrl.Log.WithName("telemetry"), Yield: o.TelemetryYield,
	}); err != nil {
		return fmt.Errorf("telemetry collector: %w", err)
	}
	return nil
}

// Package manager assembles the metalhub operator: one controller-runtime manager running the
// controller families selected by flag, with health, readiness and metrics endpoints and optional
// leader election. `metalhub` and `metalhub dev` both run it.
//
// It holds no reconciler: each family's Setup (internal/controller/metal, firmware, delivery)
// wires its own controllers. No controller package imports it.
package manager

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/metalhub/metalhub/internal/apilimit"
	"github.com/metalhub/metalhub/internal/controller/delivery"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/firmware"
	"github.com/metalhub/metalhub/internal/controller/metal"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/eventsink"
	"github.com/metalhub/metalhub/internal/metrics"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/webhook"
)

// The manager itself needs events for reporting (on objects in any namespace); each reconciler
// declares its own rights beside its code. The leader-election Lease lives in the operator's own
// namespace, so its right is a namespaced Role (config/rbac/leader_election_role.yaml), not a
// marker here: a cluster-wide right to leases would let the operator take over any Lease.
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Controller family names accepted by --controllers.
const (
	FamilyMetal    = "metal"
	FamilyDelivery = "delivery"
)

// Options configure the manager. BindFlags documents each one.
type Options struct {
	MetricsAddr string
	HealthAddr  string
	// PprofAddr serves net/http/pprof for profiling a running manager; off by default.
	PprofAddr string
	// Namespace is the operator's own namespace: delivery reads its Secrets there by default and
	// applies nothing there. Empty: POD_NAMESPACE, else the pod's namespace in a cluster (none
	// outside a cluster: Secrets from default).
	Namespace               string
	LeaderElect             bool
	LeaderElectionNamespace string
	LeaderElectionID        string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election: a killed leader's lease
	// is taken over at most LeaseDuration + 2 jittered RetryPeriods (up to 2.2x each) later: the
	// standby measures expiry from when it last saw a renewal, which it polls.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Shards, above 0, splits the metal fleet between the replicas instead of electing one
	// leader (internal/shard): ShardLeaseName-<i> Leases in ShardNamespace (default: the
	// leader election namespace, else the operator's), timed by the three durations above.
	Shards           int
	ShardLeaseName   string
	ShardNamespace   string
	Controllers      Families
	GracefulShutdown time.Duration
	// KubeAPIQPS and KubeAPIBurst bound the manager's requests to the API server. The client
	// default (20/30) throttles a fleet of a thousand servers to minutes; at 100/200, 500
	// claims took 8.9 s to bind and 21 s to power on, at 300/600 3.5 s and 11 s. What keeps
	// a burst from swamping the API server is the bound on writes in flight.
	KubeAPIQPS   float64
	KubeAPIBurst int
	// KubeAPIWritesInFlight bounds the manager's writes in flight (see internal/apilimit).
	KubeAPIWritesInFlight int
	// Events bound the event writes of both families (see internal/eventsink).
	Events eventsink.Options

	Metal    metal.Options
	Firmware firmware.Options
	Delivery delivery.Options
	// Webhook configures the validating admission webhooks (off unless enabled).
	Webhook webhook.Options

	// Listeners, if set, were bound by Listen; otherwise New binds the endpoints itself.
	Listeners *Listeners
	// AddressFile, if set, receives the addresses the manager listens on (JSON, Addresses)
	// once they are bound, so that a caller that asked for port 0 learns the ports.
	AddressFile string

	// ManyPerProcess lets tests build several managers with the same controllers in one
	// process (controller-runtime refuses a controller name twice). No flag sets it.
	ManyPerProcess bool
}

// Families is the set of controller families to run; it implements flag.Value.
type Families []string

func (f *Families) String() string { return strings.Join(*f, ",") }

// Set parses a comma-separated list of families; "both" and "all" mean every family.
func (f *Families) Set(v string) error {
	var out []string
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		switch name {
		case FamilyMetal, FamilyDelivery:
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		case "both", "all":
			out = []string{FamilyMetal, FamilyDelivery}
		case "":
		default:
			return fmt.Errorf("unknown controller family %q (want metal, delivery or both)", name)
		}
	}
	if len(out) == 0 {
		return errors.New("no controller family selected (want metal, delivery or both)")
	}
	sort.Strings(out)
	*f = out
	return nil
}

// Has reports whether family is selected.
func (f Families) Has(family string) bool { return slices.Contains(f, family) }

// DefaultOptions runs both families with probes on :8081 and metrics on :8080.
func DefaultOptions() Options {
	return Options{
		MetricsAddr:           ":8080",
		HealthAddr:            ":8081",
		LeaderElectionID:      "metalhub.metal.ironcore.dev",
		ShardLeaseName:        "metalhub-shard",
		LeaseDuration:         15 * time.Second,
		RenewDeadline:         10 * time.Second,
		RetryPeriod:           2 * time.Second,
		Controllers:           Families{FamilyDelivery, FamilyMetal},
		GracefulShutdown:      30 * time.Second,
		KubeAPIQPS:            300,
		KubeAPIBurst:          600,
		KubeAPIWritesInFlight: apilimit.DefaultWritesInFlight,
		Events:                eventsink.Options{InFlight: eventsink.DefaultInFlight, Backlog: eventsink.DefaultBacklog},
		Metal:                 metal.DefaultOptions(),
		Firmware:              firmware.DefaultOptions(),
		Webhook:               webhook.DefaultOptions(),
	}
}

// BindFlags registers the manager's flags on fs, with o's values as defaults.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, "Address the Prometheus metrics endpoint binds to; \"0\" disables it.")
	fs.StringVar(&o.HealthAddr, "health-probe-bind-address", o.HealthAddr, "Address the /healthz and /readyz endpoints bind to.")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", "", "Address a net/http/pprof endpoint binds to, for profiling; empty disables it.")
	fs.StringVar(&o.AddressFile, "address-file", o.AddressFile, "Write the addresses the manager listens on (metrics, health, pprof, registry, webhook) as JSON to this file once bound: with port 0 in a bind address, the port the system picked.")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "The operator's own namespace: delivery reads its Secrets there by default and never applies an artifact there; empty: the POD_NAMESPACE environment variable, else the pod's namespace in a cluster (outside a cluster: none, Secrets from default).")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader so that only one of several replicas reconciles.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "Namespace of the leader election Lease; defaults to the pod's namespace in a cluster.")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "Name of the leader election Lease.")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", o.LeaseDuration, "How long a lease lasts without renewal; a killed leader is replaced within this plus about two retry periods.")
	fs.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", o.RenewDeadline, "How long the leader keeps trying to renew before it gives up leadership.")
	fs.DurationVar(&o.RetryPeriod, "leader-election-retry-period", o.RetryPeriod, "How often candidates try to acquire or renew the lease.")
	fs.IntVar(&o.Shards, "shards", o.Shards, "Split the metal fleet into this many shards held by the replicas through Leases (each replica acts on the BMCs of its shards; a dead replica's shards move to the others within the lease duration plus about a retry period); 0: no sharding. Several shards per replica spread a fleet more evenly. Not with --leader-elect; metal controllers only.")
	fs.StringVar(&o.ShardLeaseName, "shard-lease-name", o.ShardLeaseName, "Prefix of the shard Leases (<name>-<i>, <name>-member-<id>).")
	fs.StringVar(&o.ShardNamespace, "shard-namespace", o.ShardNamespace, "Namespace of the shard Leases; default --leader-election-namespace, else the operator's namespace.")
	fs.Var(&o.Controllers, "controllers", "Controller families to run: metal, delivery, or both (comma-separated).")
	fs.DurationVar(&o.GracefulShutdown, "graceful-shutdown-timeout", o.GracefulShutdown, "How long running reconciles may take to finish on shutdown.")
	fs.Float64Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Sustained requests per second to the API server.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of requests to the API server.")
	fs.IntVar(&o.KubeAPIWritesInFlight, "kube-api-writes-in-flight", o.KubeAPIWritesInFlight, "Writes the manager has in flight at the API server at most (0: no bound); more only queue inside the API server and slow its watches.")
	fs.IntVar(&o.Events.InFlight, "event-writes-in-flight", o.Events.InFlight, "Event writes sent to the API server at once; the others wait, so a burst of events cannot flood it.")
	fs.IntVar(&o.Events.Backlog, "event-backlog", o.Events.Backlog, "Events that may wait for a write; more are dropped (metalhub_events_dropped_total).")
	o.Delivery.BindFlags(fs)
	o.Metal.BindFlags(fs)
	o.Firmware.BindFlags(fs)
	o.Webhook.BindFlags(fs)
}

// New builds a manager on cfg with the selected families registered. It serves on
// o.Listeners (bound now when nil), which it closes if it fails.
func New(cfg *rest.Config, o Options, log logr.Logger) (ctrl.Manager, error) {
	l := o.Listeners
	if l == nil {
		var err error
		if l, err = Listen(o); err != nil {
			return nil, err
		}
	}
	mgr, err := newManager(cfg, o, l, log)
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	if o.AddressFile != "" {
		if err := WriteAddressFile(o.AddressFile, l.Addresses()); err != nil {
			_ = l.Close()
			return nil, err
		}
	}
	return mgr, nil
}

func newManager(cfg *rest.Config, o Options, l *Listeners, log logr.Logger) (ctrl.Manager, error) {
	if err := o.validateShards(); err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	if o.KubeAPIQPS > 0 {
		cfg.QPS, cfg.Burst = float32(o.KubeAPIQPS), max(o.KubeAPIBurst, int(o.KubeAPIQPS))
	}
	// One bound on the writes in flight of every controller (events have their own).
	slots := apilimit.NewSlots(o.KubeAPIWritesInFlight)
	var webhookServer ctrlwebhook.Server
	if o.Webhook.Enabled {
		srv, _, err := webhook.NewServer(o.Webhook, log.WithName("webhook"))
		if err != nil {
			return nil, err
		}
		if webhookServer, err = webhook.NewListenerServer(srv, l.webhook); err != nil {
			return nil, err
		}
	}
	crm, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme.New(),
		Logger: log,
		// Metrics, probes and pprof serve on l (below), not on listeners of controller-runtime's
		// own, which would not say what port 0 became.
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		LeaderElection:          o.LeaderElect,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		LeaderElectionID:        o.LeaderElectionID,
		LeaseDuration:           &o.LeaseDuration,
		RenewDeadline:           &o.RenewDeadline,
		RetryPeriod:             &o.RetryPeriod,
		// Releasing the lease on a clean stop lets a standby take over at once instead of
		// waiting out the lease.
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &o.GracefulShutdown,
		// Every replica serves the webhooks; admission needs no leadership.
		WebhookServer: webhookServer,
		// No controller reads managedFields, and on a fleet's Servers they are a good part of
		// each cached object. Writes without them leave the stored ones alone.
		// VidraResources are cached without their manifests (up to 1 MiB each): a pass reads
		// the manifest when it applies it.
		Cache:      cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: manifests.CacheByObject()},
		NewClient:  apilimit.NewClient(slots),
		Controller: config.Controller{SkipNameValidation: &o.ManyPerProcess},
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	mgr := &boundManager{Manager: crm, probes: &probes{}, registry: l.registry}
	for _, srv := range []struct {
		name    string
		ln      net.Listener
		handler func() http.Handler
	}{{"metrics", l.metrics, metricsHandler}, {"health probe", l.health, mgr.probes.handler}, {"pprof", l.pprof, pprofHandler}} {
		if srv.ln == nil {
			continue // off
		}
		if err := mgr.Add(httpServer(srv.name, srv.ln, srv.handler())); err != nil {
			return nil, fmt.Errorf("adding the %s server: %w", srv.name, err)
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding health check: %w", err)
	}
	// Ready once the informer caches the controllers read from have synced: before that a
	// replica would act on an empty view of the cluster.
	if err := mgr.AddReadyzCheck("informers", func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("informer caches not synced")
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("adding readiness check: %w", err)
	}
	o.Delivery.OperatorNamespace = operatorNamespace(o.Namespace)
	o.Delivery.Receiver.Listener = l.receiver
	o.Firmware.OperatorNamespace = o.Delivery.OperatorNamespace
	if o.Webhook.Enabled {
		// All validators, whatever the families: the webhook configuration names them all.
		// The webhook admits the admitted-* annotations only from writers who may read the
		// Secret they name: with it, the controllers may honour them.
		o.Delivery.TrustAdmittedCredentials = true
		// And act as the ServiceAccounts writers name, once the configuration sends both kinds here.
		o.Delivery.AdmissionWebhook = true
		o.Webhook.Delivery = o.Delivery
		if err := webhook.Setup(mgr, o.Webhook); err != nil {
			return nil, fmt.Errorf("setting up webhooks: %w", err)
		}
		// Not ready (no traffic from the webhook Service) until the server answers.
		if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
			return nil, fmt.Errorf("adding webhook readiness check: %w", err)
		}
	}
	// One event sink for both families: its bound on writes in flight is the process's.
	evOpts := o.Events
	evOpts.Yield = slots.Urgent
	events, err := eventsink.New(mgr, evOpts)
	if err != nil {
		return nil, err
	}
	o.Metal.Events, o.Delivery.Events = events, events
	// Telemetry's reads wait while claims bind or the controllers' writes queue up.
	o.Metal.TelemetryYield = slots.Busy
	if o.Shards > 0 {
		set, err := newShardSet(cfg, mgr, o, log.WithName("shards"))
		if err != nil {
			return nil, err
		}
		o.Metal.Shards, o.Firmware.Shards = set, set
		o.Metal.BMCUserAgent = userAgent(set.Identity())
	} else {
		host, _ := os.Hostname()
		o.Metal.BMCUserAgent = userAgent(host)
	}
	if o.Controllers.Has(FamilyMetal) {
		if o.Metal.Pool == nil {
			// One pool for the metal family and the firmware controllers: one session per BMC.
			if o.Metal.Pool, err = bmcaccess.NewPool(mgr, o.Metal.PoolOptions()); err != nil {
				return nil, err
			}
		}
		if err := metal.Setup(context.Background(), mgr, o.Metal); err != nil {
			return nil, fmt.Errorf("setting up metal controllers: %w", err)
		}
		o.Firmware.Pool, o.Firmware.Events = o.Metal.Pool, events
		o.Firmware.RequestTimeout, o.Firmware.RetryAfter = o.Metal.BMCRequestTimeout, o.Metal.RetryAfter
		if err := firmware.Setup(context.Background(), mgr, o.Firmware); err != nil {
			return nil, fmt.Errorf("setting up firmware controllers: %w", err)
		}
		if mgr.registry != nil {
			return nil, fmt.Errorf("the metal controllers added no discovery registry to serve on %s", mgr.registry.Addr())
		}
	}
	if o.Controllers.Has(FamilyDelivery) {
		if err := delivery.Setup(mgr, o.Delivery); err != nil {
			return nil, fmt.Errorf("setting up delivery controllers: %w", err)
		}
	}
	// State gauges (servers, claims, syncs, resources) on /metrics, from the leader's cache.
	var reporter func() bool
	if set := o.Metal.Shards; set != nil {
		reporter = func() bool { return set.Owns(0) }
	}
	metrics.Register(metrics.Source{Reader: mgr.GetCache(), Elected: mgr.Elected(), Reporter: reporter,
		Metal: o.Controllers.Has(FamilyMetal), Delivery: o.Controllers.Has(FamilyDelivery), Logger: log.WithName("metrics")})
	log.Info("manager configured", "controllers", o.Controllers.String(), "leaderElection", o.LeaderElect, "shards", o.Shards, "webhooks", o.Webhook.Enabled)
	return mgr, nil
}

// Run builds the manager and runs it until ctx is cancelled.
func Run(ctx context.Context, cfg *rest.Config, o Options, log logr.Logger) error {
	mgr, err := New(cfg, o, log)
	if err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}

// serviceAccountNamespace is where a pod finds its own namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// operatorNamespace resolves the operator's namespace: the flag, POD_NAMESPACE (the downward
// API), the pod's service account namespace; "" for a manager run outside a cluster.
func operatorNamespace(flag string) string {
	if flag != "" {
		return flag
	}
	if ns := strings.TrimSpace(os.Getenv("POD_NAMESPACE")); ns != "" {
		return ns
	}
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
}

// userAgent is what every Redfish request says it comes from: the replica, so that a BMC's
// audit log tells which one acted.
func userAgent(replica string) string {
	if replica == "" {
		return "metalhub"
	}
	return "metalhub (" + replica + ")"
}

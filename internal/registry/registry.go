// Package registry is the discovery intake: an HTTP endpoint, run by the manager, where the
// metalprobe agent on a server in Discovery posts its hardware report. The registry checks the
// report's bearer token against the server's current discovery round, writes the hardware into the
// Server's status (and its inventory record) and then marks the round reported
// (discovery.ReportedAnnotation), which is what the Server controller waits for.
//
// It never moves a Server's lifecycle state and never talks to a BMC: it records what the agent
// reported, and the Server controller acts on it. It imports no controller package.
//
// Wiring: SetupIndexes(ctx, mgr.GetFieldIndexer()) once per manager (the metal controllers
// use the same index), then Setup(mgr, opts), or New + mgr.Add.
// The registry finds a Server by UUID through the cached client's ServerUUIDIndex; without the
// index every post fails with 503.
package registry

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/probe"
)

// The registry reads Servers (cached) and round Secrets (uncached, only in the discovery
// namespace in practice), patches Servers' status and annotations, and keeps each Server's
// inventory record (a ConfigMap in the discovery namespace, read uncached).
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servers,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servers/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// The configmaps verbs for the inventory records are granted with the server controller's
// (internal/controller/metal), which the manager's role is generated from.

// Options configure the registry.
type Options struct {
	// BindAddress is where the registry listens (default ":8082"); servers in Discovery must
	// reach it. "127.0.0.1:0" picks a free port (see Registry.Addr).
	BindAddress string
	// DiscoveryNamespace holds the rounds' Secrets (required).
	DiscoveryNamespace string
	// MaxBodyBytes bounds a report (default 1 MiB; a big server's report is ~100 KiB).
	MaxBodyBytes int64
	// MaxConcurrent bounds the reports handled at once (default 32), so a whole fleet booting
	// together queues here instead of hammering the API server.
	MaxConcurrent int
	// RequestTimeout bounds the API calls for one report (default 30s).
	RequestTimeout time.Duration
	// APIReader reads what must not come from a possibly stale cache: round Secrets and
	// Servers after a conflict. Defaults to the client given to New; Setup uses the manager's.
	APIReader client.Reader
	// Logger defaults to ctrl.Log.WithName("discovery-registry").
	Logger logr.Logger
	// Metadata, when set, is served beside the reports (GET /metadata and GET /user-data): the
	// booted OS reaches the same listener as the discovery probe.
	Metadata http.Handler
	// Events, when set, is served at /v1/events (POST): the Redfish events BMCs deliver to their
	// subscriptions reach the same listener as the probes.
	Events http.Handler
	// Recorder receives the Warning events of refused reports that name a Server (nil: logs
	// only). Setup defaults it to the manager's recorder.
	Recorder events.EventRecorder
	// RoundWait bounds how long a report waits for its server's round to show in the cache
	// before it is refused (default 10s, below a probe's request timeout; negative: no wait).
	// It waits only with WatchRounds, which Setup calls.
	RoundWait time.Duration
}

// ReasonReportFromWrongMachine is the reason of the Warning event on a Server whose discovery
// report came from a machine with another DMI system UUID.
const ReasonReportFromWrongMachine = "ReportFromWrongMachine"

func (o Options) withDefaults() Options {
	if o.BindAddress == "" {
		o.BindAddress = ":8082"
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = 32
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 30 * time.Second
	}
	if o.RoundWait == 0 {
		o.RoundWait = 10 * time.Second
	}
	if o.Logger.GetSink() == nil {
		o.Logger = ctrl.Log.WithName("discovery-registry")
	}
	return o
}

// Registry is the discovery intake. It is a manager.Runnable that serves HTTP until its
// context ends. It runs on every replica (it needs no leader): each write carries an optimistic
// lock, so replicas cannot overwrite each other or a newer round.
type Registry struct {
	client client.Client
	reader client.Reader
	opts   Options
	log    logr.Logger
	sem    chan struct{}

	mu        sync.Mutex
	rounds    *roundWaits // nil: reports do not wait for their round (WatchRounds)
	addr      net.Addr
	ln        net.Listener // bound by the caller (UseListener); nil: Start binds BindAddress
	listening chan struct{}
}

var (
	_ manager.Runnable               = (*Registry)(nil)
	_ manager.LeaderElectionRunnable = (*Registry)(nil)
)

// New builds a registry on c, a client whose Server reads are served by a cache with
// ServerUUIDIndex (the manager's client after SetupIndexes).
func New(c client.Client, o Options) (*Registry, error) {
	o = o.withDefaults()
	if c == nil {
		return nil, errors.New("registry: a client is required")
	}
	if strings.TrimSpace(o.DiscoveryNamespace) == "" {
		return nil, errors.New("registry: a discovery namespace is required")
	}
	if o.APIReader == nil {
		o.APIReader = c
	}
	return &Registry{
		client:    c,
		reader:    o.APIReader,
		opts:      o,
		log:       o.Logger,
		sem:       make(chan struct{}, o.MaxConcurrent),
		listening: make(chan struct{}),
	}, nil
}

// Setup adds a registry to the manager, whose cache must have the UUID index (SetupIndexes).
func Setup(ctx context.Context, mgr manager.Manager, o Options) (*Registry, error) {
	if o.APIReader == nil {
		o.APIReader = mgr.GetAPIReader()
	}
	if o.Recorder == nil {
		o.Recorder = mgr.GetEventRecorder("discovery-registry")
	}
	r, err := New(mgr.GetClient(), o)
	if err != nil {
		return nil, err
	}
	inf, err := mgr.GetCache().GetInformer(ctx, &metalv1alpha1.Server{})
	if err != nil {
		return nil, fmt.Errorf("the discovery registry's Server informer: %w", err)
	}
	if err := r.WatchRounds(inf); err != nil {
		return nil, err
	}
	if err := mgr.Add(r); err != nil {
		return nil, fmt.Errorf("adding the discovery registry to the manager: %w", err)
	}
	return r, nil
}

// NeedLeaderElection is false: see Registry.
func (r *Registry) NeedLeaderElection() bool { return false }

// Addr is the address the registry listens on, nil before it does (see Listening).
func (r *Registry) Addr() net.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addr
}

// Listening is closed once the registry accepts connections.
func (r *Registry) Listening() <-chan struct{} { return r.listening }

// UseListener makes Start serve on ln instead of binding BindAddress: a caller that binds first
// knows the address (a port 0 picked) before the registry runs. Call it before Start.
func (r *Registry) UseListener(ln net.Listener) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ln = ln
}

// Start serves until ctx ends, then finishes the reports in flight (at most 10s).
func (r *Registry) Start(ctx context.Context) error {
	r.mu.Lock()
	ln := r.ln
	r.mu.Unlock()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", r.opts.BindAddress); err != nil {
			return fmt.Errorf("discovery registry: listening on %s: %w", r.opts.BindAddress, err)
		}
	}
	r.mu.Lock()
	r.addr = ln.Addr()
	r.mu.Unlock()
	close(r.listening)
	srv := &http.Server{
		Handler:           r.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      r.opts.RequestTimeout + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          log.New(logWriter{r.log}, "", 0),
	}
	r.log.Info("discovery registry listening", "address", ln.Addr().String(), "namespace", r.opts.DiscoveryNamespace)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("discovery registry: serving: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("discovery registry: shutting down: %w", err)
	}
	return nil
}

// Handler serves POST probe.RegisterPath, GET /healthz and, with Options.Metadata and
// Options.Events, the metadata service and the BMC event receiver.
func (r *Registry) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+probe.RegisterPath, r.serveRegister)
	mux.HandleFunc("POST "+probe.CleanPath, r.serveCleaning)
	if r.opts.Events != nil {
		mux.Handle("POST /v1/events", r.opts.Events)
	}
	if r.opts.Metadata != nil {
		mux.Handle("GET /metadata", r.opts.Metadata)
		mux.Handle("GET /user-data", r.opts.Metadata)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// logWriter sends net/http's own complaints (TLS garbage, hijack errors) to the logger.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.V(1).Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

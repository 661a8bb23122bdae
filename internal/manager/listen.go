package manager

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/metalhub/metalhub/internal/registry"
)

// Addresses are where a manager listens (host:port); empty for an endpoint that is off.
type Addresses struct {
	Metrics  string `json:"metrics,omitempty"`
	Health   string `json:"health,omitempty"`
	Pprof    string `json:"pprof,omitempty"`
	Registry string `json:"registry,omitempty"`
	Webhook  string `json:"webhook,omitempty"`
	Receiver string `json:"receiver,omitempty"`
}

// Listeners are the manager's endpoints, bound before the manager is built. A bind address with
// port 0 gets a port the system picks, and Addresses says which: tests and tools ask for port 0
// and read the port, instead of guessing a free one that something else may take first.
type Listeners struct {
	metrics, health, pprof, registry, webhook, receiver net.Listener
}

func off(addr string) bool { return addr == "" || addr == "0" }

// Listen binds every endpoint o turns on. New serves on them (give them to it in
// Options.Listeners) and owns them from then on; without New, Close releases them.
func Listen(o Options) (*Listeners, error) {
	l := &Listeners{}
	bind := func(dst *net.Listener, what, addr string) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("%s: listening on %s: %w", what, addr, err)
		}
		*dst = ln
		return nil
	}
	var errs []error
	if !off(o.MetricsAddr) {
		errs = append(errs, bind(&l.metrics, "metrics", o.MetricsAddr))
	}
	if !off(o.HealthAddr) {
		errs = append(errs, bind(&l.health, "health probes", o.HealthAddr))
	}
	if !off(o.PprofAddr) {
		errs = append(errs, bind(&l.pprof, "pprof", o.PprofAddr))
	}
	if o.Controllers.Has(FamilyMetal) && !off(o.Metal.RegistryBindAddress) {
		errs = append(errs, bind(&l.registry, "discovery registry", o.Metal.RegistryBindAddress))
	}
	if o.Controllers.Has(FamilyDelivery) && !off(o.Delivery.ReceiverBindAddress) {
		errs = append(errs, bind(&l.receiver, "Infrahub webhook receiver", o.Delivery.ReceiverBindAddress))
	}
	if o.Webhook.Enabled {
		errs = append(errs, bind(&l.webhook, "webhook server", net.JoinHostPort(o.Webhook.Host, strconv.Itoa(o.Webhook.Port))))
	}
	if err := errors.Join(errs...); err != nil {
		_ = l.Close()
		return nil, err
	}
	return l, nil
}

// Addresses reports where l listens.
func (l *Listeners) Addresses() Addresses {
	addr := func(ln net.Listener) string {
		if ln == nil {
			return ""
		}
		return ln.Addr().String()
	}
	return Addresses{Metrics: addr(l.metrics), Health: addr(l.health), Pprof: addr(l.pprof),
		Registry: addr(l.registry), Webhook: addr(l.webhook), Receiver: addr(l.receiver)}
}

// Close releases the listeners.
func (l *Listeners) Close() error {
	var errs []error
	for _, ln := range []net.Listener{l.metrics, l.health, l.pprof, l.registry, l.webhook, l.receiver} {
		if ln != nil {
			if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// WriteAddressFile writes a as JSON to path, atomically: a reader polling for the file never
// sees half of it.
func WriteAddressFile(path string, a any) error {
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding addresses: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing address file: %w", err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	if err := errors.Join(werr, tmp.Close()); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing address file %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing address file: %w", err)
	}
	return nil
}

// httpServer serves handler on ln as a manager runnable.
func httpServer(name string, ln net.Listener, handler http.Handler) *ctrlmanager.Server {
	return &ctrlmanager.Server{Name: name, Listener: ln, Server: &http.Server{
		Handler: handler, MaxHeaderBytes: 1 << 20, IdleTimeout: 90 * time.Second, ReadHeaderTimeout: 32 * time.Second,
	}}
}

func metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	return mux
}

func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// probes are the /healthz and /readyz checks, served on the health listener.
type probes struct {
	mu     sync.Mutex
	checks map[string]map[string]healthz.Checker // by endpoint
}

func (p *probes) add(endpoint, name string, check healthz.Checker) error {
	if check == nil {
		return fmt.Errorf("%s check %q is nil", endpoint, name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.checks == nil {
		p.checks = map[string]map[string]healthz.Checker{}
	}
	if p.checks[endpoint] == nil {
		p.checks[endpoint] = map[string]healthz.Checker{}
	}
	p.checks[endpoint][name] = check
	return nil
}

func (p *probes) handler() http.Handler {
	mux := http.NewServeMux()
	for _, endpoint := range []string{"healthz", "readyz"} {
		h := http.StripPrefix("/"+endpoint, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			p.mu.Lock()
			checks := maps.Clone(p.checks[endpoint])
			p.mu.Unlock()
			(&healthz.Handler{Checks: checks}).ServeHTTP(w, req)
		}))
		mux.Handle("/"+endpoint, h)
		mux.Handle("/"+endpoint+"/", h) // one check by name
	}
	return mux
}

// boundManager is the manager New returns: controller-runtime's, whose health checks go to
// the probes served on the health listener, and whose discovery registry (added by the metal
// family's Setup) serves on the registry listener.
type boundManager struct {
	ctrl.Manager
	probes   *probes
	registry net.Listener // until the registry takes it
}

func (m *boundManager) AddHealthzCheck(name string, check healthz.Checker) error {
	return m.probes.add("healthz", name, check)
}

func (m *boundManager) AddReadyzCheck(name string, check healthz.Checker) error {
	return m.probes.add("readyz", name, check)
}

func (m *boundManager) Add(r ctrlmanager.Runnable) error {
	if reg, ok := r.(*registry.Registry); ok && m.registry != nil {
		reg.UseListener(m.registry)
		m.registry = nil
	}
	return m.Manager.Add(r)
}

package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalhub/metalhub/internal/fleetops"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/telemetry/latest"
)

const (
	// batchInterval is the least time between two stream batches: a burst of changes (a
	// thousand servers discovered at once) reaches the page as a few batches, not a flood.
	batchInterval = 200 * time.Millisecond
	// maxEvents a server's details list.
	maxEvents = 20
)

// heartbeat keeps proxies and the browser from timing out an idle stream (a variable for tests).
var heartbeat = 15 * time.Second

// Server is a running dashboard.
type Server struct {
	opts     Options
	log      logr.Logger
	c        client.WithWatch
	ln       net.Listener
	hub      *hub
	watch    *watcher
	http     *http.Server
	records  *http.Client
	hosts    hostAllowlist  // Host headers accepted
	auth     *authenticator // who may press the buttons; nil: whoever reaches loopback
	url      string
	assets   map[string]asset
	runOnce  sync.Once
	runError error
}

// New connects to the cluster of cfg as its user and binds the listener, so URL is known before
// Run. Nothing is read from the cluster until Run.
func New(cfg *rest.Config, o Options, log logr.Logger) (*Server, error) {
	if o.Address == "" {
		o.Address = DefaultOptions().Address
	}
	if o.RecorderURL != "" {
		u, err := url.Parse(o.RecorderURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--recorder-url %q: want an http(s) base URL", o.RecorderURL)
		}
		o.RecorderURL = strings.TrimSuffix(o.RecorderURL, "/")
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, fmt.Errorf("creating the cluster client: %w", err)
	}
	assets, err := loadAssets()
	if err != nil {
		return nil, err
	}
	auth, err := newAuthenticator(o, c)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", o.Address)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", o.Address, err)
	}
	// The address as bound, not as written: a name may resolve to anything.
	addr := ln.Addr().(*net.TCPAddr)
	if o.AllowActions && auth == nil && !addr.IP.IsLoopback() {
		_ = ln.Close()
		return nil, fmt.Errorf("%w: --allow-actions on %s, which is not loopback, would let anyone who reaches it change servers "+
			"with your credentials: add --token-file FILE and/or --token-review, or listen on 127.0.0.1", ErrActionsNeedAuth, addr)
	}
	pageURL, hosts, err := addresses(addr, o.AllowedHosts)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	s := &Server{opts: o, log: log, c: c, ln: ln, hub: newHub(batchInterval), assets: assets,
		records: &http.Client{Timeout: 3 * time.Second}, url: pageURL, hosts: hosts, auth: auth}
	src := o.Telemetry
	if src == nil && o.PrometheusURL != "" {
		src = &latest.Prometheus{URL: o.PrometheusURL}
	}
	s.watch = newWatcher(c, s.hub, src, o.TelemetryRefresh)
	s.http = &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	return s, nil
}

// URL is where the dashboard is served: http://host:port/.
func (s *Server) URL() string { return s.url }

// Run watches the cluster and serves the page until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	ran := false
	s.runOnce.Do(func() { ran = true })
	if !ran {
		return errors.New("dashboard: Run called twice")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.http.BaseContext = func(net.Listener) context.Context { return ctx } // ends the streams with ctx
	var wg sync.WaitGroup
	wg.Go(func() { s.hub.run(ctx) })
	wg.Go(func() { s.watch.run(ctx) })
	errc := make(chan error, 1)
	go func() { errc <- s.http.Serve(s.ln) }()
	s.log.Info("dashboard serving", "url", s.url, "actions", s.opts.AllowActions,
		"tokenFile", s.auth != nil && s.auth.token != nil, "tokenReview", s.opts.TokenReview)
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		err = fmt.Errorf("serving the dashboard: %w", err)
	}
	cancel()
	shut, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	_ = s.http.Shutdown(shut)
	wg.Wait()
	return err
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.asset("index.html"))
	mux.HandleFunc("GET /app.js", s.asset("app.js"))
	mux.HandleFunc("GET /style.css", s.asset("style.css"))
	mux.HandleFunc("GET /api/snapshot", s.handleSnapshot)
	mux.HandleFunc("GET /api/stream", s.handleStream)
	mux.HandleFunc("GET /api/servers/{name}", s.handleDetails)
	mux.HandleFunc("POST /api/servers/{name}/{action}", s.handleAction)
	mux.HandleFunc("POST /api/servers/{name}/power/{verb}", s.handlePower)
	return s.guardHost(mux)
}

func (s *Server) guardHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hosts.allows(r.Host) {
			http.Error(w, "unexpected Host header: open the dashboard at "+s.url+", or name the host in --allowed-hosts", http.StatusForbidden)
			return
		}
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// No framing: the buttons cannot be clicked through another site's page.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

func (s *Server) snapshot() Snapshot {
	snap := s.hub.snapshot()
	s.decorate(&snap)
	return snap
}

func (s *Server) decorate(snap *Snapshot) {
	snap.Actions = s.opts.AllowActions
	if s.opts.AllowActions {
		snap.PowerVerbs = fleetops.PowerVerbs()
		if s.auth != nil {
			snap.Auth = s.auth.prompt()
		}
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers {"error": msg}, which the page shows as it is.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.snapshot())
}

func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	snap, sub := s.hub.subscribe()
	defer s.hub.unsubscribe(sub)
	s.decorate(&snap)
	first, err := json.Marshal(snap)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(event string, data []byte) error {
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data); err != nil {
			return err
		}
		return rc.Flush()
	}
	// retry: how soon the browser reconnects after the stream ends.
	if _, err := fmt.Fprint(w, "retry: 1000\n"); err != nil {
		return
	}
	if send("snapshot", first) != nil {
		return
	}
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case msg, ok := <-sub.ch:
			if !ok {
				return // dropped as too slow, or shutting down: the page reconnects
			}
			if send("batch", msg) != nil {
				return
			}
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// Details is GET /api/servers/{name}.
type Details struct {
	Summary    json.RawMessage `json:"summary,omitempty"`
	Server     any             `json:"server"`
	Conditions any             `json:"conditions"`
	Events     []EventItem     `json:"events"`
	// EventsAccess is the events watch's access ("ok", "forbidden", ...).
	EventsAccess string `json:"eventsAccess"`
	// Records are the BMC's recorded actions (RecorderURL set), newest first.
	Records      []json.RawMessage `json:"records,omitempty"`
	RecordsError string            `json:"recordsError,omitempty"`
}

func (s *Server) handleDetails(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	srv := s.watch.getServer(name)
	if srv == nil {
		if a := s.hub.accessOf(kindServers); a != "ok" {
			writeError(w, http.StatusForbidden, "servers: "+a)
			return
		}
		writeError(w, http.StatusNotFound, "no server "+name)
		return
	}
	d := Details{Server: srv, Conditions: srv.Status.Conditions, Events: s.watch.recentEvents(name, maxEvents),
		EventsAccess: s.hub.accessOf(kindEvents)}
	if d.Conditions == nil {
		d.Conditions = []any{}
	}
	d.Summary, _ = s.hub.get(collServers, name)
	if s.opts.RecorderURL != "" {
		recs, err := s.bmcRecords(r.Context(), srv)
		if err != nil {
			s.log.V(1).Info("reading the BMC recorder", "server", name, "error", err.Error())
			d.RecordsError = err.Error()
		}
		d.Records = recs
	}
	writeJSON(w, http.StatusOK, d)
}

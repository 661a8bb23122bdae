// Package infrahub emulates the Infrahub REST endpoints that artifact
// delivery uses (login/refresh, stored queries, artifact download) over real
// HTTP, with branches, time travel, fault injection and a request log. It
// reproduces Infrahub's quirks (404 for unknown users, sign-blind relative
// `at`, storage ids that survive content changes, 502 for GraphQL errors) so
// that clients are tested against them. Used by tests, dev mode and benchmarks.
//
// It also sends Infrahub's artifact events to registered standard webhooks (webhooks.go), signed
// as Infrahub signs them, so that a receiver is tested against real deliveries.
//
// It stands only for the remote service: it imports no Kubernetes library and no metalhub package
// but internal/infrahub/webhook, which is Infrahub's own signing, and knows nothing of the
// operator that calls it.
package infrahub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"
)

// Defaults applied by New.
const (
	DefaultUsername        = "admin"
	DefaultPassword        = "infrahub"
	DefaultQuery           = "ArtifactIDs"
	DefaultAccessTokenTTL  = time.Hour // Infrahub's default access_token_lifetime
	DefaultRefreshTokenTTL = 30 * 24 * time.Hour
	DefaultMaxLogEntries   = 10000
)

// Options configures an Emulator. The zero value gives user admin/infrahub,
// the ArtifactIDs query and Infrahub's token lifetimes.
type Options struct {
	Users           map[string]string // username -> password; nil = admin/infrahub
	APITokens       []string          // accepted X-INFRAHUB-KEY values
	AccessTokenTTL  time.Duration
	RefreshTokenTTL time.Duration
	Queries         []string // stored query names; nil = [ArtifactIDs]
	// AllowAnonymousRead lets unauthenticated GETs through, as Infrahub's
	// allow_anonymous_access does. Off by default so tests see missing auth.
	AllowAnonymousRead bool
	Now                func() time.Time // clock for tokens, history and `at`; nil = time.Now
	MaxLogEntries      int              // request log size (oldest dropped)
}

// Emulator is an http.Handler; Start also serves it on a listener.
type Emulator struct {
	now func() time.Time
	opt Options

	mu      sync.Mutex
	store   *store
	auth    *auth
	queries map[string][]string // query name -> GraphQL error messages it fails with
	faults  map[Class]*Fault
	// dropEdges is how many edges a query answer loses while its count still names them all
	// (a truncated answer, as a faulty proxy or a paginating query would give).
	dropEdges int

	log *requestLog

	hooks *webhooks // its own lock: taken under mu, never the other way round

	mux  *http.ServeMux
	done chan struct{}
	once sync.Once
	srv  *http.Server
	url  string
}

// New returns an emulator holding only the main branch and no artifacts.
func New(o Options) *Emulator {
	if o.Users == nil {
		o.Users = map[string]string{DefaultUsername: DefaultPassword}
	}
	if o.Queries == nil {
		o.Queries = []string{DefaultQuery}
	}
	if o.AccessTokenTTL <= 0 {
		o.AccessTokenTTL = DefaultAccessTokenTTL
	}
	if o.RefreshTokenTTL <= 0 {
		o.RefreshTokenTTL = DefaultRefreshTokenTTL
	}
	if o.MaxLogEntries <= 0 {
		o.MaxLogEntries = DefaultMaxLogEntries
	}
	e := &Emulator{
		now:     o.Now,
		opt:     o,
		store:   newStore(),
		auth:    newAuth(o),
		queries: map[string][]string{},
		faults:  map[Class]*Fault{},
		log:     newRequestLog(o.MaxLogEntries),
		hooks:   newWebhooks(o.MaxLogEntries),
		done:    make(chan struct{}),
	}
	if e.now == nil {
		e.now = time.Now
	}
	for _, q := range o.Queries {
		e.queries[q] = nil
	}
	e.routes()
	return e
}

func (e *Emulator) routes() {
	m := http.NewServeMux()
	m.HandleFunc("POST /api/auth/login", e.handleLogin)
	m.HandleFunc("POST /api/auth/refresh", e.handleRefresh)
	m.HandleFunc("POST /api/query/{name}", e.handleQuery)
	m.HandleFunc("GET /api/query/{name}", e.handleQuery)
	m.HandleFunc("GET /api/artifact/{id}", e.handleArtifact)
	e.proposedChangeRoutes(m) // POST /graphql and /emulator/proposed-changes
	e.controlRoutes(m)
	e.mux = m
}

// Start serves the emulator on addr (e.g. 127.0.0.1:0) in the background and
// returns its base URL.
func (e *Emulator) Start(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("infrahub emulator: listen %s: %w", addr, err)
	}
	e.mu.Lock()
	e.srv = &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	e.url = "http://" + ln.Addr().String()
	srv := e.srv
	e.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	return e.url, nil
}

// URL is the base URL after Start ("" before).
func (e *Emulator) URL() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.url
}

// Close releases hung requests, stops sending webhooks and stops the server started by Start.
func (e *Emulator) Close() error {
	e.once.Do(func() {
		close(e.done)
		e.hooks.close()
	})
	e.mu.Lock()
	srv := e.srv
	e.mu.Unlock()
	if srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return srv.Close()
	}
	return nil
}

// ---- Go API: data ----

// Apply records a change (see Change) and returns the resulting artifact
// (for a delete: the state just before it).
func (e *Emulator) Apply(ch Change) (Artifact, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	a, prev, err := e.store.apply(ch, e.now())
	if err != nil {
		return a, err
	}
	// Queued under e.mu so that events leave in the order their changes were made; queueing
	// never waits on a webhook target.
	if !ch.Delete && (prev == nil || prev.Checksum != a.Checksum) {
		e.hooks.artifactChanged(a, prev)
	}
	return a, nil
}

// AddArtifact creates an artifact on branch ("" = main) now.
func (e *Emulator) AddArtifact(branch, name, contentType string, content []byte) (Artifact, error) {
	return e.Apply(Change{Branch: branch, Name: name, ContentType: contentType, Content: content})
}

// UpdateArtifact replaces an artifact's content on branch now; the checksum
// changes, the storage id does not. On a branch other than main this creates
// the branch's own version of a main artifact.
func (e *Emulator) UpdateArtifact(branch, id string, content []byte) (Artifact, error) {
	return e.Apply(Change{Branch: branch, ID: id, Content: content})
}

// DeleteArtifact removes an artifact from branch now (history keeps it).
func (e *Emulator) DeleteArtifact(branch, id string) error {
	_, err := e.Apply(Change{Branch: branch, ID: id, Delete: true})
	return err
}

// Artifacts lists the artifacts visible on branch at the given time (zero = now).
func (e *Emulator) Artifacts(branch string, at time.Time) ([]Artifact, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if branch == "" {
		branch = MainBranch
	}
	if !e.store.branches[branch] {
		return nil, fmt.Errorf("branch %q: %w", branch, ErrNotFound)
	}
	if at.IsZero() {
		at = e.now()
	}
	return e.store.list(branch, at), nil
}

// AddBranch creates a branch (no-op if it exists). It starts as a view of main.
func (e *Emulator) AddBranch(name string) error {
	if name == "" {
		return errors.New("empty branch name")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.store.branches[name] = true
	return nil
}

// Branches lists branch names, sorted.
func (e *Emulator) Branches() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for b := range e.store.branches {
		out = append(out, b)
	}
	sort.Strings(out)
	return out
}

// ---- Go API: auth and queries ----

// SetUser adds a user or changes its password.
func (e *Emulator) SetUser(name, password string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.auth.users[name] = password
}

// RemoveUser deletes a user; its tokens stop working.
func (e *Emulator) RemoveUser(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.auth.users, name)
}

// AddAPIToken accepts token as X-INFRAHUB-KEY.
func (e *Emulator) AddAPIToken(token string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.auth.apiTokens[token] = true
}

// RemoveAPIToken stops accepting token.
func (e *Emulator) RemoveAPIToken(token string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.auth.apiTokens, token)
}

// SetAccessTokenTTL changes the lifetime of access tokens issued from now on.
func (e *Emulator) SetAccessTokenTTL(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.auth.accessTTL = d
}

// RevokeAccessTokens invalidates every access token issued so far; refresh
// tokens keep working (a client should refresh, not log in again).
func (e *Emulator) RevokeAccessTokens() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.auth.accessGen++
}

// RevokeSessions invalidates access and refresh tokens (a client must log in).
func (e *Emulator) RevokeSessions() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.auth.accessGen++
	e.auth.refreshGen++
}

// AddQuery makes a stored query available (answering normally).
func (e *Emulator) AddQuery(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.queries[name] = nil
}

// RemoveQuery makes the query unknown (404).
func (e *Emulator) RemoveQuery(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.queries, name)
}

// FailQuery makes a stored query answer 502 with these GraphQL error
// messages, as Infrahub does when a query errors; no messages restores it.
func (e *Emulator) FailQuery(name string, messages ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.queries[name] = append([]string(nil), messages...)
}

// DropEdges makes query answers lose their last n edges while count still reports every
// artifact the query selected; 0 restores complete answers.
func (e *Emulator) DropEdges(n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dropEdges = n
}

// ---- HTTP ----

func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	class := classify(r.URL.Path)
	if class == classControl {
		e.mux.ServeHTTP(w, r)
		return
	}
	rec := &recorder{ResponseWriter: w}
	start := time.Now()
	entry := Request{Time: e.now(), Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Class: class}
	e.log.begin(class)
	defer func() {
		e.log.end(class)
		entry.Status = rec.status
		entry.Duration = time.Since(start)
		e.log.add(entry)
	}()
	if f := e.takeFault(class); f != nil {
		entry.Fault = f.Kind
		if !e.inject(rec, r, f) {
			return
		}
	}
	e.mux.ServeHTTP(rec, r)
}

// recorder captures the status for the request log.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (drop faults).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// writeJSON answers with a JSON body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeErrors answers in Infrahub's error envelope.
func writeErrors(w http.ResponseWriter, status int, messages ...string) {
	errs := make([]map[string]any, 0, len(messages))
	for _, m := range messages {
		errs = append(errs, map[string]any{"message": m, "extensions": map[string]any{"code": status}})
	}
	writeJSON(w, status, map[string]any{"data": nil, "errors": errs})
}

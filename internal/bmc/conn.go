package bmc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/metalhub/metalhub/internal/bmc/wire"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

// maxBody bounds what we buffer from one BMC answer.
const maxBody = 16 << 20

type ctxKey int

// noAuthKey marks requests (session login) that must carry no credentials.
const noAuthKey ctxKey = 1

// probeKey marks the breaker's probe, which is sent while the breaker is open.
const probeKey ctxKey = 2

func isProbe(req *http.Request) bool { return req.Context().Value(probeKey) != nil }

// requestTimeoutKey carries a request timeout other than the pool's (WithRequestTimeout).
const requestTimeoutKey ctxKey = 3

// WithRequestTimeout bounds the requests made under ctx by d instead of the pool's request
// timeout: for the few that carry a payload larger than a read (an image pushed to the BMC).
func WithRequestTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, requestTimeoutKey, d)
}

// conn is one BMC connection. It is its own http.RoundTripper so that every
// request, including the ones gofish makes while walking links, goes through
// the concurrency cap, the request timeout and the session renewal.
type conn struct {
	base        string
	ep          Endpoint
	fingerprint [32]byte
	opts        Options
	log         logr.Logger
	transport   *http.Transport
	http        *http.Client
	sem         chan struct{}

	// life ends when the conn is retired: it stops the background connect and probe, which
	// wg waits for.
	life context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
	brk  breaker

	// root is written by the connect in flight only, and read once api is set.
	root wire.Root

	// loginMu serializes session (re)creation.
	loginMu sync.Mutex

	mu         sync.Mutex        // guards the fields below
	api        *gofish.APIClient // nil until connected
	connecting *connectCall      // the connect in flight, if any
	basicAuth  bool
	token      string
	sessionURI string
	closed     bool
	systems    map[string]string // system Id -> @odata.id

	// logs remembers where each system's event log is and who last answered for it (logcache.go).
	logs logCache
}

// RoundTrip implements http.RoundTripper.
func (c *conn) RoundTrip(req *http.Request) (*http.Response, error) {
	noAuth := req.Context().Value(noAuthKey) != nil
	c.mu.Lock()
	token, basic := c.token, c.basicAuth
	c.mu.Unlock()

	resp, err := c.exchange(req, token, noAuth)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || noAuth || token == "" || basic {
		return resp, err
	}
	// The session expired or was deleted (BMC reboot, session cap, admin):
	// log in again once and replay. The request was rejected before it ran,
	// so replaying a POST is safe.
	if req.Body != nil && req.GetBody == nil {
		return resp, nil
	}
	if lerr := c.relogin(req.Context(), token); lerr != nil {
		if ReasonOf(lerr) == ReasonAuthenticationFailed {
			return resp, nil // let the caller see the 401
		}
		return nil, lerr
	}
	retry := req
	if req.GetBody != nil {
		body, gerr := req.GetBody()
		if gerr != nil {
			return nil, gerr
		}
		retry = req.Clone(req.Context())
		retry.Body = body
	}
	c.mu.Lock()
	token = c.token
	c.mu.Unlock()
	return c.exchange(retry, token, false)
}

// exchange runs one HTTP exchange under the circuit breaker, the concurrency cap and the
// request timeout, buffering the body so the slot is released only once the BMC is done
// sending.
func (c *conn) exchange(req *http.Request, token string, noAuth bool) (*http.Response, error) {
	op := req.Method + " " + req.URL.Path
	if err := c.admit(op); err != nil {
		return nil, err
	}
	return c.send(req, token, noAuth)
}

// send is exchange without the breaker's admission (the probe is admitted by definition).
func (c *conn) send(req *http.Request, token string, noAuth bool) (*http.Response, error) {
	if err := acquire(req.Context(), c.sem); err != nil {
		return nil, err
	}
	defer func() { <-c.sem }()
	// The breaker may have opened while this request waited for a slot.
	if !isProbe(req) {
		if err := c.admit(req.Method + " " + req.URL.Path); err != nil {
			return nil, err
		}
	}
	timeout := c.opts.RequestTimeout
	if d, ok := req.Context().Value(requestTimeoutKey).(time.Duration); ok && d > 0 {
		timeout = d
	}
	deadline := time.Now().Add(timeout)
	if d, ok := req.Context().Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// Held from here until the BMC answered: giving the right to act up waits for this request,
	// and one that could outlast the right is not sent.
	hctx, release, err := hold(req.Context(), req.Method+" "+req.URL.Path, deadline)
	if err != nil {
		return nil, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(hctx, timeout)
	defer cancel()
	r := req.Clone(ctx)
	if c.opts.UserAgent != "" {
		r.Header.Set("User-Agent", c.opts.UserAgent)
	}
	if !noAuth {
		if token != "" {
			r.Header.Set("X-Auth-Token", token)
		} else if c.ep.Username != "" {
			r.SetBasicAuth(c.ep.Username, c.ep.Password)
		}
	}
	start := time.Now()
	resp, err := c.transport.RoundTrip(r)
	if err != nil {
		observe(c.base, start, nil, err)
		terr := c.transportError(ctx, req, err)
		c.settle(req.Context(), start, terr)
		return nil, terr
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	resp.Body.Close()
	observe(c.base, start, resp, err)
	if err != nil {
		terr := c.transportError(ctx, req, err)
		c.settle(req.Context(), start, terr)
		return nil, terr
	}
	c.settle(req.Context(), start, nil)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Request = req
	return resp, nil
}

// transportError tells our own request timeout apart from the caller's
// context ending, so both classify correctly.
func (c *conn) transportError(ctx context.Context, req *http.Request, err error) *Error {
	op := req.Method + " " + req.URL.Path
	if req.Context().Err() != nil {
		return &Error{Reason: wire.Classify("", req.Context().Err()).Reason, Op: op, Err: req.Context().Err()}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &Error{Reason: ReasonTimeout, Op: op, Err: fmt.Errorf("no complete answer within %s", c.opts.RequestTimeout)}
	}
	return wire.Classify(op, err)
}

// connectCall is one connect in flight; done is closed when err and the conn's api are set.
type connectCall struct {
	done chan struct{}
	err  error
}

// client returns a gofish client bound to ctx, connecting (service root and
// session) on first use.
//
// The connect runs on its own, not on the first caller's context: every server of a BMC
// waits for the same one, each only as long as its own context allows, and a slow BMC's
// connect that outlasts one pass is there for the next instead of being started over. It is
// bounded by the request timeout of each of its requests, and the breaker ends it at the
// first transport failure.
func (c *conn) client(ctx context.Context) (*gofish.APIClient, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, wire.New(ReasonCanceled, "connect", "connection was removed from the pool")
	}
	if api := c.api; api != nil {
		c.mu.Unlock()
		return api.WithContext(ctx), nil
	}
	call := c.connecting
	if call == nil {
		if err := c.admit("connect"); err != nil {
			c.mu.Unlock()
			return nil, err
		}
		call = &connectCall{done: make(chan struct{})}
		c.connecting = call
		c.wg.Add(1)
		go c.runConnect(call)
	}
	c.mu.Unlock()
	select {
	case <-call.done:
		if call.err != nil {
			return nil, call.err
		}
		c.mu.Lock()
		api := c.api
		c.mu.Unlock()
		return api.WithContext(ctx), nil
	case <-ctx.Done():
		return nil, wire.Wrap("connect", ctx.Err())
	}
}

func (c *conn) runConnect(call *connectCall) {
	defer c.wg.Done()
	api, err := c.connect(c.life)
	c.mu.Lock()
	c.connecting = nil
	if err == nil {
		c.api = api
	}
	c.mu.Unlock()
	call.err = err
	close(call.done)
}

func (c *conn) connect(ctx context.Context) (*gofish.APIClient, error) {
	api, err := gofish.ConnectContext(ctx, gofish.ClientConfig{
		Endpoint:              c.base,
		HTTPClient:            c.http,
		NoModifyTransport:     true,
		ReuseConnections:      true,
		MaxConcurrentRequests: int64(c.opts.MaxConcurrentRequests),
	})
	if err != nil {
		return nil, wire.Wrap("read service root", err)
	}
	if err := wire.GetJSON(api, "/redfish/v1/", &c.root); err != nil {
		return nil, wire.Wrap("read service root", err)
	}
	sessions := c.root.Links.Sessions.ID
	if sessions == "" && c.root.SessionService.ID != "" {
		var ss struct{ Sessions wire.Link }
		if err := wire.GetJSON(api, c.root.SessionService.ID, &ss); err == nil {
			sessions = ss.Sessions.ID
		} else if ReasonOf(err) != ReasonNotFound {
			return nil, wire.Wrap("read session service", err)
		}
	}
	if sessions == "" {
		c.log.V(1).Info("BMC has no SessionService, using Basic authentication")
		c.setBasic()
	} else if err := c.login(ctx, sessions); err != nil {
		return nil, err
	}
	c.root.Links.Sessions.ID = sessions
	return api, nil
}

func (c *conn) setBasic() {
	c.mu.Lock()
	c.basicAuth, c.token, c.sessionURI = true, "", ""
	c.mu.Unlock()
}

// login creates a session. A BMC that answers 404/405/501 to the session
// POST, or gives no token, gets Basic auth instead.
func (c *conn) login(ctx context.Context, sessionsURI string) error {
	const op = "create session"
	payload, _ := json.Marshal(map[string]string{"UserName": c.ep.Username, "Password": c.ep.Password})
	req, err := http.NewRequestWithContext(context.WithValue(ctx, noAuthKey, true), http.MethodPost, c.base+sessionsURI, bytes.NewReader(payload))
	if err != nil {
		return wire.Wrap(op, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return wire.Wrap(op, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound, resp.StatusCode == http.StatusMethodNotAllowed, resp.StatusCode == http.StatusNotImplemented:
		c.log.V(1).Info("session login not supported, using Basic authentication", "status", resp.StatusCode)
		c.setBasic()
		return nil
	case resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(body, []byte("SessionLimitExceeded")):
		// Every session slot is taken, typically by sessions a killed predecessor never logged
		// out of. They expire only after the BMC's session timeout; Basic auth needs no slot.
		c.log.Info("BMC session limit reached, using Basic authentication")
		c.setBasic()
		return nil
	case resp.StatusCode >= 300:
		return wire.StatusError(op, resp.StatusCode, body)
	}
	token := resp.Header.Get("X-Auth-Token")
	if token == "" {
		c.log.V(1).Info("session login returned no token, using Basic authentication")
		c.setBasic()
		return nil
	}
	loc := resp.Header.Get("Location")
	if u, err := url.Parse(loc); err == nil && u.IsAbs() {
		loc = u.RequestURI()
	}
	if loc == "" {
		var s wire.Link
		if json.Unmarshal(body, &s) == nil {
			loc = s.ID
		}
	}
	c.mu.Lock()
	c.basicAuth, c.token, c.sessionURI = false, token, loc
	c.mu.Unlock()
	c.log.V(1).Info("opened Redfish session", "session", loc)
	return nil
}

// relogin replaces the session whose token was stale, unless another request
// already did.
func (c *conn) relogin(ctx context.Context, stale string) error {
	c.loginMu.Lock()
	defer c.loginMu.Unlock()
	c.mu.Lock()
	current, closed := c.token, c.closed
	c.mu.Unlock()
	if closed {
		return wire.New(ReasonCanceled, "renew session", "connection was removed from the pool")
	}
	if current != stale {
		return nil
	}
	c.log.Info("Redfish session rejected, logging in again")
	return c.login(ctx, c.root.Links.Sessions.ID)
}

// close logs the session out (best effort) and drops idle connections.
func (c *conn) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	token, uri := c.token, c.sessionURI
	c.mu.Unlock()
	c.brk.mu.Lock() // no probe starts once life has ended
	c.stop()
	c.brk.mu.Unlock()
	c.wg.Wait()
	if token != "" && uri != "" {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.RequestTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.base+uri, nil)
		if err == nil {
			var resp *http.Response
			resp, err = c.exchange(req, token, false)
			if err == nil {
				if resp.StatusCode >= 300 && resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusUnauthorized {
					err = fmt.Errorf("HTTP %d", resp.StatusCode)
				}
			}
		}
		if err != nil {
			c.log.Info("logout failed", "session", uri, "error", err.Error())
		} else {
			c.log.V(1).Info("closed Redfish session", "session", uri)
		}
	}
	c.transport.CloseIdleConnections()
	unreachable.WithLabelValues(c.base).Set(0)
}

// session is the view of a conn the service packages work through.
type session struct{ c *conn }

var _ wire.Conn = session{}

func (s session) Client(ctx context.Context) (*gofish.APIClient, error) { return s.c.client(ctx) }
func (s session) Root() *wire.Root                                      { return &s.c.root }
func (s session) Log() logr.Logger                                      { return s.c.log }

func (s session) System(ctx context.Context, systemID string) (*schemas.ComputerSystem, error) {
	return s.c.getSystem(ctx, systemID)
}

// wire is the conn as a service package sees it.
func (c *conn) wire() wire.Conn { return session{c} }

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
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/stmcginnis/gofish"
)

// maxBody bounds what we buffer from one BMC answer.
const maxBody = 16 << 20

type ctxKey int

// noAuthKey marks requests (session login) that must carry no credentials.
const noAuthKey ctxKey = 1

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

	// connectLock serializes connecting while honouring callers' contexts.
	connectLock chan struct{}
	api         *gofish.APIClient // nil until connected
	root        serviceRoot

	// loginMu serializes session (re)creation.
	loginMu sync.Mutex

	mu         sync.Mutex // guards the fields below
	basicAuth  bool
	token      string
	sessionURI string
	closed     bool
	systems    map[string]string // system Id -> @odata.id
}

// serviceRoot holds the links we need from /redfish/v1.
type serviceRoot struct {
	Systems        odataLink
	Managers       odataLink
	SessionService odataLink
	Links          struct {
		Sessions odataLink
	}
}

type odataLink struct {
	ID string `json:"@odata.id"`
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

// exchange runs one HTTP exchange under the concurrency cap and the request
// timeout, buffering the body so the slot is released only once the BMC is
// done sending.
func (c *conn) exchange(req *http.Request, token string, noAuth bool) (*http.Response, error) {
	if err := acquire(req.Context(), c.sem); err != nil {
		return nil, err
	}
	defer func() { <-c.sem }()

	ctx, cancel := context.WithTimeout(req.Context(), c.opts.RequestTimeout)
	defer cancel()
	r := req.Clone(ctx)
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
		return nil, c.transportError(ctx, req, err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	resp.Body.Close()
	observe(c.base, start, resp, err)
	if err != nil {
		return nil, c.transportError(ctx, req, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Request = req
	return resp, nil
}

// transportError tells our own request timeout apart from the caller's
// context ending, so both classify correctly.
func (c *conn) transportError(ctx context.Context, req *http.Request, err error) error {
	op := req.Method + " " + req.URL.Path
	if req.Context().Err() != nil {
		return &Error{Reason: classify("", req.Context().Err()).Reason, Op: op, Err: req.Context().Err()}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &Error{Reason: ReasonTimeout, Op: op, Err: fmt.Errorf("no complete answer within %s", c.opts.RequestTimeout)}
	}
	return classify(op, err)
}

// client returns a gofish client bound to ctx, connecting (service root and
// session) on first use.
func (c *conn) client(ctx context.Context) (*gofish.APIClient, error) {
	if err := acquire(ctx, c.connectLock); err != nil {
		return nil, wrap("connect", err)
	}
	defer func() { <-c.connectLock }()
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, newError(ReasonCanceled, "connect", "connection was removed from the pool")
	}
	if c.api == nil {
		if err := c.connect(ctx); err != nil {
			return nil, err
		}
	}
	return c.api.WithContext(ctx), nil
}

func (c *conn) connect(ctx context.Context) error {
	api, err := gofish.ConnectContext(ctx, gofish.ClientConfig{
		Endpoint:              c.base,
		HTTPClient:            c.http,
		NoModifyTransport:     true,
		ReuseConnections:      true,
		MaxConcurrentRequests: int64(c.opts.MaxConcurrentRequests),
	})
	if err != nil {
		return wrap("read service root", err)
	}
	if err := getJSON(api, "/redfish/v1/", &c.root); err != nil {
		return wrap("read service root", err)
	}
	sessions := c.root.Links.Sessions.ID
	if sessions == "" && c.root.SessionService.ID != "" {
		var ss struct{ Sessions odataLink }
		if err := getJSON(api, c.root.SessionService.ID, &ss); err == nil {
			sessions = ss.Sessions.ID
		} else if ReasonOf(err) != ReasonNotFound {
			return wrap("read session service", err)
		}
	}
	if sessions == "" {
		c.log.V(1).Info("BMC has no SessionService, using Basic authentication")
		c.setBasic()
	} else if err := c.login(ctx, sessions); err != nil {
		return err
	}
	c.root.Links.Sessions.ID = sessions
	c.api = api
	return nil
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
		return wrap(op, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return wrap(op, err)
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
		return statusError(op, resp.StatusCode, body)
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
		var s odataLink
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
		return newError(ReasonCanceled, "renew session", "connection was removed from the pool")
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
}

// getJSON GETs uri through gofish and decodes the body into v.
func getJSON(api *gofish.APIClient, uri string, v any) error {
	resp, err := api.Get(uri)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("decode %s: %w", uri, err)
	}
	return nil
}

// lastSegment returns the final path segment of an @odata.id.
func lastSegment(p string) string {
	p = strings.TrimRight(p, "/")
	if i := strings.LastIndex(p, "/"); i >= 0 {
		p = p[i+1:]
	}
	if u, err := url.PathUnescape(p); err == nil {
		return u
	}
	return p
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

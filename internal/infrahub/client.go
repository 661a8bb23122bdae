// Package infrahub is a client for the parts of the Infrahub REST API that
// artifact delivery needs: login, stored queries and artifact downloads.
// A Client is safe for concurrent use and is meant to be kept across
// reconciles (see Cache), so that it logs in once and reuses its token.
//
// It imports no metalhub package and no Kubernetes library: what to fetch and where the result
// goes are the delivery controller's. It changes no data in Infrahub: besides logging in, it runs
// stored queries and downloads artifacts.
package infrahub

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults applied by New for zero Config fields.
const (
	DefaultTimeout      = 30 * time.Second
	DefaultMaxBodyBytes = 10 << 20
	DefaultTokenTTL     = 10 * time.Minute
	DefaultQueryName    = "ArtifactIDs"
	DefaultBranch       = "main"
)

// Config describes one Infrahub endpoint and the credentials to use there.
// Either APIToken or Username and Password must be set; the token wins when
// both are, as it needs no login.
type Config struct {
	URL      string // base URL, e.g. https://infrahub.example.com (a path prefix is kept)
	Username string
	Password string
	APIToken string // sent as X-INFRAHUB-KEY

	Timeout      time.Duration // per HTTP request, including reading the body
	MaxBodyBytes int64         // largest artifact or JSON body accepted
	CABundle     []byte        // PEM; when set, the only roots trusted
	Insecure     bool          // skip TLS verification (explicit opt-in only)

	// TokenTTL is assumed for access tokens whose JWT carries no readable exp.
	TokenTTL time.Duration
	// Transport overrides the HTTP transport (CABundle and Insecure are then ignored).
	Transport http.RoundTripper
	// Now overrides the clock used for token expiry (tests).
	Now func() time.Time
}

// String redacts secrets so a Config can be logged.
func (c Config) String() string {
	auth := "none"
	switch {
	case c.APIToken != "":
		auth = "api-token"
	case c.Username != "":
		auth = "user " + c.Username
	}
	return fmt.Sprintf("infrahub.Config{URL: %s, auth: %s, timeout: %s, insecure: %t}", c.URL, auth, c.Timeout, c.Insecure)
}

// Client talks to one Infrahub instance with one set of credentials.
type Client struct {
	base     *url.URL
	cfg      Config
	http     *http.Client
	now      func() time.Time
	tokens   *tokenSource // nil with API-token auth
	apiToken string
}

// New validates cfg and builds a client. It does not contact the server.
func New(cfg Config) (*Client, error) {
	invalid := func(format string, a ...any) error {
		return &Error{Op: "configure client", Kind: ErrInvalidConfig, Err: fmt.Errorf(format, a...)}
	}
	u, err := url.Parse(strings.TrimSpace(cfg.URL))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, invalid("URL %q must be an absolute http(s) URL", cfg.URL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	if cfg.APIToken == "" && (cfg.Username == "" || cfg.Password == "") {
		return nil, invalid("either an API token or a username and password are required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = DefaultTokenTTL
	}
	c := &Client{base: u, cfg: cfg, now: cfg.Now, apiToken: cfg.APIToken}
	if c.now == nil {
		c.now = time.Now
	}
	rt := cfg.Transport
	if rt == nil {
		rt, err = newTransport(cfg)
		if err != nil {
			return nil, invalid("%w", err)
		}
	}
	// No http.Client timeout: each request gets its own context deadline so
	// that a timeout can be told apart from the caller cancelling.
	c.http = &http.Client{Transport: rt, CheckRedirect: c.sameOrigin}
	if c.apiToken == "" {
		c.tokens = newTokenSource(c)
	}
	return c, nil
}

func newTransport(cfg Config) (*http.Transport, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(cfg.CABundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CABundle) {
			return nil, errors.New("CA bundle holds no PEM certificate")
		}
		tc.RootCAs = pool
	}
	if cfg.Insecure {
		tc.InsecureSkipVerify = true //nolint:gosec // explicit user opt-in
	}
	t.TLSClientConfig = tc
	t.MaxIdleConnsPerHost = 8
	return t, nil
}

// URL returns the normalised base URL.
func (c *Client) URL() string { return c.base.String() }

// CloseIdleConnections releases pooled connections (e.g. when evicted from a Cache).
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// endpoint joins the base URL with an already escaped path and a query.
func (c *Client) endpoint(escapedPath string, q url.Values) string {
	s := c.base.String() + escapedPath
	if len(q) > 0 {
		s += "?" + q.Encode()
	}
	return s
}

// response is a fully read HTTP response.
type response struct {
	status      int
	contentType string
	body        []byte
}

// errTooLarge marks a body cut at its limit.
var errTooLarge = errors.New("body exceeds limit")

// jsonLimit bounds JSON answers (login, query results). It does not shrink
// with a small MaxBodyBytes, which is about artifacts.
func (c *Client) jsonLimit() int64 { return max(c.cfg.MaxBodyBytes, 8<<20) }

// send performs one HTTP request with its own timeout and reads the whole
// (size-limited) body before the deadline is released.
func (c *Client) send(ctx context.Context, op, method, target string, body []byte, header http.Header, limit int64) (*response, error) {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(rctx, method, target, rd)
	if err != nil {
		return nil, &Error{Op: op, Kind: ErrInvalidRequest, Err: err}
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "metalhub-infrahub-client")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, transportError(op, ctx, stripURL(err))
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, transportError(op, ctx, err)
	}
	if int64(len(data)) > limit {
		return &response{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}, errTooLarge
	}
	return &response{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: data}, nil
}

// stripURL drops the *url.Error wrapper: its text repeats the full URL
// (query string included) on every message.
// sameOrigin follows a redirect only to the configured scheme and host: credentials (the
// X-INFRAHUB-KEY header, a bearer token, a login body that 307/308 send again) must never reach
// another host, and net/http strips only the Authorization header on such a redirect.
func (c *Client) sameOrigin(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if req.URL.Scheme != c.base.Scheme || !strings.EqualFold(req.URL.Host, c.base.Host) {
		return fmt.Errorf("%w: %s://%s is not %s://%s", ErrRedirectRefused, req.URL.Scheme, req.URL.Host, c.base.Scheme, c.base.Host)
	}
	return nil
}

func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", strings.ToLower(ue.Op), ue.Err)
	}
	return err
}

// serverMessages extracts Infrahub's {"errors":[{"message":...}]} or
// FastAPI's {"detail":...} from an error body.
func serverMessages(body []byte) []string {
	var env struct {
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
		Detail json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &env) != nil {
		return nil
	}
	var msgs []string
	for _, e := range env.Errors {
		if e.Message != "" {
			msgs = append(msgs, e.Message)
		}
	}
	if len(msgs) == 0 && len(env.Detail) > 0 {
		var s string
		if json.Unmarshal(env.Detail, &s) == nil {
			msgs = append(msgs, s)
		} else {
			msgs = append(msgs, string(env.Detail))
		}
	}
	return msgs
}

// statusError maps a non-2xx answer (other than the per-endpoint special
// cases the callers handle first) to a typed error.
func statusError(op string, r *response) *Error {
	e := &Error{Op: op, StatusCode: r.status, Messages: serverMessages(r.body)}
	switch {
	case r.status == http.StatusUnauthorized:
		e.Kind = ErrBadCredentials
	case r.status == http.StatusForbidden:
		e.Kind = ErrPermissionDenied
	case r.status == http.StatusBadRequest && mentionsMissingBranch(e.Messages):
		e.Kind = ErrBranchNotFound
	case r.status == http.StatusTooManyRequests, r.status >= 500:
		e.Kind = ErrUnavailable
	case r.status >= 400:
		e.Kind = ErrInvalidRequest
	default:
		e.Kind = ErrInvalidResponse
	}
	return e
}

func mentionsMissingBranch(msgs []string) bool {
	for _, m := range msgs {
		l := strings.ToLower(m)
		if strings.Contains(l, "branch") && strings.Contains(l, "not found") {
			return true
		}
	}
	return false
}

package infrahub

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"
)

// tokenSource holds the JWT pair of one client. Renewal is serialised so that
// many concurrent reconciles cause one login, not one each.
type tokenSource struct {
	c   *Client
	sem chan struct{} // held while renewing; a channel so waiting honours ctx

	mu         sync.Mutex
	access     string
	renewAt    time.Time // renew the access token from here on
	refresh    string
	refreshEnd time.Time // zero: unknown, try it until the server says no
}

func newTokenSource(c *Client) *tokenSource {
	return &tokenSource{c: c, sem: make(chan struct{}, 1)}
}

// token returns a usable access token, refreshing or logging in if needed.
func (ts *tokenSource) token(ctx context.Context) (string, error) {
	if tok := ts.current(); tok != "" {
		return tok, nil
	}
	select {
	case ts.sem <- struct{}{}:
	case <-ctx.Done():
		return "", transportError("log in", ctx, ctx.Err())
	}
	defer func() { <-ts.sem }()
	if tok := ts.current(); tok != "" { // renewed while we waited
		return tok, nil
	}
	return ts.renew(ctx)
}

func (ts *tokenSource) current() string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.access != "" && ts.c.now().Before(ts.renewAt) {
		return ts.access
	}
	return ""
}

// invalidate forgets the access token after a 401, unless it was already
// replaced by a newer one.
func (ts *tokenSource) invalidate(used string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.access == used {
		ts.access = ""
	}
}

func (ts *tokenSource) renew(ctx context.Context) (string, error) {
	ts.mu.Lock()
	refresh, refreshEnd := ts.refresh, ts.refreshEnd
	ts.mu.Unlock()
	if refresh != "" && (refreshEnd.IsZero() || ts.c.now().Before(refreshEnd)) {
		tok, err := ts.refreshAccess(ctx, refresh)
		if err == nil {
			return tok, nil
		}
		// A rejected refresh token means: log in again. Anything else
		// (server down, timeout) would fail the login just the same.
		if !errors.Is(err, ErrBadCredentials) {
			return "", err
		}
	}
	return ts.login(ctx)
}

func (ts *tokenSource) login(ctx context.Context) (string, error) {
	const op = "log in"
	body, _ := json.Marshal(map[string]string{"username": ts.c.cfg.Username, "password": ts.c.cfg.Password})
	r, err := ts.c.send(ctx, op, http.MethodPost, ts.c.endpoint("/api/auth/login", nil), body, nil, ts.c.jsonLimit())
	if err != nil {
		return "", tooLargeOr(op, err)
	}
	switch {
	case r.status == http.StatusOK:
	// Infrahub answers 404 for an unknown user and 401 for a wrong password;
	// 422 is FastAPI rejecting an empty field. All mean "fix the Secret".
	case r.status == http.StatusUnauthorized, r.status == http.StatusNotFound, r.status == http.StatusUnprocessableEntity:
		return "", &Error{Op: op, Kind: ErrBadCredentials, StatusCode: r.status, Messages: serverMessages(r.body)}
	default:
		return "", statusError(op, r)
	}
	var out struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal(r.body, &out); err != nil || out.AccessToken == "" {
		return "", &Error{Op: op, Kind: ErrInvalidResponse, StatusCode: r.status, Err: errors.New("no access_token in login response")}
	}
	ts.store(out.AccessToken, out.RefreshToken)
	return out.AccessToken, nil
}

func (ts *tokenSource) refreshAccess(ctx context.Context, refresh string) (string, error) {
	const op = "refresh token"
	h := http.Header{"Authorization": {"Bearer " + refresh}}
	r, err := ts.c.send(ctx, op, http.MethodPost, ts.c.endpoint("/api/auth/refresh", nil), nil, h, ts.c.jsonLimit())
	if err != nil {
		return "", tooLargeOr(op, err)
	}
	switch {
	case r.status == http.StatusOK:
	case r.status >= 400 && r.status < 500:
		return "", &Error{Op: op, Kind: ErrBadCredentials, StatusCode: r.status, Messages: serverMessages(r.body)}
	default:
		return "", statusError(op, r)
	}
	var out struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(r.body, &out); err != nil || out.AccessToken == "" {
		return "", &Error{Op: op, Kind: ErrBadCredentials, StatusCode: r.status, Err: errors.New("no access_token in refresh response")}
	}
	ts.store(out.AccessToken, "")
	return out.AccessToken, nil
}

// store records a new access token (and refresh token, if given) with the
// time to renew it: shortly before its exp claim, or after TokenTTL.
func (ts *tokenSource) store(access, refresh string) {
	now := ts.c.now()
	exp, ok := jwtExpiry(access)
	if !ok {
		exp = now.Add(ts.c.cfg.TokenTTL)
	}
	// Renew a little early so a token does not expire in flight: a tenth of
	// its remaining life, at most a minute.
	skew := min(exp.Sub(now)/10, time.Minute)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.access = access
	ts.renewAt = exp.Add(-max(skew, 0))
	if refresh != "" {
		ts.refresh = refresh
		ts.refreshEnd = time.Time{}
		if rexp, ok := jwtExpiry(refresh); ok {
			ts.refreshEnd = rexp.Add(-time.Second)
		}
	}
}

// jwtExpiry reads the exp claim of a JWT without verifying it: the server
// verifies; we only want to know when to renew.
func jwtExpiry(tok string) (time.Time, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp json.Number `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.Exp == "" {
		return time.Time{}, false
	}
	f, err := claims.Exp.Float64()
	if err != nil || f <= 0 {
		return time.Time{}, false
	}
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9)), true
}

func tooLargeOr(op string, err error) error {
	if errors.Is(err, errTooLarge) {
		return &Error{Op: op, Kind: ErrInvalidResponse, Err: err}
	}
	return err
}

package dashboard

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

// ErrActionsNeedAuth refuses a start with actions off loopback and no way to tell who presses
// the buttons: anyone who reaches the port would write with the dashboard's credentials.
var ErrActionsNeedAuth = errors.New("actions off loopback need authentication")

// minTokenLength keeps a guessable word out of --token-file: the token is all that stands
// between the network and the power buttons.
const minTokenLength = 16

// actionVerb is what every action does to its Server (fleetops writes a merge patch), so the
// verb a requester's SubjectAccessReview must allow.
const actionVerb = "patch"

// reviewTimeout bounds the TokenReview and SubjectAccessReview of one request.
const reviewTimeout = 10 * time.Second

// authenticator decides who may press the buttons: the holder of the --token-file token, or,
// with --token-review, a Kubernetes user whose own token the API server accepts and whose RBAC
// allows the write. Either way the token comes in the Authorization header, never a cookie,
// so a page on another site cannot send it along.
type authenticator struct {
	token  *[sha256.Size]byte // the --token-file token's digest; nil without one
	review client.Client      // TokenReview and SubjectAccessReview; nil without --token-review
}

// newAuthenticator is nil when no authentication is configured.
func newAuthenticator(o Options, c client.Client) (*authenticator, error) {
	if o.TokenFile == "" && !o.TokenReview {
		return nil, nil
	}
	a := &authenticator{}
	if o.TokenFile != "" {
		tok, err := readToken(o.TokenFile)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256([]byte(tok))
		a.token = &sum
	}
	if o.TokenReview {
		a.review = c
	}
	return a, nil
}

// readToken reads --token-file. Its errors name the file, never what it holds.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case tok == "":
		return "", fmt.Errorf("--token-file %s is empty", path)
	case strings.ContainsAny(tok, "\r\n"):
		return "", fmt.Errorf("--token-file %s holds more than one line: want the token alone", path)
	case len(tok) < minTokenLength:
		return "", fmt.Errorf("--token-file %s: the token is shorter than %d characters", path, minTokenLength)
	}
	return tok, nil
}

// prompt is what the page asks the user for before the first action.
func (a *authenticator) prompt() string {
	var what []string
	if a.token != nil {
		what = append(what, "the dashboard's token (its --token-file)")
	}
	if a.review != nil {
		what = append(what, "your Kubernetes bearer token")
	}
	return "Actions need " + strings.Join(what, " or ") + ":"
}

// authError is a refused request: its code and a message that never holds the token.
type authError struct {
	code int
	msg  string
}

// authorize returns who is acting on server name, or why not.
func (a *authenticator) authorize(ctx context.Context, r *http.Request, name string) (string, *authError) {
	tok, ok := bearer(r)
	if !ok {
		return "", &authError{http.StatusUnauthorized, "actions need a bearer token: send Authorization: Bearer <token>"}
	}
	if a.token != nil {
		sum := sha256.Sum256([]byte(tok))
		// Digests of equal length, compared in constant time: neither the token's bytes nor its
		// length leak through the answer's timing.
		if subtle.ConstantTimeCompare(sum[:], a.token[:]) == 1 {
			return "token-file", nil
		}
	}
	if a.review == nil {
		return "", &authError{http.StatusUnauthorized, "the bearer token was not accepted"}
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok}}
	if err := a.review.Create(ctx, tr); err != nil {
		return "", &authError{http.StatusBadGateway, "reviewing the bearer token: " + err.Error()}
	}
	if !tr.Status.Authenticated {
		return "", &authError{http.StatusUnauthorized, "the bearer token was not accepted"}
	}
	u := tr.Status.User
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Group: metalv1alpha1.GroupVersion.Group, Version: metalv1alpha1.GroupVersion.Version,
			Resource: "servers", Verb: actionVerb, Name: name}}}
	if err := a.review.Create(ctx, sar); err != nil {
		return "", &authError{http.StatusBadGateway, "reviewing " + u.Username + "'s access: " + err.Error()}
	}
	if !sar.Status.Allowed {
		return "", &authError{http.StatusForbidden, fmt.Sprintf("%s may not %s server %s", u.Username, actionVerb, name)}
	}
	return u.Username, nil
}

// bearer is the request's Authorization: Bearer token.
func bearer(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", false
	}
	return tok, true
}

// hostAllowlist is the Host headers the page may be opened under: a request under any other
// name may come from a page whose name an attacker points at this machine (DNS rebinding).
type hostAllowlist struct {
	hostPorts map[string]bool // "name:port", the listen address's own names on its port
	names     map[string]bool // --allowed-hosts entries without a port: any port (a proxy in front)
}

// allows reports whether host, a Host header, is on the list.
func (l hostAllowlist) allows(host string) bool {
	host = strings.ToLower(host)
	name, port, err := net.SplitHostPort(host)
	if err != nil { // no port: the scheme's default, http's or (through a TLS proxy) https's
		name = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		return l.names[name] || l.hostPorts[net.JoinHostPort(name, "80")] || l.hostPorts[net.JoinHostPort(name, "443")]
	}
	return l.names[name] || l.hostPorts[net.JoinHostPort(name, port)]
}

// addresses returns the page's URL and the Host headers to accept. Bound to loopback, only
// loopback names; bound to one address, that address; bound to all, loopback names and the
// machine's addresses. IP literals cannot be rebound, so a name is accepted only when listed in
// extra (--allowed-hosts).
func addresses(a *net.TCPAddr, extra []string) (string, hostAllowlist, error) {
	port := strconv.Itoa(a.Port)
	l := hostAllowlist{hostPorts: map[string]bool{}, names: map[string]bool{}}
	add := func(h string) { l.hostPorts[net.JoinHostPort(strings.ToLower(h), port)] = true }
	loopback := []string{"localhost", "127.0.0.1", "::1"}
	var u string
	switch {
	case a.IP.IsUnspecified():
		u = "http://" + net.JoinHostPort("127.0.0.1", port) + "/"
		for _, h := range loopback {
			add(h)
		}
		if ifs, err := net.InterfaceAddrs(); err == nil {
			for _, ia := range ifs {
				if n, ok := ia.(*net.IPNet); ok {
					add(n.IP.String())
				}
			}
		}
	case a.IP.IsLoopback():
		u = "http://" + net.JoinHostPort(a.IP.String(), port) + "/"
		add(a.IP.String())
		for _, h := range loopback {
			add(h)
		}
	default:
		u = "http://" + net.JoinHostPort(a.IP.String(), port) + "/"
		add(a.IP.String())
	}
	for _, e := range extra {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "" {
			continue
		}
		if strings.ContainsAny(e, "/@ ") {
			return "", l, fmt.Errorf("--allowed-hosts %q: want a host name, or name:port", e)
		}
		if h, p, err := net.SplitHostPort(e); err == nil {
			l.hostPorts[net.JoinHostPort(h, p)] = true
			continue
		}
		l.names[strings.TrimSuffix(strings.TrimPrefix(e, "["), "]")] = true
	}
	return u, l, nil
}

package bmc

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/metalhub/metalhub/internal/bmc/wire"
)

// Defaults for Options fields left zero.
const (
	DefaultMaxConcurrentRequests = 4
	DefaultRequestTimeout        = 10 * time.Second
	DefaultUnreachableBackoff    = time.Second
	DefaultMaxUnreachableBackoff = 2 * time.Minute
)

// Options tune every connection of a Pool.
type Options struct {
	// MaxConcurrentRequests caps in-flight requests per BMC; BMCs fall over
	// under parallel load. Default 4.
	MaxConcurrentRequests int
	// RequestTimeout bounds each HTTP exchange (connect, TLS, headers and
	// body). Waiting for a free slot under MaxConcurrentRequests is bounded by
	// the caller's context only. Default 10s.
	RequestTimeout time.Duration
	// UnreachableBackoff is how long requests to a BMC fail fast after its first transport
	// failure (refused, reset, no answer within RequestTimeout); each further failure doubles
	// it up to MaxUnreachableBackoff, and the first answer ends it. Defaults 1s and 2m.
	UnreachableBackoff    time.Duration
	MaxUnreachableBackoff time.Duration
	// Now is the clock of those windows (tests move it). Default time.Now.
	Now func() time.Time
	// Logger receives session events. Credentials are never logged.
	Logger logr.Logger
	// UserAgent names the sender in every request (a BMC's audit log then says which replica
	// acted); empty leaves the HTTP library's.
	UserAgent string
}

func (o Options) withDefaults() Options {
	if o.MaxConcurrentRequests <= 0 {
		o.MaxConcurrentRequests = DefaultMaxConcurrentRequests
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.UnreachableBackoff <= 0 {
		o.UnreachableBackoff = DefaultUnreachableBackoff
	}
	if o.MaxUnreachableBackoff <= 0 {
		o.MaxUnreachableBackoff = DefaultMaxUnreachableBackoff
	}
	o.MaxUnreachableBackoff = max(o.MaxUnreachableBackoff, o.UnreachableBackoff)
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Endpoint says where a BMC is and how to authenticate to it.
type Endpoint struct {
	// Address is a URL ("https://10.0.0.5", "http://127.0.0.1:8000") or a
	// host[:port], which means https.
	Address  string
	Username string
	Password string
	// InsecureSkipVerify turns TLS verification off for this BMC. It is never
	// implied: self-signed BMCs need either this or CACert.
	InsecureSkipVerify bool
	// CACert is a PEM bundle trusted instead of the system roots.
	CACert []byte
}

// NormalizeAddress returns the base URL for a BMC address: scheme defaulted
// to https, no trailing slash, no /redfish/v1 suffix.
func NormalizeAddress(address string) (string, error) {
	a := strings.TrimSpace(address)
	if a == "" {
		return "", wire.New(ReasonInvalidConfig, "parse address", "address is empty")
	}
	if !strings.Contains(a, "://") {
		a = "https://" + a
	}
	u, err := url.Parse(a)
	if err != nil {
		return "", &Error{Reason: ReasonInvalidConfig, Op: "parse address", Err: err}
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", wire.New(ReasonInvalidConfig, "parse address", "scheme %q is not http or https", u.Scheme)
	}
	if u.Host == "" {
		return "", wire.New(ReasonInvalidConfig, "parse address", "address %q has no host", address)
	}
	p := strings.TrimRight(u.Path, "/")
	p = strings.TrimSuffix(p, "/redfish/v1")
	p = strings.TrimSuffix(p, "/redfish")
	return u.Scheme + "://" + u.Host + p, nil
}

// fingerprint identifies everything about an endpoint that forces a new
// session when it changes; it is a hash so credentials do not linger in maps.
func (e Endpoint) fingerprint() [32]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%q\x00%q\x00%t\x00", e.Username, e.Password, e.InsecureSkipVerify)
	h.Write(e.CACert)
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// Pool keeps one connection (one session) per BMC and hands it out to every
// reconcile. It is safe for concurrent use.
type Pool struct {
	opts Options

	mu      sync.Mutex
	conns   map[string]*conn
	closing sync.WaitGroup
}

// NewPool returns an empty pool.
func NewPool(opts Options) *Pool {
	return &Pool{opts: opts.withDefaults(), conns: map[string]*conn{}}
}

// Get returns the connection for ep, creating it when missing or when the
// credentials or TLS settings changed (the old session is logged out in the
// background). It does no network I/O: the session is opened on first use.
func (p *Pool) Get(ep Endpoint) (BMC, error) {
	base, err := NormalizeAddress(ep.Address)
	if err != nil {
		return nil, err
	}
	fp := ep.fingerprint()

	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[base]; ok {
		if c.fingerprint == fp {
			return c, nil
		}
		p.retireLocked(base, c)
	}
	c, err := newConn(base, ep, fp, p.opts)
	if err != nil {
		return nil, err
	}
	p.conns[base] = c
	return c, nil
}

// Remove logs out of the BMC at address (if connected) and forgets it.
func (p *Pool) Remove(address string) {
	base, err := NormalizeAddress(address)
	if err != nil {
		return
	}
	p.mu.Lock()
	c, ok := p.conns[base]
	if ok {
		p.retireLocked(base, c)
	}
	p.mu.Unlock()
	p.closing.Wait()
}

// Close logs out of every BMC and waits for the logouts (bounded by the
// request timeout).
func (p *Pool) Close() {
	p.mu.Lock()
	for base, c := range p.conns {
		p.retireLocked(base, c)
	}
	p.mu.Unlock()
	p.closing.Wait()
}

// Len is the number of pooled connections.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

func (p *Pool) retireLocked(base string, c *conn) {
	delete(p.conns, base)
	p.closing.Add(1)
	go func() {
		defer p.closing.Done()
		c.close()
	}()
}

func newConn(base string, ep Endpoint, fp [32]byte, opts Options) (*conn, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: ep.InsecureSkipVerify} //nolint:gosec // explicit per-BMC opt-in
	if len(ep.CACert) > 0 {
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(ep.CACert) {
			return nil, wire.New(ReasonInvalidConfig, "load CA bundle", "no PEM certificate found in CA bundle")
		}
		tlsCfg.RootCAs = roots
	}
	dialer := &net.Dialer{Timeout: opts.RequestTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext:         dialer.DialContext,
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: opts.RequestTimeout,
		// One BMC per transport. Bursts may use MaxConcurrentRequests connections, but only
		// one is kept warm, and not for long: a fleet's steady state looks at a system every
		// few minutes, and each idle connection holds buffers and two goroutines (~40 KiB), which
		// across a thousand BMCs was most of the manager's memory.
		MaxIdleConnsPerHost: 1,
		MaxConnsPerHost:     opts.MaxConcurrentRequests,
		IdleConnTimeout:     20 * time.Second,
	}
	c := &conn{
		base:        base,
		ep:          ep,
		fingerprint: fp,
		opts:        opts,
		log:         opts.Logger.WithValues("bmc", base),
		transport:   tr,
		sem:         make(chan struct{}, opts.MaxConcurrentRequests),
		systems:     map[string]string{},
	}
	c.life, c.stop = context.WithCancel(context.Background())
	c.http = &http.Client{Transport: c}
	initMetrics(base)
	return c, nil
}

// acquire takes a slot of a channel semaphore unless ctx ends first.
func acquire(ctx context.Context, sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// String redacts the password so an Endpoint can be logged or printed.
func (e Endpoint) String() string {
	pw := ""
	if e.Password != "" {
		pw = "<redacted>"
	}
	return fmt.Sprintf("{Address:%s Username:%s Password:%s InsecureSkipVerify:%t CACert:%d bytes}", e.Address, e.Username, pw, e.InsecureSkipVerify, len(e.CACert))
}

// GoString redacts the password for %#v as well.
func (e Endpoint) GoString() string { return "bmc.Endpoint" + e.String() }

// CheckCredentials logs in to the BMC at ep with ep's credentials on a connection of its own
// (not pooled, logged out after) and reads the service: nil when they open it. A rotation
// proves the new password with it before the old one is given up.
func (p *Pool) CheckCredentials(ctx context.Context, ep Endpoint) error {
	base, err := NormalizeAddress(ep.Address)
	if err != nil {
		return err
	}
	c, err := newConn(base, ep, ep.fingerprint(), p.opts)
	if err != nil {
		return err
	}
	defer c.close()
	_, err = c.Accounts(ctx)
	if ReasonOf(err) == ReasonUnsupported {
		_, err = c.Systems(ctx)
	}
	return err
}

// Busy tells a background reader (telemetry) to leave the BMC at address alone this round: its
// breaker is open (it is failing fast), or half or more of its request slots are taken by the
// reconciles' work. A reader that skips it rather than queue behind that work never delays a
// reconcile nor adds to a BMC that struggles. A BMC not pooled yet is not busy. why is
// "unreachable" or "saturated".
func (p *Pool) Busy(address string) (busy bool, why string) {
	base, err := NormalizeAddress(address)
	if err != nil {
		return false, ""
	}
	p.mu.Lock()
	c := p.conns[base]
	p.mu.Unlock()
	if c == nil {
		return false, ""
	}
	c.brk.mu.Lock()
	open := !c.brk.openUntil.IsZero()
	c.brk.mu.Unlock()
	if open {
		return true, "unreachable"
	}
	if inUse := len(c.sem); inUse > 0 && inUse*2 >= cap(c.sem) {
		return true, "saturated"
	}
	return false, ""
}

package infrahub

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync"
	"time"
)

// DefaultCacheIdle is how long a client no pass asked for is kept.
const DefaultCacheIdle = 30 * time.Minute

// Cache keeps one Client per Infrahub URL and identity (user or API token),
// so reconciles reuse tokens and connections. When the credentials or
// settings for an identity change (a rotated Secret), the old client is
// replaced; a client no pass asked for in Idle (DefaultCacheIdle when zero) is
// dropped, so URLs and identities of deleted syncs do not pile up.
type Cache struct {
	Idle time.Duration
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time

	mu      sync.Mutex
	clients map[string]cached
}

type cached struct {
	fingerprint string
	client      *Client
	used        time.Time
}

// Get returns the cached client for cfg, building one if there is none or
// the configuration changed since.
func (c *Cache) Get(cfg Config) (*Client, error) {
	key, fp := cacheKey(cfg)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	c.evictLocked(now)
	if e, ok := c.clients[key]; ok && e.fingerprint == fp {
		e.used = now
		c.clients[key] = e
		return e.client, nil
	}
	cl, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if e, ok := c.clients[key]; ok {
		e.client.CloseIdleConnections()
	}
	if c.clients == nil {
		c.clients = map[string]cached{}
	}
	c.clients[key] = cached{fingerprint: fp, client: cl, used: now}
	return cl, nil
}

// evictLocked drops the clients not asked for in Idle (a sweep per Get: the map holds one entry
// per URL and identity, few).
func (c *Cache) evictLocked(now time.Time) {
	idle := c.Idle
	if idle <= 0 {
		idle = DefaultCacheIdle
	}
	for k, e := range c.clients {
		if now.Sub(e.used) > idle {
			e.client.CloseIdleConnections()
			delete(c.clients, k)
		}
	}
}

// Len reports how many clients are cached.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.clients)
}

// cacheKey: the key names the identity; the fingerprint covers everything
// else, secrets hashed so they never sit in a map key in clear.
func cacheKey(cfg Config) (key, fingerprint string) {
	id := "user:" + cfg.Username
	if cfg.APIToken != "" {
		id = "token:" + digest(cfg.APIToken)[:16]
	}
	key = cfg.URL + "|" + id
	fingerprint = digest(cfg.Password, cfg.APIToken, string(cfg.CABundle), strconv.FormatBool(cfg.Insecure),
		cfg.Timeout.String(), strconv.FormatInt(cfg.MaxBodyBytes, 10), cfg.TokenTTL.String())
	return key, fingerprint
}

func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(strconv.Itoa(len(p))))
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

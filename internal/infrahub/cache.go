package infrahub

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync"
)

// Cache keeps one Client per Infrahub URL and identity (user or API token),
// so reconciles reuse tokens and connections. When the credentials or
// settings for an identity change (a rotated Secret), the old client is
// replaced.
type Cache struct {
	mu      sync.Mutex
	clients map[string]cached
}

type cached struct {
	fingerprint string
	client      *Client
}

// Get returns the cached client for cfg, building one if there is none or
// the configuration changed since.
func (c *Cache) Get(cfg Config) (*Client, error) {
	key, fp := cacheKey(cfg)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.clients[key]; ok && e.fingerprint == fp {
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
	c.clients[key] = cached{fingerprint: fp, client: cl}
	return cl, nil
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

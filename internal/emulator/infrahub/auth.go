package infrahub

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// claims mirror the JWTs Infrahub issues; gen lets the emulator revoke all
// tokens of a kind at once.
type claims struct {
	Sub       string `json:"sub"`
	Iat       int64  `json:"iat"`
	Nbf       int64  `json:"nbf"`
	Exp       int64  `json:"exp"`
	Fresh     bool   `json:"fresh"`
	Type      string `json:"type"` // access | refresh
	SessionID string `json:"session_id"`
	Gen       int    `json:"gen"`
}

// auth holds users, API tokens and the signing key. Guarded by the Emulator's lock.
type auth struct {
	key        []byte
	users      map[string]string
	apiTokens  map[string]bool
	accessTTL  time.Duration
	refreshTTL time.Duration
	accessGen  int
	refreshGen int
}

func newAuth(o Options) *auth {
	a := &auth{
		key:        make([]byte, 32),
		users:      map[string]string{},
		apiTokens:  map[string]bool{},
		accessTTL:  o.AccessTokenTTL,
		refreshTTL: o.RefreshTokenTTL,
	}
	_, _ = rand.Read(a.key)
	for u, p := range o.Users {
		a.users[u] = p
	}
	for _, t := range o.APITokens {
		a.apiTokens[t] = true
	}
	return a
}

var b64 = base64.RawURLEncoding

func (a *auth) sign(c claims) string {
	head := b64.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	body, _ := json.Marshal(c)
	msg := head + "." + b64.EncodeToString(body)
	mac := hmac.New(sha256.New, a.key)
	mac.Write([]byte(msg))
	return msg + "." + b64.EncodeToString(mac.Sum(nil))
}

// issue returns a token of the given type for user. exp is rounded up to the
// next second so a token never lives shorter than its TTL.
func (a *auth) issue(user, typ, session string, now time.Time) string {
	ttl, gen := a.accessTTL, a.accessGen
	if typ == "refresh" {
		ttl, gen = a.refreshTTL, a.refreshGen
	}
	exp := now.Add(ttl)
	expSec := exp.Unix()
	if exp.Nanosecond() > 0 {
		expSec++
	}
	return a.sign(claims{
		Sub: user, Iat: now.Unix(), Nbf: now.Unix(), Exp: expSec,
		Fresh: typ == "access", Type: typ, SessionID: session, Gen: gen,
	})
}

// verify checks signature, type, expiry, revocation and that the user still
// exists; the error text is what Infrahub would answer.
func (a *auth) verify(tok, typ string, now time.Time) (claims, error) {
	var c claims
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return c, errors.New("Invalid token")
	}
	mac := hmac.New(sha256.New, a.key)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	sig, err := b64.DecodeString(parts[2])
	if err != nil || !hmac.Equal(sig, mac.Sum(nil)) {
		return c, errors.New("Invalid token")
	}
	body, err := b64.DecodeString(parts[1])
	if err != nil || json.Unmarshal(body, &c) != nil || c.Type != typ {
		return c, errors.New("Invalid token")
	}
	if now.Unix() >= c.Exp {
		return c, errors.New("Expired Signature")
	}
	gen := a.accessGen
	if typ == "refresh" {
		gen = a.refreshGen
	}
	if c.Gen != gen {
		return c, errors.New("Invalid token")
	}
	if _, ok := a.users[c.Sub]; !ok {
		return c, errors.New("Invalid token")
	}
	return c, nil
}

func newSessionID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return uuidFrom(string(b))
}

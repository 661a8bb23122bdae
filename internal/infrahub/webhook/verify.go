package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers Infrahub sends.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Why a delivery is refused.
var (
	ErrUnsigned     = errors.New("delivery is not signed")
	ErrMalformed    = errors.New("delivery is malformed")
	ErrStale        = errors.New("delivery timestamp is outside the tolerance")
	ErrBadSignature = errors.New("no signature matches a shared key")
)

// maxSignatures bounds the signatures one header may list (a sender rotating keys lists two).
const maxSignatures = 8

// Delivery is what a verified delivery's headers said.
type Delivery struct {
	ID        string
	Timestamp time.Time
	// Style is the rendering the signature matched; Raw when it signed the body's bytes.
	Style string
}

// Verify checks a delivery's signature against keys and its timestamp against now ± tolerance.
// A signature over the body's own bytes (what the Standard Webhooks specification asks) is
// accepted as well as Infrahub's re-rendered payload.
func Verify(h http.Header, body []byte, keys [][]byte, now time.Time, tolerance time.Duration) (Delivery, error) {
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return Delivery{}, ErrUnsigned
	}
	if len(id) > 256 || strings.ContainsAny(id, ". ") {
		return Delivery{}, fmt.Errorf("%w: webhook-id %.64q", ErrMalformed, id)
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return Delivery{}, fmt.Errorf("%w: webhook-timestamp %.32q", ErrMalformed, ts)
	}
	at := time.Unix(secs, 0)
	if d := now.Sub(at); d > tolerance || d < -tolerance {
		return Delivery{}, fmt.Errorf("%w: sent at %s, %s from now", ErrStale, at.UTC().Format(time.RFC3339), d.Round(time.Second))
	}
	var want [][]byte
	for i, f := range strings.Fields(sigs) {
		if i == maxSignatures {
			break
		}
		v, b64, ok := strings.Cut(f, ",")
		if !ok || v != "v1" {
			continue
		}
		if mac, err := base64.StdEncoding.DecodeString(b64); err == nil && len(mac) == sha256.Size {
			want = append(want, mac)
		}
	}
	if len(want) == 0 {
		return Delivery{}, fmt.Errorf("%w: no v1 signature in webhook-signature", ErrUnsigned)
	}
	candidates := []struct {
		style string
		text  func() ([]byte, error)
	}{
		{"raw", func() ([]byte, error) { return body, nil }},
		{PythonJSON.String(), func() ([]byte, error) { return Render(body, PythonJSON) }},
		{PythonJSONCompact.String(), func() ([]byte, error) { return Render(body, PythonJSONCompact) }},
		{PythonRepr.String(), func() ([]byte, error) { return Render(body, PythonRepr) }},
	}
	for _, c := range candidates {
		text, err := c.text()
		if err != nil {
			return Delivery{}, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		for _, k := range keys {
			got := mac(k, id, ts, text)
			for _, w := range want {
				if hmac.Equal(got, w) {
					return Delivery{ID: id, Timestamp: at, Style: c.style}, nil
				}
			}
		}
	}
	return Delivery{}, ErrBadSignature
}

func mac(key []byte, id, ts string, payload []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(payload)
	return m.Sum(nil)
}

// Sign returns the webhook-signature value of payload as signed text.
func Sign(key []byte, id string, at time.Time, payload []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, strconv.FormatInt(at.Unix(), 10), payload))
}

// SignAsInfrahub sets the headers Infrahub's standard webhook sends with body: the signature
// over the payload rendered as Python's json.dumps, not over body.
func SignAsInfrahub(h http.Header, key []byte, id string, at time.Time, body []byte) error {
	text, err := Render(body, PythonJSON)
	if err != nil {
		return err
	}
	h.Set("Accept", "application/json")
	h.Set("Content-Type", "application/json")
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	h.Set(HeaderSignature, Sign(key, id, at, text))
	return nil
}

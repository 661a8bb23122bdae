package infrahub

import (
	"encoding/base64"
	"testing"
	"time"
)

func TestJWTExpiry(t *testing.T) {
	enc := func(payload string) string {
		return "eyJhbGciOiJIUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".sig"
	}
	tests := []struct {
		name string
		tok  string
		want time.Time
		ok   bool
	}{
		{"integer exp", enc(`{"exp":1750000000}`), time.Unix(1750000000, 0), true},
		{"fractional exp", enc(`{"exp":1750000000.5}`), time.Unix(1750000000, 5e8), true},
		{"padded segment", "a." + base64.URLEncoding.EncodeToString([]byte(`{"exp":1750000000}`)) + ".s", time.Unix(1750000000, 0), true},
		{"no exp", enc(`{"sub":"admin"}`), time.Time{}, false},
		{"string exp", enc(`{"exp":"soon"}`), time.Time{}, false},
		{"opaque token", "not-a-jwt", time.Time{}, false},
		{"bad base64", "a.!!!.c", time.Time{}, false},
	}
	for _, tc := range tests {
		got, ok := jwtExpiry(tc.tok)
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("%s: jwtExpiry = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestOpaqueTokenUsesFallbackTTL(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	c, err := New(Config{URL: "http://x", Username: "u", Password: "p", TokenTTL: 10 * time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	c.tokens.store("opaque", "")
	if got := c.tokens.current(); got != "opaque" {
		t.Fatalf("fresh opaque token not used: %q", got)
	}
	now = now.Add(9*time.Minute + 30*time.Second) // inside the last tenth: renew early
	if got := c.tokens.current(); got != "" {
		t.Errorf("token still used %v before its assumed expiry", time.Minute/2)
	}
}

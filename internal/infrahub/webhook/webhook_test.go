package webhook_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/infrahub/webhook"
)

// vectors.json was written by testdata/gen.py with CPython: the bodies as httpx sends them, the
// texts Infrahub signs (json.dumps today, str() before) and their signatures.
type vector struct {
	Scheme    string `json:"scheme"`
	ID        string `json:"id"`
	Timestamp string `json:"timestamp"`
	Body      string `json:"body"`
	Signed    string `json:"signed"`
	Signature string `json:"signature"`
}

func vectors(t *testing.T) (string, []vector) {
	t.Helper()
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Key     string   `json:"key"`
		Vectors []vector `json:"vectors"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v.Key, v.Vectors
}

func headers(v vector) http.Header {
	h := http.Header{}
	h.Set(webhook.HeaderID, v.ID)
	h.Set(webhook.HeaderTimestamp, v.Timestamp)
	h.Set(webhook.HeaderSignature, v.Signature)
	return h
}

func sentAt(t *testing.T, v vector) time.Time {
	s, err := strconv.ParseInt(v.Timestamp, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Unix(s, 0)
}

func TestRenderMatchesPython(t *testing.T) {
	_, vs := vectors(t)
	for _, v := range vs {
		style := map[string]webhook.Style{"json": webhook.PythonJSON, "compact": webhook.PythonJSONCompact, "repr": webhook.PythonRepr}[v.Scheme]
		got, err := webhook.Render([]byte(v.Body), style)
		if err != nil {
			t.Fatalf("%s %s: %v", v.ID, v.Scheme, err)
		}
		if string(got) != v.Signed {
			t.Errorf("%s %s:\n got %s\nwant %s", v.ID, v.Scheme, got, v.Signed)
		}
	}
}

func TestVerify(t *testing.T) {
	key, vs := vectors(t)
	keys := [][]byte{[]byte("an-old-key"), []byte(key)}
	for _, v := range vs {
		now := sentAt(t, v).Add(30 * time.Second)
		d, err := webhook.Verify(headers(v), []byte(v.Body), keys, now, 5*time.Minute)
		if err != nil {
			t.Fatalf("%s %s: %v", v.ID, v.Scheme, err)
		}
		want := map[string]string{"json": "python-json", "compact": "python-json-compact", "repr": "python-repr"}[v.Scheme]
		if v.Signed == v.Body {
			want = "raw" // an ASCII payload signed compact is the body itself
		}
		if d.Style != want || d.ID != v.ID {
			t.Errorf("%s: matched %+v, want style %s", v.ID, d, want)
		}
	}

	v := vs[0]
	now := sentAt(t, v)
	cases := []struct {
		name string
		edit func(h http.Header, body *string, keys *[][]byte, now *time.Time)
		want error
	}{
		{"no signature", func(h http.Header, _ *string, _ *[][]byte, _ *time.Time) { h.Del(webhook.HeaderSignature) }, webhook.ErrUnsigned},
		{"no id", func(h http.Header, _ *string, _ *[][]byte, _ *time.Time) { h.Del(webhook.HeaderID) }, webhook.ErrUnsigned},
		{"v2 only", func(h http.Header, _ *string, _ *[][]byte, _ *time.Time) {
			h.Set(webhook.HeaderSignature, strings.Replace(h.Get(webhook.HeaderSignature), "v1,", "v2,", 1))
		}, webhook.ErrUnsigned},
		{"body changed", func(_ http.Header, b *string, _ *[][]byte, _ *time.Time) { *b = strings.Replace(*b, "abc", "abd", 1) }, webhook.ErrBadSignature},
		{"id changed", func(h http.Header, _ *string, _ *[][]byte, _ *time.Time) { h.Set(webhook.HeaderID, v.ID+"0") }, webhook.ErrBadSignature},
		{"timestamp moved", func(h http.Header, _ *string, _ *[][]byte, _ *time.Time) {
			h.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix()+1, 10))
		}, webhook.ErrBadSignature},
		{"other key", func(_ http.Header, _ *string, k *[][]byte, _ *time.Time) { *k = [][]byte{[]byte("not-it")} }, webhook.ErrBadSignature},
		{"stale", func(_ http.Header, _ *string, _ *[][]byte, n *time.Time) { *n = n.Add(6 * time.Minute) }, webhook.ErrStale},
		{"from the future", func(_ http.Header, _ *string, _ *[][]byte, n *time.Time) { *n = n.Add(-6 * time.Minute) }, webhook.ErrStale},
		{"bad timestamp", func(h http.Header, _ *string, _ *[][]byte, _ *time.Time) { h.Set(webhook.HeaderTimestamp, "soon") }, webhook.ErrMalformed},
		{"not JSON", func(_ http.Header, b *string, _ *[][]byte, _ *time.Time) { *b = "{" }, webhook.ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, body, keys, at := headers(v), v.Body, [][]byte{[]byte(key)}, now
			c.edit(h, &body, &keys, &at)
			if _, err := webhook.Verify(h, []byte(body), keys, at, 5*time.Minute); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

// The emulator signs with SignAsInfrahub: it must produce what CPython produced.
func TestSignAsInfrahub(t *testing.T) {
	key, vs := vectors(t)
	for _, v := range vs {
		if v.Scheme != "json" {
			continue
		}
		h := http.Header{}
		if err := webhook.SignAsInfrahub(h, []byte(key), v.ID, sentAt(t, v), []byte(v.Body)); err != nil {
			t.Fatal(err)
		}
		if got := h.Get(webhook.HeaderSignature); got != v.Signature {
			t.Errorf("%s: signature %s, CPython's %s", v.ID, got, v.Signature)
		}
	}
}

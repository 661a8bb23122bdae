package dashboard

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
)

//go:embed assets
var assetFS embed.FS

type asset struct {
	body        []byte
	contentType string
	etag        string
}

var assetTypes = map[string]string{
	"index.html": "text/html; charset=utf-8",
	"app.js":     "text/javascript; charset=utf-8",
	"style.css":  "text/css; charset=utf-8",
}

func loadAssets() (map[string]asset, error) {
	out := map[string]asset{}
	for name, ct := range assetTypes {
		b, err := assetFS.ReadFile("assets/" + name)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		out[name] = asset{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return out, nil
}

// asset serves an embedded file. no-cache with an ETag: the browser revalidates every load, so a
// new binary's page is never mixed with an old script, and an unchanged one costs a 304.
func (s *Server) asset(name string) http.HandlerFunc {
	a := s.assets[name]
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		if r.Header.Get("If-None-Match") == a.etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = w.Write(a.body)
	}
}

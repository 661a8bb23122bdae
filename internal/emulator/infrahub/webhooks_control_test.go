package infrahub

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestWebhookControlRoutes(t *testing.T) {
	r := newReceiver(t, nil)
	e := newEmulator(t)
	srv := httptest.NewServer(e)
	defer srv.Close()
	do := func(method, path, body string) (int, []byte) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if s, _ := do("POST", "/emulator/webhooks/redeliver?count=2", ""); s != http.StatusConflict {
		t.Errorf("redeliver before any event: %d, want 409", s)
	}
	if s, _ := do("POST", "/emulator/webhooks", `{"url":"`+r.srv.URL+`","shared_key":"k","branch_scope":"nope"}`); s != http.StatusBadRequest {
		t.Errorf("bad branch scope: %d, want 400", s)
	}
	if s, _ := do("POST", "/emulator/webhooks", `{"url":"ftp://x","shared_key":"k"}`); s != http.StatusBadRequest {
		t.Errorf("bad url: %d, want 400", s)
	}
	s, b := do("POST", "/emulator/webhooks", `{"url":"`+r.srv.URL+`","shared_key":"k","event_type":"infrahub.artifact.created"}`)
	var added struct{ ID string }
	if _ = json.Unmarshal(b, &added); s != http.StatusOK || added.ID == "" {
		t.Fatalf("add webhook: %d %s", s, b)
	}
	if s, b := do("POST", "/emulator/artifacts", `{"name":"x","content":"dg=="}`); s != http.StatusOK {
		t.Fatalf("change: %d %s", s, b)
	}
	if s, b := do("POST", "/emulator/webhooks/redeliver?count=2", ""); s != http.StatusOK || !strings.Contains(string(b), `"queued":2`) {
		t.Errorf("redeliver: %d %s", s, b)
	}
	wait(t, e, 3)
	s, b = do("GET", "/emulator/webhooks/deliveries", "")
	var log struct {
		Deliveries []WebhookDelivery
		Total      int
	}
	if err := json.Unmarshal(b, &log); err != nil || s != 200 || log.Total != 3 || len(log.Deliveries) != 3 {
		t.Fatalf("deliveries: %d %s", s, b)
	}
	for _, d := range log.Deliveries {
		if d.WebhookID != added.ID || d.Event != EventArtifactCreated || d.Status != 200 || d.Attempts != 1 || !msgID.MatchString(d.MessageID) {
			t.Errorf("delivery %+v", d)
		}
	}
	if s, _ := do("DELETE", "/emulator/webhooks/"+added.ID, ""); s != http.StatusNoContent {
		t.Errorf("delete: %d", s)
	}
	if s, _ := do("DELETE", "/emulator/webhooks/"+added.ID, ""); s != http.StatusNotFound {
		t.Errorf("delete again: %d, want 404", s)
	}
	if s, b := do("POST", "/emulator/webhooks/redeliver", ""); s != http.StatusOK || !strings.Contains(string(b), `"queued":0`) {
		t.Errorf("redeliver with no webhook: %d %s", s, b)
	}
}

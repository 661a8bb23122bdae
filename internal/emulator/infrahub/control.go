package infrahub

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// controlRoutes expose the run-time controls over HTTP for dev mode and
// out-of-process benchmarks. They need no authentication.
//
//	GET    /emulator/requests            {"requests":[...],"counters":{...}}
//	DELETE /emulator/requests            reset log and counters
//	GET    /emulator/artifacts?branch=&at=   artifacts (with content) as of at
//	POST   /emulator/artifacts           body: Change; answers the Artifact
//	PUT    /emulator/faults/{class}      body: {"kind":"latency","latency":"2s","status":503,"times":1}
//	DELETE /emulator/faults              clear all faults
//	POST   /emulator/revoke?sessions=true   revoke access tokens (and refresh tokens)
//	POST   /emulator/webhooks            body: Webhook; answers {"id":"..."}
//	DELETE /emulator/webhooks/{id}       unregister a webhook (404 if unknown)
//	GET    /emulator/webhooks/deliveries {"deliveries":[WebhookDelivery...],"total":N}
//	POST   /emulator/webhooks/redeliver?count=N   resend the last artifact event N times (default 1);
//	                                     answers {"queued":N}, 409 before any artifact event
//	POST   /emulator/proposed-changes    body: {"name":"...","source_branch":"...","destination_branch":"..."}
//	                                     (destination "" = main); opens one, answers {"id":"..."}
//	PUT    /emulator/proposed-changes/{id}/state   body: {"state":"open|merged|closed|canceled"};
//	                                     204, 404 if unknown, 400 for another state
//	GET    /emulator/proposed-changes/{id}/comments   {"comments":[Comment...]}, oldest first
//
// Those proposed changes and their comments are served to clients by POST /graphql (proposed.go).
func (e *Emulator) controlRoutes(m *http.ServeMux) {
	m.HandleFunc("GET /emulator/requests", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"requests": e.Requests(), "counters": e.Counters()})
	})
	m.HandleFunc("DELETE /emulator/requests", func(w http.ResponseWriter, r *http.Request) {
		e.ResetRequests()
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("GET /emulator/artifacts", func(w http.ResponseWriter, r *http.Request) {
		at := time.Time{}
		if v := r.URL.Query().Get("at"); v != "" {
			t, err := ParseAt(v, e.now())
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			at = t
		}
		arts, err := e.Artifacts(r.URL.Query().Get("branch"), at)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"artifacts": arts})
	})
	m.HandleFunc("POST /emulator/artifacts", func(w http.ResponseWriter, r *http.Request) {
		var ch Change
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&ch); err != nil {
			http.Error(w, "invalid change: "+err.Error(), http.StatusBadRequest)
			return
		}
		if ch.Branch != "" {
			_ = e.AddBranch(ch.Branch)
		}
		a, err := e.Apply(ch)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, http.StatusOK, a)
	})
	m.HandleFunc("PUT /emulator/faults/{class}", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Kind    FaultKind `json:"kind"`
			Latency string    `json:"latency"`
			Status  int       `json:"status"`
			Times   int       `json:"times"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil {
			http.Error(w, "invalid fault: "+err.Error(), http.StatusBadRequest)
			return
		}
		f := Fault{Kind: in.Kind, Status: in.Status, Times: in.Times}
		if in.Latency != "" {
			d, err := time.ParseDuration(in.Latency)
			if err != nil {
				http.Error(w, "invalid latency: "+err.Error(), http.StatusBadRequest)
				return
			}
			f.Latency = d
		}
		c := Class(r.PathValue("class"))
		switch c {
		case ClassAll, ClassAuth, ClassQuery, ClassArtifact, ClassGraphQL:
		default:
			http.Error(w, fmt.Sprintf("unknown class %q (all, auth, query, artifact, graphql)", c), http.StatusBadRequest)
			return
		}
		switch f.Kind {
		case FaultLatency, FaultStatus, FaultHang, FaultDrop:
		default:
			http.Error(w, fmt.Sprintf("unknown fault kind %q (latency, status, hang, drop)", f.Kind), http.StatusBadRequest)
			return
		}
		e.SetFault(c, f)
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("DELETE /emulator/faults", func(w http.ResponseWriter, r *http.Request) {
		e.ClearFaults()
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("POST /emulator/revoke", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("sessions") == "true" {
			e.RevokeSessions()
		} else {
			e.RevokeAccessTokens()
		}
		w.WriteHeader(http.StatusNoContent)
	})
	e.webhookRoutes(m)
}

func (e *Emulator) webhookRoutes(m *http.ServeMux) {
	m.HandleFunc("POST /emulator/webhooks", func(w http.ResponseWriter, r *http.Request) {
		var in Webhook
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil {
			http.Error(w, "invalid webhook: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := in.normalize(); err != nil { // AddWebhook would panic on it
			http.Error(w, "invalid webhook: "+err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"id": e.AddWebhook(in)})
	})
	m.HandleFunc("DELETE /emulator/webhooks/{id}", func(w http.ResponseWriter, r *http.Request) {
		if !e.RemoveWebhook(r.PathValue("id")) {
			http.Error(w, "unknown webhook", http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("GET /emulator/webhooks/deliveries", func(w http.ResponseWriter, r *http.Request) {
		ds, total := e.WebhookDeliveries()
		writeJSON(w, http.StatusOK, map[string]any{"deliveries": ds, "total": total})
	})
	m.HandleFunc("POST /emulator/webhooks/redeliver", func(w http.ResponseWriter, r *http.Request) {
		n := 1
		if v := r.URL.Query().Get("count"); v != "" {
			c, err := strconv.Atoi(v)
			if err != nil || c < 0 || c > maxRedeliver {
				http.Error(w, fmt.Sprintf("count must be a number from 0 to %d", maxRedeliver), http.StatusBadRequest)
				return
			}
			n = c
		}
		queued, err := e.Redeliver(n)
		switch {
		case errors.Is(err, ErrNoEvent):
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		default:
			writeJSON(w, http.StatusOK, map[string]int{"queued": queued})
		}
	})
}

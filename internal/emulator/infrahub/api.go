package infrahub

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

func (e *Emulator) handleLogin(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil || in.Username == "" || in.Password == "" {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": "username and password are required"})
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	pw, ok := e.auth.users[in.Username]
	switch {
	case !ok: // Infrahub answers 404 for an unknown account
		writeErrors(w, http.StatusNotFound, fmt.Sprintf("Unable to find the account %s", in.Username))
		return
	case pw != in.Password:
		writeErrors(w, http.StatusUnauthorized, "Incorrect password")
		return
	}
	now, session := e.now(), newSessionID()
	writeJSON(w, http.StatusOK, map[string]string{
		"access_token":  e.auth.issue(in.Username, "access", session, now),
		"refresh_token": e.auth.issue(in.Username, "refresh", session, now),
	})
}

func (e *Emulator) handleRefresh(w http.ResponseWriter, r *http.Request) {
	tok, ok := bearer(r)
	if !ok {
		writeErrors(w, http.StatusUnauthorized, "A JWT refresh token is required to perform this operation.")
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	c, err := e.auth.verify(tok, "refresh", now)
	if err != nil {
		writeErrors(w, http.StatusUnauthorized, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"access_token": e.auth.issue(c.Sub, "access", c.SessionID, now)})
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:]), true
	}
	return "", false
}

// authenticate checks Bearer JWT or X-INFRAHUB-KEY; on failure it has
// answered 401. Caller holds e.mu.
func (e *Emulator) authenticate(w http.ResponseWriter, r *http.Request) bool {
	if tok, ok := bearer(r); ok {
		if _, err := e.auth.verify(tok, "access", e.now()); err != nil {
			writeErrors(w, http.StatusUnauthorized, err.Error())
			return false
		}
		return true
	}
	if key := r.Header.Get("X-INFRAHUB-KEY"); key != "" {
		if !e.auth.apiTokens[key] {
			writeErrors(w, http.StatusUnauthorized, "Invalid token")
			return false
		}
		return true
	}
	if e.opt.AllowAnonymousRead && r.Method == http.MethodGet {
		return true
	}
	writeErrors(w, http.StatusUnauthorized, "Authentication is required")
	return false
}

// branchAt resolves the branch and at parameters; on failure it has answered.
// Caller holds e.mu.
func (e *Emulator) branchAt(w http.ResponseWriter, r *http.Request) (string, time.Time, bool) {
	branch := r.URL.Query().Get("branch")
	if branch == "" {
		branch = MainBranch
	}
	if !e.store.branches[branch] {
		writeErrors(w, http.StatusBadRequest, fmt.Sprintf("Branch: %s not found.", branch))
		return "", time.Time{}, false
	}
	at, err := ParseAt(r.URL.Query().Get("at"), e.now())
	if err != nil {
		writeErrors(w, http.StatusUnprocessableEntity, err.Error())
		return "", time.Time{}, false
	}
	return branch, at, true
}

func (e *Emulator) handleQuery(w http.ResponseWriter, r *http.Request) {
	names, filtered, err := artifactNames(r)
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": err.Error()})
		return
	}
	status, body := e.runQuery(w, r, names, filtered)
	if body != nil {
		writeJSON(w, status, body)
	}
}

// runQuery evaluates a stored query under the lock; the answer is written
// after it is released so a slow reader cannot stall the emulator. A nil
// body means the answer (an error) was already written.
func (e *Emulator) runQuery(w http.ResponseWriter, r *http.Request, names map[string]bool, filtered bool) (int, any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.authenticate(w, r) {
		return 0, nil
	}
	branch, at, ok := e.branchAt(w, r)
	if !ok {
		return 0, nil
	}
	name := r.PathValue("name")
	failures, known := e.queries[name]
	switch {
	case !known:
		writeErrors(w, http.StatusNotFound, fmt.Sprintf("Unable to find the CoreGraphQLQuery %s", name))
		return 0, nil
	case len(failures) > 0:
		errs := make([]map[string]any, 0, len(failures))
		for _, m := range failures {
			errs = append(errs, map[string]any{"message": m, "path": []string{"CoreArtifact"}})
		}
		return http.StatusBadGateway, map[string]any{"data": nil, "errors": errs}
	}
	edges := []any{}
	for _, a := range e.store.list(branch, at) {
		if filtered && !names[a.Name] {
			continue
		}
		edges = append(edges, map[string]any{"node": map[string]any{
			"id":         a.ID,
			"storage_id": map[string]any{"id": a.StorageID},
			"checksum":   map[string]any{"value": a.Checksum},
			"name":       map[string]any{"value": a.Name},
		}})
	}
	count := len(edges)
	if e.dropEdges > 0 {
		edges = edges[:max(0, len(edges)-e.dropEdges)]
	}
	return http.StatusOK, map[string]any{"data": map[string]any{"CoreArtifact": map[string]any{"count": count, "edges": edges}}}
}

// artifactNames reads the artifactname variable ([String]: a single string
// is coerced to a list, null or absent means no filter), from the JSON body
// of a POST or the query string of a GET.
func artifactNames(r *http.Request) (map[string]bool, bool, error) {
	var raw json.RawMessage
	if r.Method == http.MethodGet {
		vals, ok := r.URL.Query()["artifactname"]
		if !ok {
			return nil, false, nil
		}
		out := map[string]bool{}
		for _, v := range vals {
			out[v] = true
		}
		return out, true, nil
	}
	var in struct {
		Variables map[string]json.RawMessage `json:"variables"`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return nil, false, err
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, false, fmt.Errorf("invalid JSON body: %w", err)
		}
	}
	raw = in.Variables["artifactname"]
	if len(raw) == 0 || string(raw) == "null" {
		return nil, false, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		var one string
		if err := json.Unmarshal(raw, &one); err != nil {
			return nil, false, fmt.Errorf("variable artifactname must be a string or a list of strings")
		}
		list = []string{one}
	}
	out := map[string]bool{}
	for _, v := range list {
		out[v] = true
	}
	return out, true, nil
}

func (e *Emulator) handleArtifact(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	if !e.authenticate(w, r) {
		e.mu.Unlock()
		return
	}
	branch, at, ok := e.branchAt(w, r)
	if !ok {
		e.mu.Unlock()
		return
	}
	id := r.PathValue("id")
	a := e.store.resolve(branch, id, at)
	e.mu.Unlock()
	if a == nil {
		writeErrors(w, http.StatusNotFound, fmt.Sprintf("Unable to find the node %s / CoreArtifact in the database.", id))
		return
	}
	w.Header().Set("Content-Type", a.ContentType)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(a.Content) // versions are immutable once recorded: safe without the lock
}

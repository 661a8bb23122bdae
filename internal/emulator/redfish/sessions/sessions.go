// Package sessions is one emulated BMC's SessionService: sessions created by login up to a limit,
// expired when idle, listed and deleted, the X-Auth-Token and Basic checks every request goes
// through, and their counters.
//
// Whose credentials are valid is the caller's to say; it must not import the emulator package.
package sessions

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
)

const v1 = rfhttp.V1

// Store holds one BMC's sessions.
type Store struct {
	// limit caps open sessions; timeout expires idle ones.
	limit   int
	timeout time.Duration

	mu      sync.Mutex
	byToken map[string]*session
	next    int

	// Created, Deleted and Unauthorized count logins, logouts and refused requests (Stats).
	Created, Deleted, Unauthorized atomic.Int64
}

// NewStore makes an empty store.
func NewStore(maxSessions int, timeout time.Duration) *Store {
	return &Store{limit: maxSessions, timeout: timeout, byToken: map[string]*session{}}
}

// Active is how many sessions are open.
func (st *Store) Active() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.byToken)
}

// Expire deletes every open session and returns how many were open.
func (st *Store) Expire() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := len(st.byToken)
	clear(st.byToken)
	return n
}

// session is one Redfish session.
type session struct {
	id, token, user string
	lastUsed        time.Time
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Authorize lets a request through with a live session's token or credentials validLogin takes;
// refuse (Faults.Unauthorized) refuses every one.
func (st *Store) Authorize(w http.ResponseWriter, r *http.Request, refuse bool, validLogin func(user, password string) bool) bool {
	if !refuse {
		if tok := r.Header.Get("X-Auth-Token"); tok != "" {
			now := time.Now()
			st.mu.Lock()
			s, ok := st.byToken[tok]
			if ok && now.Sub(s.lastUsed) > st.timeout {
				delete(st.byToken, tok)
				ok = false
			}
			if ok {
				s.lastUsed = now
			}
			st.mu.Unlock()
			if ok {
				return true
			}
		} else if u, p, ok := r.BasicAuth(); ok && validLogin(u, p) {
			return true
		}
	}
	st.Unauthorized.Add(1)
	w.Header().Set("WWW-Authenticate", `Basic realm="Redfish"`)
	rfhttp.WriteError(w, http.StatusUnauthorized, "InsufficientPrivilege", "There are insufficient privileges for the account or credentials associated with the current session to perform the requested operation.")
	return false
}

// Login creates a session for credentials validLogin takes, up to the session limit.
func (st *Store) Login(w http.ResponseWriter, r *http.Request, refuse bool, validLogin func(user, password string) bool) {
	var req struct{ UserName, Password string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		rfhttp.WriteError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON.")
		return
	}
	if refuse || !validLogin(req.UserName, req.Password) {
		st.Unauthorized.Add(1)
		rfhttp.WriteError(w, http.StatusUnauthorized, "ResourceAtURIUnauthorized", "While accessing the resource at /redfish/v1/SessionService/Sessions, the service received an authorization error.")
		return
	}
	st.mu.Lock()
	if len(st.byToken) >= st.limit {
		st.mu.Unlock()
		rfhttp.WriteError(w, http.StatusServiceUnavailable, "SessionLimitExceeded", "The session establishment failed due to the number of simultaneous sessions exceeding the limit of the implementation.")
		return
	}
	st.next++
	s := &session{id: strconv.Itoa(st.next) + "-" + randomHex(4), token: randomHex(16), user: req.UserName, lastUsed: time.Now()}
	st.byToken[s.token] = s
	st.mu.Unlock()
	st.Created.Add(1)
	loc := v1 + "/SessionService/Sessions/" + s.id
	w.Header().Set("X-Auth-Token", s.token)
	w.Header().Set("Location", loc)
	rfhttp.WriteJSON(w, http.StatusCreated, sessionBody(s))
}

func sessionBody(s *session) rfhttp.Obj {
	return rfhttp.Obj{
		"@odata.type": "#Session.v1_3_0.Session", "@odata.id": v1 + "/SessionService/Sessions/" + s.id,
		"Id": s.id, "Name": "User Session", "UserName": s.user,
	}
}

// Route serves the SessionService and its Sessions (listed, read, deleted).
func (st *Store) Route(w http.ResponseWriter, r *http.Request, segs []string) {
	base := v1 + "/SessionService"
	switch {
	case len(segs) == 0:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Obj{
				"@odata.type": "#SessionService.v1_1_8.SessionService", "@odata.id": base, "Id": "SessionService",
				"Name": "Session Service", "ServiceEnabled": true, "SessionTimeout": int(st.timeout.Seconds()),
				"Sessions": rfhttp.Link(base + "/Sessions"),
			})
		}
	case len(segs) == 1 && segs[0] == "Sessions":
		if rfhttp.MethodIs(w, r, http.MethodGet, http.MethodPost) {
			st.mu.Lock()
			var ids []string
			for _, s := range st.byToken {
				ids = append(ids, base+"/Sessions/"+s.id)
			}
			st.mu.Unlock()
			slices.Sort(ids)
			rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Collection(base+"/Sessions", "SessionCollection", "Session Collection", ids))
		}
	case len(segs) == 2 && segs[0] == "Sessions":
		if !rfhttp.MethodIs(w, r, http.MethodGet, http.MethodDelete) {
			return
		}
		st.mu.Lock()
		var found *session
		for _, s := range st.byToken {
			if s.id == segs[1] {
				found = s
				break
			}
		}
		if found != nil && r.Method == http.MethodDelete {
			delete(st.byToken, found.token)
		}
		st.mu.Unlock()
		switch {
		case found == nil:
			rfhttp.NotFound(w, r)
		case r.Method == http.MethodDelete:
			st.Deleted.Add(1)
			w.WriteHeader(http.StatusNoContent)
		default:
			rfhttp.WriteJSON(w, http.StatusOK, sessionBody(found))
		}
	default:
		rfhttp.NotFound(w, r)
	}
}

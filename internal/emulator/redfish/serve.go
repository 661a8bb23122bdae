package redfish

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
)

// obj is a JSON object as the handlers build them.
type obj = rfhttp.Obj

const v1 = rfhttp.V1

type viaKey struct{}

// via is the address a request was sent to when it is not b's own (AnswerAs), else "".
func via(r *http.Request, b *BMC) string {
	if v, ok := r.Context().Value(viaKey{}).(string); ok && v != b.url {
		return v
	}
	return ""
}

// ServeHTTP is one BMC's Redfish service: stats, faults, auth, then routing.
func (b *BMC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if o := b.answeredBy.Load(); o != nil && o != b {
		// The address now reaches another BMC (AnswerAs): it answers, not this one. Its records
		// say which address the request was sent to.
		o.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), viaKey{}, b.url)))
		return
	}
	b.requests.Add(1)
	if b.journal.On.Load() {
		defer b.journal.Add(r, time.Now())
	}
	if !b.rebooting() {
		// A request slot, then the answer time while holding it (Options.Latency); a BMC that
		// is down drops the request below without either.
		release, ok := b.admit(r)
		if !ok {
			return
		}
		defer release()
	}
	n := b.inFlight.Add(1)
	defer b.inFlight.Add(-1)
	raise(&b.maxInFlight, n)

	f := b.faults.Load()
	if f.Latency > 0 {
		t := time.NewTimer(time.Duration(f.Latency))
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		case <-b.em.closing:
			t.Stop()
			return
		}
	}
	if f.DropConnection {
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // closes the connection where hijack is impossible
	}
	if f.Hang {
		select {
		case <-r.Context().Done():
		case <-b.em.closing:
		}
		return
	}
	if f.CloseConnections {
		w.Header().Set("Connection", "close")
	}
	if b.rebooting() {
		// Flashing done, the BMC restarts: nothing answers, as on a real one.
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	if f.Status != 0 {
		rfhttp.WriteError(w, f.Status, "InternalError", "The request failed due to an internal service error.")
		return
	}
	b.route(w, r, f)
}

func (b *BMC) route(w http.ResponseWriter, r *http.Request, f *Faults) {
	path := strings.TrimRight(r.URL.Path, "/")
	if path == "/redfish" {
		rfhttp.WriteJSON(w, http.StatusOK, obj{"v1": v1 + "/"})
		return
	}
	if path != v1 && !strings.HasPrefix(path, v1+"/") {
		rfhttp.WriteError(w, http.StatusNotFound, "ResourceMissingAtURI", "The resource at the URI "+r.URL.Path+" was not found.")
		return
	}
	var segs []string
	if rest := strings.TrimPrefix(path, v1); rest != "" {
		segs = strings.Split(rest[1:], "/")
	}
	// The service root is readable without credentials, as the spec asks.
	if len(segs) == 0 {
		if !rfhttp.MethodIs(w, r, http.MethodGet) {
			return
		}
		rfhttp.WriteJSON(w, http.StatusOK, b.serviceRoot(f))
		return
	}
	if segs[0] == "SessionService" && f.NoSessionService {
		rfhttp.WriteError(w, http.StatusNotFound, "ResourceMissingAtURI", "The resource at the URI "+r.URL.Path+" was not found.")
		return
	}
	if len(segs) == 2 && segs[0] == "SessionService" && segs[1] == "Sessions" && r.Method == http.MethodPost {
		b.login(w, r, f)
		return
	}
	if !b.authorize(w, r, f) {
		return
	}
	for i, s := range segs {
		// IDs sit at odd positions; collection names at even ones.
		if code, ok := f.BrokenCollections[s]; ok && i%2 == 0 && code != 0 {
			rfhttp.WriteError(w, code, "InternalError", "The collection "+s+" is not available.")
			return
		}
	}
	switch segs[0] {
	case "Systems":
		b.routeSystems(w, r, segs[1:], f)
	case "Managers":
		b.routeManagers(w, r, segs[1:], f)
	case "Chassis":
		b.routeChassis(w, r, segs[1:])
	case "SessionService":
		b.routeSessions(w, r, segs[1:])
	case "AccountService":
		b.routeAccounts(w, r, segs[1:])
	case "CertificateService":
		b.routeCertificates(w, r, segs[1:], f)
	case "UpdateService":
		b.upd.Route(w, r, segs[1:], f)
	case "EventService":
		if f.NoEventService {
			rfhttp.NotFound(w, r)
			return
		}
		b.routeEvents(w, r, segs[1:])
	case "TaskService":
		if len(segs) < 3 {
			b.upd.RouteTasks(w, r, segs[1:], b.Faults())
			return
		}
		if len(segs) == 3 && segs[1] == "Tasks" && rfhttp.MethodIs(w, r, http.MethodGet) {
			if b.upd.ServeTask(w, segs[2]) {
				return
			}
			rfhttp.WriteJSON(w, http.StatusOK, obj{
				"@odata.type": "#Task.v1_4_3.Task", "@odata.id": path, "Id": segs[2], "Name": "Task " + segs[2],
				"TaskState": "Completed", "TaskStatus": "OK", "PercentComplete": 100,
			})
			return
		}
		rfhttp.NotFound(w, r)
	default:
		rfhttp.NotFound(w, r)
	}
}

func (b *BMC) serviceRoot(f *Faults) obj {
	root := obj{
		"@odata.type": "#ServiceRoot.v1_11_0.ServiceRoot", "@odata.id": v1 + "/",
		"Id": "RootService", "Name": "Root Service", "RedfishVersion": "1.11.0",
		"UUID": b.mgrUUID, "Vendor": b.profile.Manufacturer, "Product": b.mgrModel,
		"Systems": rfhttp.Link(v1 + "/Systems"), "Managers": rfhttp.Link(v1 + "/Managers"), "Chassis": rfhttp.Link(v1 + "/Chassis"),
		"AccountService": rfhttp.Link(v1 + "/AccountService"),
		"UpdateService":  rfhttp.Link(v1 + "/UpdateService"),
		"Tasks":          rfhttp.Link(v1 + "/TaskService"),
		"Links":          obj{},
	}
	if !f.NoEventService {
		root["EventService"] = rfhttp.Link(v1 + "/EventService")
	}
	if !f.NoCertificateService {
		root["CertificateService"] = rfhttp.Link(v1 + "/CertificateService")
	}
	if !f.NoSessionService {
		root["SessionService"] = rfhttp.Link(v1 + "/SessionService")
		root["Links"] = obj{"Sessions": rfhttp.Link(v1 + "/SessionService/Sessions")}
	}
	return root
}

// authorize lets a request through with a live session's token or valid Basic credentials.
func (b *BMC) authorize(w http.ResponseWriter, r *http.Request, f *Faults) bool {
	return b.sess.Authorize(w, r, f.Unauthorized, b.validLogin)
}

// login creates a session (POST to Sessions).
func (b *BMC) login(w http.ResponseWriter, r *http.Request, f *Faults) {
	b.sess.Login(w, r, f.Unauthorized, b.validLogin)
}

// routeSessions serves the SessionService and its Sessions.
func (b *BMC) routeSessions(w http.ResponseWriter, r *http.Request, segs []string) {
	b.sess.Route(w, r, segs)
}

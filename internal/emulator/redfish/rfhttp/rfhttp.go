// Package rfhttp writes Redfish answers as BMCs shape them: JSON bodies with their headers,
// Base registry errors, collections and their members, method checks. It holds no BMC state
// and must not import the emulator or its service packages.
package rfhttp

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Obj is a JSON object as the handlers build them.
type Obj = map[string]any

// V1 is the root of every Redfish path.
const V1 = "/redfish/v1"

// Link is a Redfish reference to path.
func Link(path string) Obj { return Obj{"@odata.id": path} }

func MethodIs(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	if slices.Contains(methods, r.Method) {
		return true
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	WriteError(w, http.StatusMethodNotAllowed, "OperationNotAllowed", "The HTTP method "+r.Method+" is not allowed for "+r.URL.Path+".")
	return false
}

func NotFound(w http.ResponseWriter, r *http.Request) {
	WriteError(w, http.StatusNotFound, "ResourceMissingAtURI", "The resource at the URI "+r.URL.Path+" was not found.")
}

func Collection(path, typ, name string, members []string) Obj {
	ms := make([]Obj, len(members))
	for i, m := range members {
		ms[i] = Link(m)
	}
	return Obj{
		"@odata.type": "#" + typ + "." + typ, "@odata.id": path, "Name": name,
		"Members": ms, "Members@odata.count": len(ms),
	}
}

// ServeCollection answers a collection members can be POSTed to: GET lists the members (their
// @odata.ids), POST creates one; any other method is refused.
func ServeCollection(w http.ResponseWriter, r *http.Request, path, typ, name string, members func() []string, create http.HandlerFunc) {
	if !MethodIs(w, r, http.MethodGet, http.MethodPost) {
		return
	}
	if r.Method == http.MethodPost {
		create(w, r)
		return
	}
	WriteJSON(w, http.StatusOK, Collection(path, typ, name, members()))
}

func WriteJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("OData-Version", "4.0")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func WriteError(w http.ResponseWriter, code int, msgID, msg string) {
	WriteJSON(w, code, Obj{"error": Obj{
		"code": "Base.1.8.GeneralError", "message": "A general error has occurred. See ExtendedInfo for more information.",
		"@Message.ExtendedInfo": []Obj{{
			"@odata.type": "#Message.v1_1_1.Message", "MessageId": "Base.1.8." + msgID, "Message": msg, "Severity": "Critical",
		}},
	}})
}

func SuccessBody() Obj {
	return Obj{"@Message.ExtendedInfo": []Obj{{"MessageId": "Base.1.8.Success", "Message": "Successfully Completed Request", "Severity": "OK"}}}
}

// ServeMembers serves a collection and its members by Id.
func ServeMembers(w http.ResponseWriter, r *http.Request, base, typ, name string, rest []string, n int, id func(int) string, body func(int, string) Obj) {
	if !MethodIs(w, r, http.MethodGet) {
		return
	}
	switch len(rest) {
	case 0:
		paths := make([]string, n)
		for i := range n {
			paths[i] = base + "/" + id(i)
		}
		WriteJSON(w, http.StatusOK, Collection(base, typ, name, paths))
		return
	case 1:
		for i := range n {
			if id(i) == rest[0] {
				WriteJSON(w, http.StatusOK, body(i, base+"/"+rest[0]))
				return
			}
		}
	}
	NotFound(w, r)
}

func Status(state string) Obj { return Obj{"State": state, "Health": "OK"} }

// NonNil makes an empty list read [] rather than null.
func NonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/fleetops"
)

// ActionHeader must accompany every write: a plain cross-site form or image cannot set it, and
// a cross-site fetch that does needs a CORS preflight the dashboard never grants.
const ActionHeader = "X-Metalhub-Action"

// ActionResult answers a write.
type ActionResult struct {
	Message string `json:"message"`
	Changed bool   `json:"changed"`
	// Token names a power request; its outcome shows in the server's annotations and events.
	Token string `json:"token,omitempty"`
}

// allowWrite refuses writes to server name unless actions are on, the request comes from the
// page itself and, when authentication is configured, carries a token allowed to write. It
// returns who acts, for the log.
func (s *Server) allowWrite(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	if !s.opts.AllowActions {
		writeError(w, http.StatusForbidden, "the dashboard is read-only: start it with --allow-actions to change servers")
		return "", false
	}
	if r.Header.Get(ActionHeader) != "1" {
		writeError(w, http.StatusForbidden, "missing "+ActionHeader+" header")
		return "", false
	}
	// https: the page served through a TLS proxy in front, which keeps the Host.
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
		writeError(w, http.StatusForbidden, "cross-site request refused")
		return "", false
	}
	if s.auth == nil {
		return "", true
	}
	who, aerr := s.auth.authorize(r.Context(), r, name)
	if aerr != nil {
		s.log.Info("dashboard action refused", "server", name, "path", r.URL.Path, "remote", r.RemoteAddr, "code", aerr.code, "reason", aerr.msg)
		if aerr.code == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metalhub dashboard"`)
		}
		writeError(w, aerr.code, aerr.msg)
		return "", false
	}
	return who, true
}

func (s *Server) handleAction(w http.ResponseWriter, r *http.Request) {
	name, action := r.PathValue("name"), r.PathValue("action")
	who, ok := s.allowWrite(w, r, name)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	var changed bool
	var err error
	switch action {
	case "cordon", "uncordon":
		changed, err = fleetops.SetUnclaimable(ctx, s.c, name, action == "cordon")
	case "park", "unpark":
		changed, err = fleetops.Park(ctx, s.c, name, action == "park")
	default:
		writeError(w, http.StatusNotFound, "unknown action "+strconv.Quote(action)+": cordon, uncordon, park or unpark")
		return
	}
	if err != nil {
		s.writeActionError(w, name, action, err)
		return
	}
	msg := fmt.Sprintf("%s: %s requested", name, action)
	switch {
	case !changed:
		msg = fmt.Sprintf("%s: nothing to do (already %sed)", name, action)
		if action == "park" || action == "unpark" {
			msg = fmt.Sprintf("%s: nothing to do (already %s)", name, map[string]string{"park": "parked", "unpark": "not parked"}[action])
		}
	case action == "cordon" || action == "uncordon":
		msg = fmt.Sprintf("%s: %sed", name, action)
	}
	s.log.Info("dashboard action", "server", name, "action", action, "changed", changed, "by", who)
	writeJSON(w, http.StatusOK, ActionResult{Message: msg, Changed: changed})
}

func (s *Server) handlePower(w http.ResponseWriter, r *http.Request) {
	name, verb := r.PathValue("name"), r.PathValue("verb")
	who, ok := s.allowWrite(w, r, name)
	if !ok {
		return
	}
	if !slices.Contains(fleetops.PowerVerbs(), verb) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown power operation %q: one of %v", verb, fleetops.PowerVerbs()))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	token, err := fleetops.RequestPower(ctx, s.c, name, verb)
	if err != nil {
		s.writeActionError(w, name, "power "+verb, err)
		return
	}
	s.log.Info("dashboard action", "server", name, "action", "power", "verb", verb, "token", token, "by", who)
	writeJSON(w, http.StatusOK, ActionResult{Message: fmt.Sprintf("%s: power %s requested", name, verb), Changed: true, Token: token})
}

func (s *Server) writeActionError(w http.ResponseWriter, name, action string, err error) {
	var pending *fleetops.PendingError
	code := http.StatusInternalServerError
	switch {
	case errors.As(err, &pending):
		code = http.StatusConflict
	case apierrors.IsNotFound(err):
		code = http.StatusNotFound
	case apierrors.IsForbidden(err):
		code = http.StatusForbidden
	case apierrors.IsConflict(err):
		code = http.StatusConflict
	}
	s.log.Info("dashboard action failed", "server", name, "action", action, "code", code, "error", err.Error())
	writeError(w, code, err.Error())
}

// record is the part of a recorder entry used to pick a BMC's; the page gets the whole entry.
type record struct {
	Address string `json:"address"`
	Via     string `json:"via"`
	UUID    string `json:"uuid"`
}

// maxRecords a server's details list.
const maxRecords = 50

// bmcRecords are the recorder's entries for srv's BMC, newest first: those sent to the BMC's
// address, or, when that is unknown, those for the server's system UUID.
func (s *Server) bmcRecords(ctx context.Context, srv *metalv1alpha1.Server) ([]json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.opts.RecorderURL+"/emulator/records", nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.records.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the recorder: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading the recorder: %s", resp.Status)
	}
	var all []json.RawMessage
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&all); err != nil {
		return nil, fmt.Errorf("reading the recorder: %w", err)
	}
	addr := s.bmcAddress(srv)
	out := []json.RawMessage{}
	for i := len(all) - 1; i >= 0 && len(out) < maxRecords; i-- {
		var r record
		if json.Unmarshal(all[i], &r) != nil {
			continue
		}
		if addr != "" && hostPort(r.Address) == addr || addr == "" && r.UUID != "" && r.UUID == srv.Spec.SystemUUID {
			out = append(out, all[i])
		}
	}
	return out, nil
}

// bmcAddress is "host:port" of srv's BMC, "" when unknown.
func (s *Server) bmcAddress(srv *metalv1alpha1.Server) string {
	if srv.Spec.BMCRef != nil {
		o, ok, _ := s.watch.bmcs.GetStore().GetByKey(srv.Spec.BMCRef.Name)
		if !ok {
			return ""
		}
		b := o.(*metalv1alpha1.BMC)
		host := ""
		switch {
		case b.Spec.Access != nil && b.Spec.Access.IP != "":
			host = b.Spec.Access.IP
		case b.Spec.Hostname != nil:
			host = *b.Spec.Hostname
		}
		if host == "" || b.Spec.Protocol.Port == 0 {
			return ""
		}
		return net.JoinHostPort(host, strconv.Itoa(int(b.Spec.Protocol.Port)))
	}
	if srv.Spec.BMC != nil {
		return hostPort(srv.Spec.BMC.Address)
	}
	return ""
}

// hostPort reduces a URL or address to host:port.
func hostPort(a string) string {
	if u, err := url.Parse(a); err == nil && u.Host != "" {
		return u.Host
	}
	return a
}

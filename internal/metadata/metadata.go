// Package metadata is the metadata service a claimed server's OS reads at boot: its Server's
// and claim's metadata and the claim's user data (ServerClaim spec.userDataRef), served on the
// discovery registry's listener, in the shape of metal-operator's metaldata. A request must
// carry the header "Metadata-Flavor: IronCore Metal" (a browser or a naive proxied fetch does
// not send it) and is answered for the Server whose reported network interfaces hold the
// request's source address; nothing else identifies a machine.
package metadata

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverclaims,verbs=get;list;watch

const (
	// FlavorHeader and Flavor must be on every request.
	FlavorHeader = "Metadata-Flavor"
	Flavor       = "IronCore Metal"
	// Prefix marks the labels and annotations of a Server or claim that are served, without it.
	Prefix = "metadata.metal.ironcore.dev/"
	// ServerIPIndex indexes Servers by the addresses of their reported network interfaces.
	ServerIPIndex = "status.networkInterfaces.ips"
	// UserDataKey is the key of a user-data Secret that is served (the only key when it has
	// one).
	UserDataKey = "userData"
)

// SetupIndexes registers ServerIPIndex on the manager's cache.
func SetupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &metalv1alpha1.Server{}, ServerIPIndex, serverIPs); err != nil {
		return fmt.Errorf("indexing Servers by %s: %w", ServerIPIndex, err)
	}
	return nil
}

func serverIPs(o client.Object) []string {
	s, ok := o.(*metalv1alpha1.Server)
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	add := func(ip string) {
		if p := net.ParseIP(strings.TrimSpace(ip)); p != nil && !seen[p.String()] {
			seen[p.String()] = true
			out = append(out, p.String())
		}
	}
	for _, n := range s.Status.NetworkInterfaces {
		add(n.IP)
		for _, ip := range n.IPs {
			add(ip)
		}
	}
	return out
}

// Handler serves GET /metadata (JSON) and GET /user-data for the requesting server. c reads
// Servers through a cache with ServerIPIndex; Secrets with reader.
func Handler(c client.Reader, secrets client.Reader, log logr.Logger) http.Handler {
	h := &handler{c: c, secrets: secrets, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metadata", h.metadata)
	mux.HandleFunc("GET /user-data", h.userData)
	return mux
}

type handler struct {
	c, secrets client.Reader
	log        logr.Logger
}

// Document is what GET /metadata answers.
type Document struct {
	Server      ServerInfo        `json:"server"`
	Claim       *ClaimInfo        `json:"claim,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ServerInfo names the machine.
type ServerInfo struct {
	Name         string `json:"name"`
	SystemUUID   string `json:"systemUUID,omitempty"`
	SerialNumber string `json:"serialNumber,omitempty"`
}

// ClaimInfo names the claim that holds it.
type ClaimInfo struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// caller finds the Server the request comes from and its claim (nil when unclaimed), or
// answers the error itself.
func (h *handler) caller(w http.ResponseWriter, r *http.Request) (*metalv1alpha1.Server, *metalv1alpha1.ServerClaim, bool) {
	if r.Header.Get(FlavorHeader) != Flavor {
		http.Error(w, "missing header "+FlavorHeader+": "+Flavor, http.StatusForbidden)
		return nil, nil, false
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	ip := net.ParseIP(host)
	if err != nil || ip == nil {
		http.Error(w, "unknown source address", http.StatusBadRequest)
		return nil, nil, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var list metalv1alpha1.ServerList
	if err := h.c.List(ctx, &list, client.MatchingFields{ServerIPIndex: ip.String()}); err != nil {
		h.log.Error(err, "listing servers by address")
		http.Error(w, "cannot look the server up", http.StatusServiceUnavailable)
		return nil, nil, false
	}
	switch len(list.Items) {
	case 0:
		http.Error(w, "no server with address "+ip.String(), http.StatusNotFound)
		return nil, nil, false
	case 1:
	default:
		// Two servers reported the address (a lease handed on): answering either could hand
		// one machine's user data to another.
		http.Error(w, "address "+ip.String()+" is reported by more than one server", http.StatusConflict)
		return nil, nil, false
	}
	s := &list.Items[0]
	ref := s.Spec.ServerClaimRef
	if ref == nil || ref.Name == "" {
		return s, nil, true
	}
	claim := &metalv1alpha1.ServerClaim{}
	if err := h.c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, claim); err != nil {
		if apierrors.IsNotFound(err) {
			return s, nil, true
		}
		http.Error(w, "cannot read the claim", http.StatusServiceUnavailable)
		return nil, nil, false
	}
	if claim.Spec.ServerRef == nil || claim.Spec.ServerRef.Name != s.Name {
		return s, nil, true // not bound to this server (yet, or any more)
	}
	return s, claim, true
}

func prefixed(dst map[string]string, src map[string]string) map[string]string {
	for k, v := range src {
		if name, ok := strings.CutPrefix(k, Prefix); ok && name != "" {
			if dst == nil {
				dst = map[string]string{}
			}
			dst[name] = v
		}
	}
	return dst
}

func (h *handler) metadata(w http.ResponseWriter, r *http.Request) {
	s, claim, ok := h.caller(w, r)
	if !ok {
		return
	}
	doc := Document{Server: ServerInfo{Name: s.Name, SystemUUID: s.Spec.SystemUUID, SerialNumber: s.Status.SerialNumber}}
	doc.Labels = prefixed(nil, s.Labels)
	doc.Annotations = prefixed(nil, s.Annotations)
	if claim != nil {
		doc.Claim = &ClaimInfo{Namespace: claim.Namespace, Name: claim.Name}
		// The claim's own say wins over the server's.
		doc.Labels = prefixed(doc.Labels, claim.Labels)
		doc.Annotations = prefixed(doc.Annotations, claim.Annotations)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(FlavorHeader, Flavor)
	_ = json.NewEncoder(w).Encode(doc)
}

func (h *handler) userData(w http.ResponseWriter, r *http.Request) {
	_, claim, ok := h.caller(w, r)
	if !ok {
		return
	}
	if claim == nil || claim.Spec.UserDataRef == nil || claim.Spec.UserDataRef.Name == "" {
		http.Error(w, "no user data", http.StatusNotFound)
		return
	}
	sec := &corev1.Secret{}
	key := client.ObjectKey{Namespace: claim.Namespace, Name: claim.Spec.UserDataRef.Name}
	if err := h.secrets.Get(r.Context(), key, sec); err != nil {
		if apierrors.IsNotFound(err) {
			http.Error(w, "user data Secret "+key.String()+" not found", http.StatusNotFound)
			return
		}
		http.Error(w, "cannot read the user data", http.StatusServiceUnavailable)
		return
	}
	data, ok := sec.Data[UserDataKey]
	if !ok && len(sec.Data) == 1 {
		keys := make([]string, 0, 1)
		for k := range sec.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		data, ok = sec.Data[keys[0]], true
	}
	if !ok {
		http.Error(w, "user data Secret "+key.String()+" has no key "+UserDataKey, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(FlavorHeader, Flavor)
	_, _ = w.Write(data)
}

// Package metadata is the metadata service a claimed server's OS reads at boot: its Server's
// and claim's metadata and the claim's user data (ServerClaim spec.userDataRef), served on the
// discovery registry's listener, in the shape of metal-operator's metaldata. A request must
// carry the header "Metadata-Flavor: IronCore Metal" (a browser or a naive proxied fetch does
// not send it) and the claim's metadata token (header Metadata-Token or query parameter token):
// a random token per claim, kept in a Secret the claim owns and handed to the machine by its
// boot configuration (spec.metadataTokenSecretRef). The token alone names the server; where the
// request comes from does not matter. Identifying a machine by its source address (the
// addresses its Server reported at discovery, never refreshed) is an opt-in compatibility mode:
// a re-leased address gets another machine's user data.
package metadata

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
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
	"k8s.io/apimachinery/pkg/types"
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
	// ServerTokenIndex indexes Servers by the token hash of TokenAnnotation.
	ServerTokenIndex = "metadata.annotations.metadata-token"
	// UserDataKey is the key of a user-data Secret that is served (the only key when it has
	// one).
	UserDataKey = "userData"

	// TokenHeader and TokenParam carry the claim's metadata token on a request.
	TokenHeader = "Metadata-Token"
	TokenParam  = "token"
	// TokenKey is the key of the token in a claim's token Secret (TokenSecretName).
	TokenKey = "token"
	// TokenAnnotation on a Server records the token of the claim that holds it, as
	// "<claim UID>/<hex SHA-256 of the token>": the service finds the server by the hash and
	// answers only while that claim holds it. Written by the claim controller with the binding;
	// the plain token stays in the claim's Secret.
	TokenAnnotation = "metal.ironcore.dev/metadata-token"
)

// TokenSecretName is the name of claim's token Secret, in the claim's namespace. A claim name
// too long for the suffix is cut and made unique with a hash of it.
func TokenSecretName(claim string) string {
	const suffix = "-metadata-token"
	if len(claim)+len(suffix) <= 253 {
		return claim + suffix
	}
	sum := sha256.Sum256([]byte(claim))
	return strings.TrimRight(claim[:253-len(suffix)-9], ".-") + "-" + hex.EncodeToString(sum[:4]) + suffix
}

// NewToken returns a new random token: 256 bits, URL- and kernel-command-line-safe.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random bytes for a metadata token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// TokenRecord is the value of TokenAnnotation for claim uid's token.
func TokenRecord(claim types.UID, token string) string { return string(claim) + "/" + tokenHash(token) }

func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// parseRecord splits a TokenAnnotation value into claim UID and token hash.
func parseRecord(v string) (types.UID, string, bool) {
	uid, hash, ok := strings.Cut(v, "/")
	return types.UID(uid), hash, ok && uid != "" && len(hash) == sha256.Size*2
}

// SetupIndexes registers ServerIPIndex and ServerTokenIndex on the manager's cache.
func SetupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &metalv1alpha1.Server{}, ServerIPIndex, serverIPs); err != nil {
		return fmt.Errorf("indexing Servers by %s: %w", ServerIPIndex, err)
	}
	if err := indexer.IndexField(ctx, &metalv1alpha1.Server{}, ServerTokenIndex, ServerTokenHash); err != nil {
		return fmt.Errorf("indexing Servers by %s: %w", ServerTokenIndex, err)
	}
	return nil
}

// ServerTokenHash is ServerTokenIndex's function: the token hash a Server's TokenAnnotation
// records.
func ServerTokenHash(o client.Object) []string {
	if _, hash, ok := parseRecord(o.GetAnnotations()[TokenAnnotation]); ok {
		return []string{hash}
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

// Options configure the service.
type Options struct {
	// IPIdentification also answers a request without a token for the Server whose reported
	// network interfaces hold its source address (metal-operator's way). Those addresses are
	// never refreshed, so a machine that later gets one of them is served another machine's
	// metadata and user data: only for clients that cannot send a token.
	IPIdentification bool
}

// Handler serves GET /metadata (JSON) and GET /user-data for the requesting server. c reads
// Servers (through a cache with ServerTokenIndex, and ServerIPIndex in IP mode) and claims;
// secrets reads Secrets.
func Handler(c client.Reader, secrets client.Reader, log logr.Logger, o Options) http.Handler {
	h := &handler{c: c, secrets: secrets, log: log, ipMode: o.IPIdentification}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metadata", h.metadata)
	mux.HandleFunc("GET /user-data", h.userData)
	return mux
}

type handler struct {
	c, secrets client.Reader
	log        logr.Logger
	ipMode     bool
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

// errNoToken and errBadToken are all a client learns about a refused token: nothing says
// whether the token was ever valid, or for which server.
const (
	errNoToken  = "a metadata token is required (header " + TokenHeader + " or query parameter " + TokenParam + ")"
	errBadToken = "metadata token not valid"
)

// caller finds the Server the request comes from and its claim (nil when unclaimed), or
// answers the error itself.
func (h *handler) caller(w http.ResponseWriter, r *http.Request) (*metalv1alpha1.Server, *metalv1alpha1.ServerClaim, bool) {
	if r.Header.Get(FlavorHeader) != Flavor {
		http.Error(w, "missing header "+FlavorHeader+": "+Flavor, http.StatusForbidden)
		return nil, nil, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	token := strings.TrimSpace(r.Header.Get(TokenHeader))
	if token == "" {
		token = r.URL.Query().Get(TokenParam)
	}
	switch {
	case token != "":
		// A token decides alone, also in IP mode: a wrong one is refused, not passed on to
		// the address lookup.
		return h.byToken(ctx, w, token)
	case h.ipMode:
		return h.byAddress(ctx, w, r)
	}
	http.Error(w, errNoToken, http.StatusForbidden)
	return nil, nil, false
}

// byToken finds the Server whose TokenAnnotation records the token's hash, and its claim: the
// claim the record was made for, still holding it. Anything else is errBadToken.
func (h *handler) byToken(ctx context.Context, w http.ResponseWriter, token string) (*metalv1alpha1.Server, *metalv1alpha1.ServerClaim, bool) {
	var list metalv1alpha1.ServerList
	if err := h.c.List(ctx, &list, client.MatchingFields{ServerTokenIndex: tokenHash(token)}); err != nil {
		h.log.Error(err, "listing servers by metadata token")
		http.Error(w, "cannot look the server up", http.StatusServiceUnavailable)
		return nil, nil, false
	}
	if len(list.Items) != 1 {
		// None, or (a copied annotation) more than one: neither is an answer.
		http.Error(w, errBadToken, http.StatusForbidden)
		return nil, nil, false
	}
	s := &list.Items[0]
	uid, _, _ := parseRecord(s.Annotations[TokenAnnotation])
	claim, err := h.claimOf(ctx, s)
	if err != nil {
		http.Error(w, "cannot read the claim", http.StatusServiceUnavailable)
		return nil, nil, false
	}
	if claim == nil || claim.UID != uid {
		// The claim the token was issued for let the server go (or is not bound yet).
		http.Error(w, errBadToken, http.StatusForbidden)
		return nil, nil, false
	}
	return s, claim, true
}

// byAddress is the compatibility mode: the Server whose reported interfaces hold the source
// address.
func (h *handler) byAddress(ctx context.Context, w http.ResponseWriter, r *http.Request) (*metalv1alpha1.Server, *metalv1alpha1.ServerClaim, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	ip := net.ParseIP(host)
	if err != nil || ip == nil {
		http.Error(w, "unknown source address", http.StatusBadRequest)
		return nil, nil, false
	}
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
	claim, err := h.claimOf(ctx, s)
	if err != nil {
		http.Error(w, "cannot read the claim", http.StatusServiceUnavailable)
		return nil, nil, false
	}
	return s, claim, true
}

// claimOf returns the claim that holds s and is bound to it, nil when there is none.
func (h *handler) claimOf(ctx context.Context, s *metalv1alpha1.Server) (*metalv1alpha1.ServerClaim, error) {
	ref := s.Spec.ServerClaimRef
	if ref == nil || ref.Name == "" {
		return nil, nil
	}
	claim := &metalv1alpha1.ServerClaim{}
	if err := h.c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, claim); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		h.log.Error(err, "reading claim", "server", s.Name)
		return nil, err
	}
	if claim.Spec.ServerRef == nil || claim.Spec.ServerRef.Name != s.Name {
		return nil, nil // not bound to this server (yet, or any more)
	}
	return claim, nil
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

package target

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// HostLabelValues returns the label values that name the host of rawURL, most specific first.
// A label value cannot hold ':', so the reference's convention is the bare host; to tell two
// services on one host apart, host_port is accepted too and wins over the bare host.
func HostLabelValues(rawURL string) ([]string, error) {
	u, err := url.Parse(strings.TrimSpace(rawURL))
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("%q is not an absolute URL", rawURL)
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	var out []string
	if port != "" {
		out = append(out, host+"_"+port)
	}
	out = append(out, host)
	for _, v := range out {
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("host %q cannot be a label value: %s", host, strings.Join(errs, "; "))
		}
	}
	return out, nil
}

// HostKey is the host[:port] of rawURL, used to key caches and to match Secret events to objects.
func HostKey(rawURL string) string {
	u, err := url.Parse(strings.TrimSpace(rawURL))
	if err != nil {
		return ""
	}
	if u.Port() == "" {
		return strings.ToLower(u.Hostname())
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), u.Port())
}

// AnyNamespace as --delivery-secrets-namespace widens the Secret lookup to every namespace.
const AnyNamespace = "*"

// SecretScope is where credentials and kubeconfig Secrets are read from: the operator's own
// namespace, or (widened by the admin) every namespace, the operator's still first. Anyone who
// can create a Secret in a namespace read here can point syncs at credentials and clusters of
// their choosing, so the default is the one namespace only the admin writes to.
type SecretScope struct {
	Own string // the operator's namespace, or the one namespace the flag names
	Any bool
}

// NewSecretScope reads --delivery-secrets-namespace; an operator run outside a cluster (no
// namespace of its own) reads the default namespace.
func NewSecretScope(flag, operatorNamespace string) SecretScope {
	if operatorNamespace == "" {
		operatorNamespace = metav1.NamespaceDefault
	}
	switch flag {
	case AnyNamespace:
		return SecretScope{Own: operatorNamespace, Any: true}
	case "":
		return SecretScope{Own: operatorNamespace}
	}
	return SecretScope{Own: flag}
}

// holds says whether namespace ns is read by the scope.
func (s SecretScope) holds(ns string) bool { return s.Any || s.Own == ns }

// CacheNamespaces is what the Secret caches hold: nil means every namespace.
func (s SecretScope) CacheNamespaces() map[string]cache.Config {
	if s.Any {
		return nil
	}
	return map[string]cache.Config{s.Own: {}}
}

func (s SecretScope) String() string {
	if s.Any {
		return "any namespace (" + s.Own + " first)"
	}
	return "namespace " + s.Own
}

// Claimant is the object a credentials or kubeconfig Secret is looked up for. A Secret serves
// it only if it names it (issue 24 item 4): finding a Secret by host alone let one team's sync
// read with another team's credentials.
type Claimant struct {
	Kind string // InfrahubSync or VidraResource, for messages
	Name string
	// Syncs are the names that, listed in the Secret's SyncsAnnotation, bind it: the sync
	// itself, or the sync controlling a VidraResource.
	Syncs []string
	// Resources are the names that, listed in VidraResourcesAnnotation, bind it.
	Resources []string
	// Admitted is namespace/name of the Secret the admission webhook found the claimant's
	// writer may read (AdmittedCredentialsAnnotation); "" when absent or not trusted.
	Admitted string
	// Labelled: every Secret labelled for the host serves (admission looking for the one to
	// bind, BindCredentials).
	Labelled bool
}

// Binds reports whether Secret s serves the claimant.
func (c Claimant) Binds(s *corev1.Secret) bool {
	if c.Labelled || c.isAdmitted(s) {
		return true
	}
	return namesAny(s.Annotations[infrahubv1alpha1.SyncsAnnotation], c.Syncs) ||
		namesAny(s.Annotations[infrahubv1alpha1.VidraResourcesAnnotation], c.Resources)
}

// isAdmitted: s is the Secret admission bound the claimant to.
func (c Claimant) isAdmitted(s *corev1.Secret) bool {
	return c.Admitted != "" && c.Admitted == s.Namespace+"/"+s.Name
}

// bindHint says how to bind a Secret to the claimant, for the NotBound message.
func (c Claimant) bindHint() string {
	if c.Kind == "VidraResource" && len(c.Syncs) > 0 {
		return fmt.Sprintf("list InfrahubSync %s in its annotation %s (or VidraResource %s in %s)",
			c.Syncs[0], infrahubv1alpha1.SyncsAnnotation, c.Name, infrahubv1alpha1.VidraResourcesAnnotation)
	}
	if c.Kind == "VidraResource" {
		return fmt.Sprintf("list VidraResource %s in its annotation %s", c.Name, infrahubv1alpha1.VidraResourcesAnnotation)
	}
	return fmt.Sprintf("list %s %s in its annotation %s", c.Kind, c.Name, infrahubv1alpha1.SyncsAnnotation)
}

// namesAny reports whether the comma-separated list names one of names.
func namesAny(list string, names []string) bool {
	for _, item := range strings.Split(list, ",") {
		if item = strings.TrimSpace(item); item != "" && slices.Contains(names, item) {
			return true
		}
	}
	return false
}

// SecretQuery is what findLabelledSecret looks for.
type SecretQuery struct {
	Key    string // the label naming the host
	RawURL string // the URL whose host the label names
	Who    Claimant
	// notFound and notBound are the condition reasons when no Secret is labelled for the host,
	// and when Secrets are but none serves the claimant.
	NotFound, NotBound string
	// Endpoint, if set, refuses a bound Secret that is for another endpoint than rawURL: it
	// returns why, with a reason.
	Endpoint func(*corev1.Secret) error
}

// FindLabelledSecret finds the one Secret whose label q.key names the host of q.rawURL and that
// serves q.who (and, with q.endpoint, is for rawURL's endpoint), by a fixed precedence: the
// scope's own namespace before any other, then within it the most specific label value
// (host_port before host). Two Secrets on the same step are an error rather than a coin toss.
// Secrets that do not serve the claimant are never candidates: another team's Secret neither
// answers for nor blocks this one.
func FindLabelledSecret(ctx context.Context, r client.Reader, scope SecretScope, q SecretQuery) (*corev1.Secret, error) {
	key := q.Key
	values, err := HostLabelValues(q.RawURL)
	if err != nil {
		return nil, lifecycle.WithReason(q.NotFound, err)
	}
	req, err := labels.NewRequirement(key, selection.In, values)
	if err != nil {
		return nil, lifecycle.WithReason(q.NotFound, fmt.Errorf("selecting Secrets by %s: %w", key, err))
	}
	var list corev1.SecretList
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*req)}}
	if !scope.Any {
		opts = append(opts, client.InNamespace(scope.Own))
	}
	if err := r.List(ctx, &list, opts...); err != nil {
		return nil, fmt.Errorf("listing Secrets labelled %s: %w", key, err)
	}
	var (
		candidates []corev1.Secret
		unbound    []string
		mismatch   error
	)
	for _, s := range list.Items {
		switch {
		case !q.Who.Binds(&s):
			unbound = append(unbound, s.Namespace+"/"+s.Name)
		case q.Endpoint != nil:
			if err := q.Endpoint(&s); err != nil {
				if mismatch == nil {
					mismatch = err
				}
				continue
			}
			candidates = append(candidates, s)
		default:
			candidates = append(candidates, s)
		}
	}
	for _, own := range []bool{true, false} {
		for _, v := range values {
			var found []corev1.Secret
			for _, s := range candidates {
				if s.Labels[key] == v && (s.Namespace == scope.Own) == own {
					found = append(found, s)
				}
			}
			switch len(found) {
			case 0:
				continue
			case 1:
				return &found[0], nil
			default:
				names := make([]string, 0, len(found))
				for _, s := range found {
					names = append(names, s.Namespace+"/"+s.Name)
				}
				sort.Strings(names)
				return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonSecretAmbiguous, "%d Secrets labelled %s=%s serve %s %s (%s); keep one", len(found), key, v, q.Who.Kind, q.Who.Name, strings.Join(names, ", "))
			}
		}
	}
	if mismatch != nil {
		return nil, mismatch
	}
	if len(unbound) > 0 {
		sort.Strings(unbound)
		if len(unbound) > 3 {
			unbound = append(unbound[:3], fmt.Sprintf("and %d more", len(unbound)-3))
		}
		what, verb := "Secret", "does"
		if len(unbound) > 1 {
			what, verb = "Secrets", "do"
		}
		return nil, lifecycle.Reasonf(q.NotBound, "%s %s labelled %s for this host %s not serve %s %s: to let one, %s", what, strings.Join(unbound, ", "), key, verb, q.Who.Kind, q.Who.Name, q.Who.bindHint())
	}
	return nil, lifecycle.Reasonf(q.NotFound, "no Secret labelled %s=%s in %s", key, strings.Join(values, " or "), scope)
}

// endpoint is what credentials are for: scheme, lower-case host and port (explicit, or the
// scheme's default). A path does not matter.
type endpoint struct{ scheme, host, port string }

func (e endpoint) String() string { return e.scheme + "://" + net.JoinHostPort(e.host, e.port) }

var defaultPorts = map[string]string{"http": "80", "https": "443"}

// ParseEndpoint reads the endpoint of an http or https URL.
func ParseEndpoint(rawURL string) (endpoint, error) {
	u, err := url.Parse(strings.TrimSpace(rawURL))
	if err != nil || u.Host == "" {
		return endpoint{}, fmt.Errorf("%q is not an absolute URL", rawURL)
	}
	e := endpoint{scheme: strings.ToLower(u.Scheme), host: strings.ToLower(u.Hostname()), port: u.Port()}
	def, ok := defaultPorts[e.scheme]
	if !ok {
		return endpoint{}, fmt.Errorf("%q: scheme must be http or https", rawURL)
	}
	if e.port == "" {
		e.port = def
	}
	return e, nil
}

// SecretEndpoint is the endpoint a credentials Secret is for, and how the Secret says so: its
// URLAnnotation, else its label (the reference's bare host meaning https on port 443; host_port,
// https on that port).
func SecretEndpoint(s *corev1.Secret) (endpoint, string, error) {
	if raw, ok := s.Annotations[infrahubv1alpha1.URLAnnotation]; ok {
		e, err := ParseEndpoint(raw)
		return e, "annotation " + infrahubv1alpha1.URLAnnotation, err
	}
	v := s.Labels[infrahubv1alpha1.InfrahubAPIURLLabel]
	how := "label " + infrahubv1alpha1.InfrahubAPIURLLabel + "=" + v + " without annotation " + infrahubv1alpha1.URLAnnotation
	host, port := v, "443"
	if i := strings.LastIndex(v, "_"); i > 0 && isDigits(v[i+1:]) {
		host, port = v[:i], v[i+1:]
	}
	return endpoint{scheme: "https", host: strings.ToLower(host), port: port}, how, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// EndpointMismatch says why credentials stated for have may not go to want ("" when they may).
func EndpointMismatch(have, want endpoint) string {
	var diff []string
	if have.scheme != want.scheme {
		diff = append(diff, "scheme")
	}
	if have.host != want.host {
		diff = append(diff, "host")
	}
	if have.port != want.port {
		diff = append(diff, "port")
	}
	if len(diff) == 0 {
		return ""
	}
	return strings.Join(diff, " and ") + " differ"
}

// secretValue returns the first non-empty key of a Secret, trimmed: values created with
// `echo` carry a trailing newline that would otherwise end up in a password.
func secretValue(s *corev1.Secret, keys ...string) string {
	for _, k := range keys {
		if v := strings.TrimSpace(string(s.Data[k])); v != "" {
			return v
		}
	}
	return ""
}

// AdmittedEndpoint refuses a Secret bound at admission for rawURL only when it states another
// endpoint in URLAnnotation. Labelled only, it serves the URL whose host (or host_port) its
// label names whatever the scheme and port, as in Vidra: its writer may read the credentials
// anyway, so where they go is theirs to say; the plain-http rule still applies when they are
// sent.
func AdmittedEndpoint(sec *corev1.Secret, rawURL string) error {
	if _, stated := sec.Annotations[infrahubv1alpha1.URLAnnotation]; !stated {
		return nil
	}
	want, err := ParseEndpoint(rawURL)
	if err != nil {
		return lifecycle.WithReason(infrahubv1alpha1.ReasonCredentialsNotFound, err)
	}
	have, how, err := SecretEndpoint(sec)
	if err != nil {
		return lifecycle.Reasonf(infrahubv1alpha1.ReasonCredentialsInvalid, "Secret %s/%s: %s: %v", sec.Namespace, sec.Name, how, err)
	}
	if why := EndpointMismatch(have, want); why != "" {
		return lifecycle.Reasonf(infrahubv1alpha1.ReasonCredentialsURLMismatch,
			"Secret %s/%s holds credentials for %s (%s), not for the sync's %s (%s); nothing was sent",
			sec.Namespace, sec.Name, have, how, want, why)
	}
	return nil
}

// labelledFor says whether sec's infrahub-api-url label names the host of rawURL.
func labelledFor(sec *corev1.Secret, rawURL string) bool {
	values, err := HostLabelValues(rawURL)
	if err != nil {
		return false
	}
	v, ok := sec.Labels[infrahubv1alpha1.InfrahubAPIURLLabel]
	for _, want := range values {
		if ok && v == want {
			return true
		}
	}
	return false
}

// hostOf is rawURL's host, for messages.
func hostOf(rawURL string) string {
	u, err := url.Parse(strings.TrimSpace(rawURL))
	if err != nil {
		return rawURL
	}
	return u.Hostname()
}

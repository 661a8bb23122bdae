package delivery

import (
	"context"
	"fmt"
	"net"
	"net/url"
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

// hostLabelValues returns the label values that name the host of rawURL, most specific first.
// A label value cannot hold ':', so the reference's convention is the bare host; to tell two
// services on one host apart, host_port is accepted too and wins over the bare host.
func hostLabelValues(rawURL string) ([]string, error) {
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

// hostKey is the host[:port] of rawURL, used to key caches and to match Secret events to objects.
func hostKey(rawURL string) string {
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

// secretScope is where credentials and kubeconfig Secrets are read from: the operator's own
// namespace, or (widened by the admin) every namespace, the operator's still first. Anyone who
// can create a Secret in a namespace read here can point syncs at credentials and clusters of
// their choosing, so the default is the one namespace only the admin writes to.
type secretScope struct {
	own string // the operator's namespace, or the one namespace the flag names
	any bool
}

// newSecretScope reads --delivery-secrets-namespace; an operator run outside a cluster (no
// namespace of its own) reads the default namespace.
func newSecretScope(flag, operatorNamespace string) secretScope {
	if operatorNamespace == "" {
		operatorNamespace = metav1.NamespaceDefault
	}
	switch flag {
	case AnyNamespace:
		return secretScope{own: operatorNamespace, any: true}
	case "":
		return secretScope{own: operatorNamespace}
	}
	return secretScope{own: flag}
}

// cacheNamespaces is what the Secret caches hold: nil means every namespace.
func (s secretScope) cacheNamespaces() map[string]cache.Config {
	if s.any {
		return nil
	}
	return map[string]cache.Config{s.own: {}}
}

func (s secretScope) String() string {
	if s.any {
		return "any namespace (" + s.own + " first)"
	}
	return "namespace " + s.own
}

// findLabelledSecret finds the one Secret whose label key names the host of rawURL, by a fixed
// precedence: the scope's own namespace before any other, then within it the most specific
// label value (host_port before host). Two Secrets on the same step are an error rather than a
// coin toss. notFoundReason is the condition reason when there is none.
func findLabelledSecret(ctx context.Context, r client.Reader, scope secretScope, key, rawURL, notFoundReason string) (*corev1.Secret, error) {
	values, err := hostLabelValues(rawURL)
	if err != nil {
		return nil, lifecycle.WithReason(notFoundReason, err)
	}
	req, err := labels.NewRequirement(key, selection.In, values)
	if err != nil {
		return nil, lifecycle.WithReason(notFoundReason, fmt.Errorf("selecting Secrets by %s: %w", key, err))
	}
	var list corev1.SecretList
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*req)}}
	if !scope.any {
		opts = append(opts, client.InNamespace(scope.own))
	}
	if err := r.List(ctx, &list, opts...); err != nil {
		return nil, fmt.Errorf("listing Secrets labelled %s: %w", key, err)
	}
	for _, own := range []bool{true, false} {
		for _, v := range values {
			var found []corev1.Secret
			for _, s := range list.Items {
				if s.Labels[key] == v && (s.Namespace == scope.own) == own {
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
				return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonSecretAmbiguous, "%d Secrets are labelled %s=%s (%s); keep one", len(found), key, v, strings.Join(names, ", "))
			}
		}
	}
	return nil, lifecycle.Reasonf(notFoundReason, "no Secret labelled %s=%s in %s", key, strings.Join(values, " or "), scope)
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

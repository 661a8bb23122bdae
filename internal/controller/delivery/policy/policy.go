package policy

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Policy says what an artifact may create. An artifact is code from Infrahub running with the
// operator's rights; the reference ran it with */* (defect 11), so one artifact could bind
// itself cluster-admin. Here RBAC kinds and cluster-scoped kinds are refused unless named.
type Policy struct {
	// AllowedKinds are GroupKinds as Kind.group (Deployment.apps), or Kind for the core group.
	// Empty, or containing "*", allows every namespaced kind but RBAC and Secret. RBAC kinds
	// (rbac.authorization.k8s.io), Secrets and cluster-scoped kinds are allowed only when listed
	// by name.
	AllowedKinds []string
	// AllowedNamespaces are where namespaced objects may go. Empty: only the VidraResource's
	// spec.destination.namespace; "*": anywhere. Listed, the destination namespace too must be
	// among them.
	AllowedNamespaces []string
	// OperatorNamespace, when known, is never applied to: an artifact's Deployment there could
	// run as the operator's ServiceAccount.
	OperatorNamespace string
}

const rbacGroup = "rbac.authorization.k8s.io"

// secretKind is allowed only by name: its values would sit in plain text in spec.manifest of a
// cluster-scoped object, readable wherever VidraResources are.
var secretKind = schema.GroupKind{Kind: "Secret"}

func (p Policy) Validate() error {
	for _, k := range p.AllowedKinds {
		if k == "*" {
			continue
		}
		gk := schema.ParseGroupKind(k)
		if gk.Kind == "" || strings.ContainsAny(k, "/ ") {
			return fmt.Errorf("allowed kind %q: want Kind or Kind.group, e.g. Deployment.apps", k)
		}
	}
	for _, ns := range p.AllowedNamespaces {
		if ns == "*" {
			continue
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("allowed namespace %q: %s", ns, strings.Join(errs, "; "))
		}
	}
	return nil
}

// named reports whether gk is listed by name (not only through "*").
func (p Policy) named(gk schema.GroupKind) bool {
	for _, k := range p.AllowedKinds {
		if k != "*" && schema.ParseGroupKind(k) == gk {
			return true
		}
	}
	return false
}

// Check returns why an object of kind gk in namespace (cluster-scoped when !namespaced) may not be
// created by a VidraResource whose destination namespace is destination, or nil. The message
// names the flag that would allow it.
func (p Policy) Check(gk schema.GroupKind, namespaced bool, namespace, destination string) error {
	named := p.named(gk)
	switch {
	case gk.Group == rbacGroup && !named:
		return fmt.Errorf("kind %s is RBAC and refused unless allowed by name (--delivery-allowed-kinds=%s)", gk, gk)
	case gk == secretKind && !named:
		return fmt.Errorf("kind Secret is refused unless allowed by name (--delivery-allowed-kinds=Secret): a rendered manifest sits in the cluster-scoped VidraResource, where whoever may read VidraResources reads its values; deliver a reference to the secret instead")
	case !namespaced && !named:
		return fmt.Errorf("kind %s is cluster-scoped and refused unless allowed by name (--delivery-allowed-kinds=%s)", gk, gk)
	case len(p.AllowedKinds) > 0 && !slices.Contains(p.AllowedKinds, "*") && !named:
		return fmt.Errorf("kind %s is not among the allowed kinds (%s)", gk, strings.Join(p.AllowedKinds, ","))
	case !namespaced:
		return nil
	case p.OperatorNamespace != "" && namespace == p.OperatorNamespace:
		return fmt.Errorf("namespace %q is the operator's own; nothing is applied there", namespace)
	case len(p.AllowedNamespaces) == 0 && namespace != destination:
		return fmt.Errorf("namespace %q is not spec.destination.namespace (%s); other namespaces only when allowed (--delivery-allowed-namespaces)", namespace, destination)
	case len(p.AllowedNamespaces) > 0 && !slices.Contains(p.AllowedNamespaces, "*") && !slices.Contains(p.AllowedNamespaces, namespace):
		return fmt.Errorf("namespace %q is not among the allowed namespaces (%s)", namespace, strings.Join(p.AllowedNamespaces, ","))
	}
	return nil
}

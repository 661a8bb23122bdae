package delivery

import (
	"cmp"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// ServiceAccountFor is the ServiceAccount a destination acts as: its own, else the default
// (--delivery-default-service-account: "name" in the destination namespace, or
// "namespace/name"); name "" means none (the operator itself, where that is allowed).
func ServiceAccountFor(d infrahubv1alpha1.Destination, defaultSA string) (namespace, name string) {
	name, namespace = d.ServiceAccountName, d.ServiceAccountNamespace
	if name == "" {
		if defaultSA == "" {
			return "", ""
		}
		namespace, name, _ = strings.Cut(defaultSA, "/")
		if name == "" {
			namespace, name = "", namespace
		}
	}
	return cmp.Or(namespace, DestinationNamespace(d)), name
}

// DestinationNamespace is where a destination's objects go when they name no namespace.
func DestinationNamespace(d infrahubv1alpha1.Destination) string {
	return cmp.Or(d.Namespace, metav1.NamespaceDefault)
}

// serviceAccountUser is the user name of a ServiceAccount.
func serviceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// actAs is the user a VidraResource's reads, applies and prunes act as: its ServiceAccount, or
// "" for the operator itself, which only --delivery-allow-operator-identity permits: without
// it a VidraResource naming no ServiceAccount (and no default) is refused, not run with the
// operator's rights.
func (r *VidraResourceReconciler) actAs(vr *infrahubv1alpha1.VidraResource) (string, error) {
	ns, name := ServiceAccountFor(vr.Spec.Destination, r.defaultSA)
	if name != "" {
		return serviceAccountUser(ns, name), nil
	}
	if r.allowOperator {
		return "", nil
	}
	return "", lifecycle.Reasonf(infrahubv1alpha1.ReasonNoServiceAccount,
		"spec.destination.serviceAccountName is empty and there is no --delivery-default-service-account; "+
			"the operator applies as itself only with --delivery-allow-operator-identity")
}

package policy

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestPolicyCheck(t *testing.T) {
	deploy := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	cm := schema.GroupKind{Kind: "ConfigMap"}
	crb := schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}
	role := schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "Role"}
	ns := schema.GroupKind{Kind: "Namespace"}
	secret := schema.GroupKind{Kind: "Secret"}
	tests := []struct {
		name       string
		policy     Policy
		gk         schema.GroupKind
		namespaced bool
		namespace  string
		deny       string
	}{
		{name: "default allows namespaced", gk: deploy, namespaced: true, namespace: "a"},
		{name: "default refuses ClusterRoleBinding", gk: crb, deny: "RBAC"},
		{name: "default refuses namespaced RBAC", gk: role, namespaced: true, namespace: "a", deny: "RBAC"},
		{name: "default refuses cluster-scoped", gk: ns, deny: "cluster-scoped"},
		{name: "wildcard does not open RBAC", policy: Policy{AllowedKinds: []string{"*"}}, gk: crb, deny: "RBAC"},
		// Finding 5 of #42: a Secret's values would sit in the cluster-scoped spec.manifest.
		{name: "default refuses Secret", gk: secret, namespaced: true, namespace: "a", deny: "--delivery-allowed-kinds=Secret"},
		{name: "wildcard does not open Secret", policy: Policy{AllowedKinds: []string{"*"}}, gk: secret, namespaced: true, namespace: "a", deny: "reference"},
		{name: "named Secret allowed", policy: Policy{AllowedKinds: []string{"Secret", "ConfigMap"}}, gk: secret, namespaced: true, namespace: "a"},
		{name: "named RBAC allowed", policy: Policy{AllowedKinds: []string{"ClusterRoleBinding.rbac.authorization.k8s.io"}}, gk: crb},
		{name: "named cluster-scoped allowed", policy: Policy{AllowedKinds: []string{"Namespace"}}, gk: ns},
		{name: "list restricts", policy: Policy{AllowedKinds: []string{"ConfigMap"}}, gk: deploy, namespaced: true, namespace: "a", deny: "not among the allowed kinds"},
		{name: "list allows core kind", policy: Policy{AllowedKinds: []string{"ConfigMap"}}, gk: cm, namespaced: true, namespace: "a"},
		{name: "namespace refused", policy: Policy{AllowedNamespaces: []string{"apps"}}, gk: cm, namespaced: true, namespace: "kube-system", deny: "kube-system"},
		{name: "namespace allowed", policy: Policy{AllowedNamespaces: []string{"apps"}}, gk: cm, namespaced: true, namespace: "apps"},
		// #16 scenario 2: the destination namespace is a limit, not only a default, and the
		// operator's namespace is out of reach.
		{name: "default: another namespace than the destination refused", gk: deploy, namespaced: true, namespace: "tenant-b", deny: "spec.destination.namespace"},
		{name: "listed: the listed namespaces", policy: Policy{AllowedNamespaces: []string{"a", "shared"}}, gk: cm, namespaced: true, namespace: "shared"},
		{name: "wildcard namespaces", policy: Policy{AllowedNamespaces: []string{"*"}}, gk: cm, namespaced: true, namespace: "elsewhere"},
		{name: "operator's namespace refused", policy: Policy{OperatorNamespace: "metalhub-system"}, gk: deploy, namespaced: true, namespace: "metalhub-system", deny: "operator's own"},
		{name: "operator's namespace refused under a wildcard", policy: Policy{AllowedNamespaces: []string{"*"}, OperatorNamespace: "metalhub-system"}, gk: deploy, namespaced: true, namespace: "metalhub-system", deny: "operator's own"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.policy.Check(tc.gk, tc.namespaced, tc.namespace, "a") // the destination namespace is a
			if tc.deny == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.deny) {
				t.Fatalf("err %v, want %q", err, tc.deny)
			}
		})
	}
}

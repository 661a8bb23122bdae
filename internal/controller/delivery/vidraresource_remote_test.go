package delivery

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	"github.com/metalhub/metalhub/internal/scheme"
)

// Defect 9: a remote cluster is reached with its own RESTMapper (it serves a kind the local one
// does not), its objects are watched, and rotated credentials are used without a restart.
func TestDefect09_RemoteClusterOwnMapperAndRotation(t *testing.T) {
	rem := remote(t)
	rc, err := client.New(rem.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	installWidgetCRD(t, rc)
	if err := rc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	kubeconfig, server := kubeconfigOf(t, rem.Kubeconfig) // not a local name: reached as a remote cluster

	startManager(t, fastOptions())
	secret := createAnnotatedSecret(t, "default", infrahubv1alpha1.ClusterKubeconfigLabel, labelFor(t, server), kubeconfigFor("d09"), map[string]string{"kubeconfig": string(kubeconfig)})
	widget := "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n"
	newResource(t, "d09", "apps", docs(configMapYAML("remote-cm", "", "1"), widget), func(vr *infrahubv1alpha1.VidraResource) {
		vr.Spec.Destination.Server = server
	})
	waitResource(t, "d09", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	w := &unstructured.Unstructured{}
	w.SetAPIVersion("example.com/v1")
	w.SetKind("Widget")
	if err := exists(t, rc, w, "apps", "w1"); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if err := exists(t, rc, cm, "apps", "remote-cm"); err != nil {
		t.Fatal(err)
	}
	if exists(t, env.Client, &corev1.ConfigMap{}, "apps", "remote-cm") == nil {
		t.Fatal("remote object applied to the local cluster")
	}

	// Deleted on the remote cluster: the remote watch brings it back.
	if err := rc.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() error { return exists(t, rc, &corev1.ConfigMap{}, "apps", "remote-cm") })

	// Rotation: credentials that do not work, then working ones again, each picked up from the
	// Secret's change alone.
	broken := strings.Replace(string(kubeconfig), server, closedURL(t), 1)
	setSecretData(t, secret, "kubeconfig", broken)
	requestSync(t, getResource(t, "d09"))
	waitResource(t, "d09", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonClusterUnavailable, 30*time.Second)
	setSecretData(t, secret, "kubeconfig", string(kubeconfig))
	waitResource(t, "d09", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
}

func setSecretData(t testing.TB, s *corev1.Secret, key, value string) {
	t.Helper()
	cur := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(s), cur); err != nil {
		t.Fatal(err)
	}
	cur.Data[key] = []byte(value)
	if err := env.Client.Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
}

func installWidgetCRD(t testing.TB, c client.Client) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
	if err := c.Create(context.Background(), crd); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: crd.Name}, got); err != nil {
			return err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("CRD not established")
	})
}

// #16 scenario 8, remote clients: a remote cluster's clients and watches go with its kubeconfig
// Secret, and with disuse, instead of living as long as the operator.
func TestRemoteClientsDroppedWithTheirSecretOrDisuse(t *testing.T) {
	h := startManager(t, fastOptions())
	ns := namespace(t)
	kubeconfig, server := kubeconfigOf(t, env.Kubeconfig) // not a local name: reached as a remote cluster
	secret := createAnnotatedSecret(t, "default", infrahubv1alpha1.ClusterKubeconfigLabel, labelFor(t, server), kubeconfigFor("d-remote-drop"), map[string]string{"kubeconfig": string(kubeconfig)})
	newResource(t, "d-remote-drop", ns, configMapYAML("remote-drop", "", "1"), func(vr *infrahubv1alpha1.VidraResource) {
		vr.Spec.Destination.Server = server
	})
	waitResource(t, "d-remote-drop", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	reg := h.rs.clusters
	if got := reg.RemoteClusters(); len(got) != 1 || got[0] != target.HostKey(server) {
		t.Fatalf("remote clusters %v, want %s", got, target.HostKey(server))
	}

	if err := env.Client.Delete(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	requestSync(t, getResource(t, "d-remote-drop"))
	waitResource(t, "d-remote-drop", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonKubeconfigNotFound, 15*time.Second)
	if got := reg.RemoteClusters(); len(got) != 0 {
		t.Fatalf("remote clusters %v kept after their Secret was deleted", got)
	}

	createAnnotatedSecret(t, "default", infrahubv1alpha1.ClusterKubeconfigLabel, labelFor(t, server), kubeconfigFor("d-remote-drop"), map[string]string{"kubeconfig": string(kubeconfig)})
	requestSync(t, getResource(t, "d-remote-drop"))
	waitResource(t, "d-remote-drop", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 15*time.Second)
	reg.EvictIdle()
	if got := reg.RemoteClusters(); len(got) != 1 {
		t.Fatalf("remote cluster in use evicted: %v", got)
	}
	reg.SetClock(func() time.Time { return time.Now().Add(reg.Idle + time.Minute) })
	reg.EvictIdle()
	if got := reg.RemoteClusters(); len(got) != 0 {
		t.Fatalf("remote clusters %v kept after %s unused", got, reg.Idle)
	}
}

// #16 scenario 4: moving a VidraResource to another cluster prunes what it applied on the old
// one, instead of orphaning it there.
func TestDestinationChangePrunesTheOldCluster(t *testing.T) {
	rem := remote(t)
	rc, err := client.New(rem.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, server := kubeconfigOf(t, rem.Kubeconfig) // not a local name: reached as a remote cluster
	startManager(t, fastOptions())
	ns := namespace(t)
	if err := rc.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	createAnnotatedSecret(t, "default", infrahubv1alpha1.ClusterKubeconfigLabel, labelFor(t, server), kubeconfigFor("d-move"), map[string]string{"kubeconfig": string(kubeconfig)})
	newResource(t, "d-move", ns, configMapYAML("moving", "", "1"), func(vr *infrahubv1alpha1.VidraResource) {
		vr.Spec.Destination.Server = server
	})
	waitResource(t, "d-move", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	if err := exists(t, rc, &corev1.ConfigMap{}, ns, "moving"); err != nil {
		t.Fatal(err)
	}
	patchObject(t, env.Client, getResource(t, "d-move"), func(vr *infrahubv1alpha1.VidraResource) {
		vr.Spec.Destination.Server = "" // the local cluster
	})
	eventually(t, 15*time.Second, func() error {
		if err := exists(t, env.Client, &corev1.ConfigMap{}, ns, "moving"); err != nil {
			return fmt.Errorf("not applied on the new cluster: %w", err)
		}
		if exists(t, rc, &corev1.ConfigMap{}, ns, "moving") == nil {
			return fmt.Errorf("still on the old cluster")
		}
		return nil
	})
	waitResource(t, "d-move", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 15*time.Second)
}

// #16 item 1 and its acceptance: each tenant's artifacts are applied as the tenant's own
// ServiceAccount, so the API server's RBAC is the policy. With the allow-list opened to every
// namespace, tenant A's artifact that names an object in tenant B's namespace is still refused
// (Forbidden), whole: nothing of it is created. What it may do, it does, and prunes, as itself.
func TestTenantsApplyAsTheirServiceAccount(t *testing.T) {
	o := fastOptions()
	o.Policy.AllowedNamespaces = []string{"*"} // RBAC is the fence here
	o.OperatorNamespace, o.SecretsNamespace = namespace(t), "default"
	startManager(t, o)
	ctx := context.Background()
	ta, tb := namespace(t), namespace(t)
	for _, ns := range []string{ta, tb} {
		for _, obj := range []client.Object{
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"}},
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"}, Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "patch", "update", "delete"}}}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "deployer"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "deployer"}}},
		} {
			if err := env.Client.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
	}
	asDeployer := func(vr *infrahubv1alpha1.VidraResource) { vr.Spec.Destination.ServiceAccountName = "deployer" }
	newResource(t, "tenant-a-own", ta, docs(configMapYAML("a-1", "", "1"), configMapYAML("a-2", "", "1")), asDeployer)
	waitResource(t, "tenant-a-own", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)

	newResource(t, "tenant-a-reach", ta, docs(configMapYAML("a-3", "", "1"), configMapYAML("in-b", tb, "1")), asDeployer)
	vr := waitResource(t, "tenant-a-reach", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonForbidden, 15*time.Second)
	if !strings.Contains(vr.Status.LastError, "ConfigMap/"+tb+"/in-b") {
		t.Errorf("lastError %q does not name the refused object", vr.Status.LastError)
	}
	wantNotCreated(t, []absent{{&corev1.ConfigMap{}, ta, "a-3"}, {&corev1.ConfigMap{}, tb, "in-b"}})
	// The acceptance's other reaches: a Deployment in tenant B's namespace (RBAC), a
	// ClusterRoleBinding and the operator's namespace (the policy, before anything is tried).
	crb := "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: tenant-a-admin\n" +
		"roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\n" +
		"subjects: [{kind: ServiceAccount, namespace: " + ta + ", name: deployer}]\n"
	inNS := func(yaml, ns string) string {
		return strings.Replace(yaml, "metadata:\n", "metadata:\n  namespace: "+ns+"\n", 1)
	}
	for _, tc := range []struct{ name, manifest, reason, names string }{
		{"tenant-a-deploy-b", docs(configMapYAML("a-4", "", "1"), inNS(deploymentYAML("in-b", 1), tb)), infrahubv1alpha1.ReasonForbidden, "Deployment/" + tb + "/in-b"},
		{"tenant-a-crb", docs(configMapYAML("a-5", "", "1"), crb), infrahubv1alpha1.ReasonPolicyDenied, "ClusterRoleBinding/tenant-a-admin"},
		{"tenant-a-operator-ns", docs(configMapYAML("a-6", "", "1"), inNS(deploymentYAML("escalate", 1), o.OperatorNamespace)), infrahubv1alpha1.ReasonPolicyDenied, "operator's own"},
	} {
		newResource(t, tc.name, ta, tc.manifest, asDeployer)
		vr := waitResource(t, tc.name, infrahubv1alpha1.StateFailed, tc.reason, 15*time.Second)
		if !strings.Contains(vr.Status.LastError, tc.names) {
			t.Errorf("%s: lastError %q does not name %q", tc.name, vr.Status.LastError, tc.names)
		}
	}
	wantNotCreated(t, []absent{
		{&corev1.ConfigMap{}, ta, "a-4"}, {&appsv1.Deployment{}, tb, "in-b"}, {&corev1.ConfigMap{}, ta, "a-5"},
		{&rbacv1.ClusterRoleBinding{}, "", "tenant-a-admin"}, {&corev1.ConfigMap{}, ta, "a-6"}, {&appsv1.Deployment{}, o.OperatorNamespace, "escalate"},
	})
	// A refused VidraResource goes at once when deleted: what its ServiceAccount cannot read,
	// it cannot have created, and does not hold the finalizer.
	for _, name := range []string{"tenant-a-reach", "tenant-a-deploy-b", "tenant-a-crb", "tenant-a-operator-ns"} {
		if err := env.Client.Delete(ctx, getResource(t, name)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, func() error {
		for _, name := range []string{"tenant-a-reach", "tenant-a-deploy-b", "tenant-a-crb", "tenant-a-operator-ns"} {
			if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &infrahubv1alpha1.VidraResource{}); err == nil {
				return fmt.Errorf("%s still there (finalizer held)", name)
			}
		}
		return nil
	})
	// Pruned as the ServiceAccount too.
	updateResourceManifest(t, "tenant-a-own", configMapYAML("a-1", "", "1"))
	eventually(t, 15*time.Second, func() error {
		if exists(t, env.Client, &corev1.ConfigMap{}, ta, "a-2") == nil {
			return fmt.Errorf("a-2 not pruned")
		}
		return nil
	})
}

// kubeconfigOf reads a control plane's kubeconfig file and the API server URL it names (without a
// trailing slash, as destination.server takes it).
func kubeconfigOf(t testing.TB, path string) ([]byte, string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	return data, strings.TrimSuffix(kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster].Server, "/")
}

// wantNotCreated fails t for each of objs that exists.
func wantNotCreated(t *testing.T, objs []absent) {
	t.Helper()
	for _, a := range objs {
		if exists(t, env.Client, a.obj, a.ns, a.name) == nil {
			t.Errorf("%s/%s created by a refused artifact", a.ns, a.name)
		}
	}
}

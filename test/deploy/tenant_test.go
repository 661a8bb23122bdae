package deploy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
	"github.com/metalhub/metalhub/internal/scheme"
)

// tenantOf makes a user with what a platform team gives a tenant: every verb on the two
// cluster-scoped delivery kinds, and in namespace ns (created) ConfigMaps, Secrets,
// ServiceAccounts and their impersonation, with ServiceAccount "deployer" there allowed to
// manage ConfigMaps. It returns a client acting as the user, once the authorizer has the rules.
func tenantOf(t *testing.T, ctx context.Context, user, ns string) client.Client {
	t.Helper()
	ensureNamespace(t, ns)
	for _, obj := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "delivery-" + user}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{infrahubv1alpha1.GroupVersion.Group}, Resources: []string{"infrahubsyncs", "vidraresources"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "delivery-" + user},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "delivery-" + user},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets", "serviceaccounts"}, Verbs: []string{"*"}},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "deployer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "deployer"}}},
	} {
		if err := env.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "serviceaccounts", Namespace: ns, Name: "deployer"}}}
		if err := c.Create(ctx, r); err != nil {
			return err
		}
		if !r.Status.Allowed {
			return fmt.Errorf("%s's rules not in effect yet", user)
		}
		return nil
	})
	return c
}

// refusedAt asserts that admission refused a write, saying want.
func refusedAt(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: admitted; want refused saying %q", what, want)
	} else if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v; want Forbidden saying %q", what, err, want)
	}
}

// Issue 42 acceptance, the webhooks-on half, end to end: the operator as the chart runs it
// (its RBAC, its ServiceAccount, its arguments, its webhooks). Tenant A delivers an artifact
// into her namespace as her ServiceAccount with her own credentials Secret, bound and sealed at
// admission. Tenant B, with the same rights in another namespace, tries every write that would
// make the operator act on A's behalf or beyond B's own rights; each is refused, and nothing
// lands anywhere B could not write herself.
func TestTenantsWithTheChartsDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the operator with the chart's defaults")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	startChartOperator(t, ctx, "tenants.metalhub.test")

	e := emu.New(emu.Options{})
	if _, err := e.AddArtifact("main", "tenant-web", "application/yaml", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tenant-cm\ndata:\n  v: \"1\"\n")); err != nil {
		t.Fatal(err)
	}
	url, err := e.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })

	nsA, nsB := "tenant-a", "tenant-b"
	asA, asB := tenantOf(t, ctx, "alice", nsA), tenantOf(t, ctx, "bob", nsB)

	// A: her credentials in her namespace (Vidra's label), her sync as her ServiceAccount.
	if err := asA.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "infrahub",
		Labels: map[string]string{infrahubv1alpha1.InfrahubAPIURLLabel: "127.0.0.1"}},
		StringData: map[string]string{"username": emu.DefaultUsername, "password": emu.DefaultPassword}}); err != nil {
		t.Fatal(err)
	}
	sync := &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: "alice-web"}, Spec: infrahubv1alpha1.InfrahubSyncSpec{
		Source:      infrahubv1alpha1.Source{InfrahubAPIURL: url, TargetBranch: "main", ArtefactName: "tenant-web"},
		Destination: infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"}}}
	if err := asA.Create(ctx, sync); err != nil {
		t.Fatalf("A's own sync refused: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), sync) })
	eventually(t, time.Minute, func() error {
		s := &infrahubv1alpha1.InfrahubSync{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(sync), s); err != nil {
			return err
		}
		if s.Status.SyncState != infrahubv1alpha1.StateSucceeded {
			return fmt.Errorf("A's sync: %q, %s", s.Status.SyncState, s.Status.LastError)
		}
		return env.Client.Get(ctx, client.ObjectKey{Namespace: nsA, Name: "tenant-cm"}, &corev1.ConfigMap{})
	})
	var list infrahubv1alpha1.VidraResourceList
	if err := env.Client.List(ctx, &list); err != nil || len(list.Items) != 1 {
		t.Fatalf("A's VidraResources: %d, %v", len(list.Items), err)
	}
	vr := list.Items[0].DeepCopy()

	// B, every way in.
	bsync := func(name string, d infrahubv1alpha1.Destination) *infrahubv1alpha1.InfrahubSync {
		return &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: infrahubv1alpha1.InfrahubSyncSpec{
			Source: infrahubv1alpha1.Source{InfrahubAPIURL: url, TargetBranch: "main", ArtefactName: "tenant-web"}, Destination: d}}
	}
	refusedAt(t, "B's sync as A's ServiceAccount", asB.Create(ctx, bsync("bob-as-a", infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"})),
		`user "bob" may not impersonate serviceaccounts "deployer" in namespace tenant-a`)
	refusedAt(t, "B's sync as the chart's default identity", asB.Create(ctx, bsync("bob-default", infrahubv1alpha1.Destination{Namespace: nsB})),
		`user "bob" may not impersonate serviceaccounts "metalhub-delivery"`)
	refusedAt(t, "B's sync as kube-system's", asB.Create(ctx, bsync("bob-system", infrahubv1alpha1.Destination{Namespace: nsB,
		ServiceAccountName: "namespace-controller", ServiceAccountNamespace: "kube-system"})), `may not impersonate serviceaccounts "namespace-controller"`)
	refusedAt(t, "B's sync with A's credentials", asB.Create(ctx, func() *infrahubv1alpha1.InfrahubSync {
		s := bsync("bob-creds", infrahubv1alpha1.Destination{Namespace: nsB, ServiceAccountName: "deployer"})
		s.Annotations = map[string]string{infrahubv1alpha1.AdmittedCredentialsAnnotation: nsA + "/infrahub"}
		return s
	}()), `may not get secrets "infrahub" in namespace tenant-a`)
	refusedAt(t, "B re-aiming A's sync", asB.Patch(ctx, sync.DeepCopy(), client.RawPatch(types.MergePatchType,
		[]byte(`{"spec":{"source":{"artefactName":"nothing","allowEmpty":true}}}`))), "may not impersonate")
	refusedAt(t, "B rewriting A's manifest", asB.Patch(ctx, vr.DeepCopy(), client.RawPatch(types.MergePatchType,
		[]byte(`{"spec":{"manifest":"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b-planted\n"}}`))), "may not impersonate")
	refusedAt(t, "B re-admitting A's sync", asB.Patch(ctx, sync.DeepCopy(), client.RawPatch(types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"1"}}}`, infrahubv1alpha1.ReadmitAnnotation)))), "may not impersonate")
	refusedAt(t, "B deleting A's VidraResource", asB.Delete(ctx, vr.DeepCopy()), "may not impersonate")
	refusedAt(t, "B deleting A's sync", asB.Delete(ctx, sync.DeepCopy()), "may not impersonate")
	forged := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "bob-forged",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: infrahubv1alpha1.GroupVersion.String(), Kind: "InfrahubSync", Name: sync.Name, UID: sync.UID, Controller: ptr.To(true)}}},
		Spec: infrahubv1alpha1.VidraResourceSpec{Destination: sync.Spec.Destination, Manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b-planted\n"}}
	refusedAt(t, "B's VidraResource under A's sync", asB.Create(ctx, forged), "may not impersonate")

	// B's own VidraResource, as her own ServiceAccount, naming A's namespace in its manifest:
	// admitted (B may act as her ServiceAccount), and what it would write elsewhere is not written.
	own := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "bob-own"}, Spec: infrahubv1alpha1.VidraResourceSpec{
		Destination: infrahubv1alpha1.Destination{Namespace: nsB, ServiceAccountName: "deployer"},
		Manifest:    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b-planted\n  namespace: " + nsA + "\n"}}
	if err := asB.Create(ctx, own); err != nil {
		t.Fatalf("B's own VidraResource refused: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), own) })
	eventually(t, time.Minute, func() error {
		got := &infrahubv1alpha1.VidraResource{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(own), got); err != nil {
			return err
		}
		if got.Status.DeployState != infrahubv1alpha1.StateFailed {
			return fmt.Errorf("B's VidraResource: %q, %s", got.Status.DeployState, got.Status.LastError)
		}
		return nil
	})

	var cms corev1.ConfigMapList
	if err := env.Client.List(ctx, &cms); err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		if cm.Name == "b-planted" || (cm.Name == "tenant-cm" && cm.Namespace != nsA) {
			t.Errorf("ConfigMap %s/%s was written", cm.Namespace, cm.Name)
		}
	}
	// A's delivery is intact and sealed as admitted.
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: nsA, Name: "tenant-cm"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("A's ConfigMap: %v", err)
	}
	// Gone before the next test: the sync, then (no garbage collector here) its VidraResources.
	if err := env.Client.Delete(ctx, sync); err != nil {
		t.Fatal(err)
	}
	removeVidraResources(t, ctx)
}

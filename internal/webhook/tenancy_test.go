package webhook_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
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
	"github.com/metalhub/metalhub/internal/controller/delivery/sealing"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/testenv"
)

var tenantSeq atomic.Int32

// tenant is a user with what a platform team gives one: create (and read, update, delete) on the two
// cluster-scoped delivery kinds, and edit in their own namespace. It returns the user's name,
// namespace and a client acting as them (impersonation by the admin).
func tenant(t *testing.T, name string) (string, string, client.Client) {
	t.Helper()
	n := tenantSeq.Add(1)
	user, ns := fmt.Sprintf("%s-%d", name, n), fmt.Sprintf("%s-%d", name, n)
	mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	mustCreate(t, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "delivery-writer-" + user},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{infrahubv1alpha1.GroupVersion.Group},
			Resources: []string{"infrahubsyncs", "vidraresources"}, Verbs: []string{"create", "get", "list", "update", "patch", "delete"}}}})
	mustCreate(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "delivery-writer-" + user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "delivery-writer-" + user},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})
	mustCreate(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	// The authorizer learns of new bindings through a watch: wait until it has these.
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Verb: "create", Group: infrahubv1alpha1.GroupVersion.Group, Resource: "infrahubsyncs"},
		{Verb: "create", Resource: "configmaps", Namespace: ns},
	} {
		testenv.Eventually(t, 10*time.Second, "the tenant's bindings in effect", func() (bool, string) {
			r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}
			if err := c.Create(ctx(t), r); err != nil {
				return false, err.Error()
			}
			return r.Status.Allowed, fmt.Sprintf("%s %s not allowed yet", attrs.Verb, attrs.Resource)
		})
	}
	return user, ns, c
}

// forbidden asserts that err is the API server's Forbidden answer saying want.
func forbidden(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("admitted; want refused saying %q", want)
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v; want Forbidden saying %q", err, want)
	}
}

func syncTo(name, url string, d infrahubv1alpha1.Destination) *infrahubv1alpha1.InfrahubSync {
	return &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: infrahubv1alpha1.InfrahubSyncSpec{
		Source:      infrahubv1alpha1.Source{InfrahubAPIURL: url, TargetBranch: "main", ArtefactName: "a"},
		Destination: d}}
}

// Issue 24, finding 1: the writer picks the identity. A tenant with create on the kinds and
// edit in their namespace may make the operator act only as they could themselves.
func TestTenantActsOnlyWithTheirOwnRights(t *testing.T) {
	a, nsA, asA := tenant(t, "tenant-a")
	_, nsB, _ := tenant(t, "tenant-b")
	createAs := func(c client.Client, obj client.Object) error {
		err := c.Create(ctx(t), obj)
		if err == nil {
			t.Cleanup(func() { _ = env.Client.Delete(ctx(t), obj) })
		}
		return err
	}
	url := "https://infrahub-tenancy.example"

	// Their own ServiceAccount in their own namespace: admitted.
	own := syncTo("own-"+a, url, infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"})
	if err := createAs(asA, own); err != nil {
		t.Fatalf("a sync as the tenant's own ServiceAccount in their namespace refused: %v", err)
	}
	// Another tenant's ServiceAccount and namespace.
	forbidden(t, createAs(asA, syncTo("theirs-"+a, url, infrahubv1alpha1.Destination{Namespace: nsB, ServiceAccountName: "deployer"})),
		fmt.Sprintf(`user %q may not impersonate serviceaccounts "deployer" in namespace %s`, a, nsB))
	// Their own ServiceAccount, aimed at the other tenant's namespace.
	forbidden(t, createAs(asA, syncTo("aimed-"+a, url, infrahubv1alpha1.Destination{Namespace: nsB, ServiceAccountName: "deployer", ServiceAccountNamespace: nsA})),
		fmt.Sprintf(`user %q may not impersonate serviceaccounts in namespace %s`, a, nsB))
	// No ServiceAccount: the operator's own identity, which only an admin may lend.
	forbidden(t, createAs(asA, syncTo("operator-"+a, url, infrahubv1alpha1.Destination{Namespace: nsA})),
		"no ServiceAccount is named, so the operator would apply with its own rights")
	// A server no kubeconfig Secret registers.
	forbidden(t, createAs(asA, syncTo("nowhere-"+a, url, infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer",
		Server: "https://cluster-nobody-registered.example:6443"})), "is not a registered cluster")
	// A registered one whose kubeconfig Secret the tenant may not read.
	mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kc-" + a,
		Labels:      map[string]string{infrahubv1alpha1.ClusterKubeconfigLabel: "prod-" + a + ".example"},
		Annotations: map[string]string{infrahubv1alpha1.SyncsAnnotation: "prod-" + a}},
		StringData: map[string]string{"kubeconfig": "apiVersion: v1\nkind: Config\n"}})
	forbidden(t, createAs(asA, syncTo("prod-"+a, url, infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer",
		Server: "https://prod-" + a + ".example"})), fmt.Sprintf(`may not get secrets "kc-%s" in namespace default: it holds the kubeconfig`, a))
	// Another team's Infrahub credentials, named as admitted for the sync: the writer must be
	// able to read them (a Secret that does not name the sync is never used for it).
	mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "creds-" + a,
		Labels: map[string]string{infrahubv1alpha1.InfrahubAPIURLLabel: "infrahub-team-b-" + a + ".example"}},
		StringData: map[string]string{"token": "secret"}})
	borrowed := syncTo("creds-"+a, "https://infrahub-team-b-"+a+".example", infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"})
	borrowed.Annotations = map[string]string{infrahubv1alpha1.AdmittedCredentialsAnnotation: "default/creds-" + a}
	forbidden(t, createAs(asA, borrowed),
		fmt.Sprintf(`may not get secrets "creds-%s" in namespace default: the sync names it as its Infrahub credentials`, a))

	// The admitted sync cannot be edited into another tenant's identity; labels still pass.
	own.Spec.Destination.Namespace = nsB
	forbidden(t, asA.Update(ctx(t), own), "may not impersonate")
	fresh := &infrahubv1alpha1.InfrahubSync{}
	if err := asA.Get(ctx(t), client.ObjectKeyFromObject(own), fresh); err != nil {
		t.Fatal(err)
	}
	fresh.Labels = map[string]string{"team": "a"}
	if err := asA.Update(ctx(t), fresh); err != nil {
		t.Fatalf("a label on an admitted sync refused: %v", err)
	}

	// VidraResources written by the tenant: the same rules.
	vr := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "vr-theirs-" + a},
		Spec: infrahubv1alpha1.VidraResourceSpec{Destination: infrahubv1alpha1.Destination{Namespace: nsB, ServiceAccountName: "deployer"}}}
	forbidden(t, createAs(asA, vr), "may not impersonate")
	vr = &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "vr-own-" + a},
		Spec: infrahubv1alpha1.VidraResourceSpec{Destination: infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"}}}
	if err := createAs(asA, vr); err != nil {
		t.Fatalf("a VidraResource as the tenant's own ServiceAccount refused: %v", err)
	}

	// The admin may lend the operator's identity.
	mustCreate(t, syncTo("admin-"+a, url, infrahubv1alpha1.Destination{Namespace: nsA}))
}

// A VidraResource of a sync carries the sync's admitted destination: nobody, the operator
// included, writes one into another.
func TestSyncsResourcesKeepTheSyncsDestination(t *testing.T) {
	_, nsA, _ := tenant(t, "owner")
	s := syncTo("owner-sync", "https://infrahub-owner.example", infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"})
	mustCreate(t, s)
	vr := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "owner-sync-artifact",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: infrahubv1alpha1.GroupVersion.String(), Kind: "InfrahubSync",
			Name: s.Name, UID: s.UID, Controller: ptrTrue()}}},
		Spec: infrahubv1alpha1.VidraResourceSpec{Destination: infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "cluster-deployer", ServiceAccountNamespace: "kube-system"}}}
	forbidden(t, create(t, vr), "is the sync's")
	vr.Spec.Destination = s.Spec.Destination
	mustCreate(t, vr)
}

func ptrTrue() *bool { b := true; return &b }

// Issue 42, finding 2: both kinds are cluster-scoped, so every tenant may write every object of
// them; each write is judged with the writer's rights for the object it leaves behind. Tenant B
// cannot make the operator act as tenant A's ServiceAccount by editing or deleting A's objects.
func TestTenantCannotWriteAnothersObjects(t *testing.T) {
	_, nsA, asA := tenant(t, "owner-a")
	b, _, asB := tenant(t, "intruder-b")
	dest := infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"}
	s := syncTo("a-sync-"+nsA, "https://infrahub-a.example", dest)
	if err := asA.Create(ctx(t), s); err != nil {
		t.Fatalf("tenant A's own sync refused: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), s) })
	vr := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "a-vr-" + nsA},
		Spec: infrahubv1alpha1.VidraResourceSpec{Destination: dest, Manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"}}
	if err := asA.Create(ctx(t), vr); err != nil {
		t.Fatalf("tenant A's own VidraResource refused: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), vr) })
	impersonate := fmt.Sprintf(`user %q may not impersonate serviceaccounts "deployer" in namespace %s`, b, nsA)

	// B rewrites A's manifest: it would be applied as A's ServiceAccount in A's namespace.
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"manifest":"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: planted\n"}}`))
	forbidden(t, asB.Patch(ctx(t), vr.DeepCopy(), patch), impersonate)
	// B points A's sync at nothing and lets an empty result prune A's objects.
	patch = client.RawPatch(types.MergePatchType, []byte(`{"spec":{"source":{"artefactName":"does-not-exist","allowEmpty":true}}}`))
	forbidden(t, asB.Patch(ctx(t), s.DeepCopy(), patch), impersonate)
	// B asks the operator to act on A's sync (an infrahub.operators.com annotation).
	patch = client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+infrahubv1alpha1.RequestedAtAnnotation+`":"now"}}}`))
	forbidden(t, asB.Patch(ctx(t), s.DeepCopy(), patch), impersonate)
	// B hangs A's VidraResource under a sync of B's choosing.
	patch = client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"ownerReferences":[{"apiVersion":"infrahub.operators.com/v1alpha1","kind":"InfrahubSync","name":"b-sync","uid":"0b0b0b0b-0000-4000-8000-000000000000","controller":true}]}}`))
	forbidden(t, asB.Patch(ctx(t), vr.DeepCopy(), patch), impersonate)
	// B deletes A's sync and A's VidraResource: their finalizers would prune as A's ServiceAccount.
	forbidden(t, asB.Delete(ctx(t), s.DeepCopy()), impersonate)
	forbidden(t, asB.Delete(ctx(t), vr.DeepCopy()), impersonate)
	// A label is no instruction to the operator: it passes.
	patch = client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"seen-by":"b"}}}`))
	if err := asB.Patch(ctx(t), s.DeepCopy(), patch); err != nil {
		t.Fatalf("a label refused: %v", err)
	}

	// A may do all of it to her own objects.
	patch = client.RawPatch(types.MergePatchType, []byte(`{"spec":{"manifest":"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n"}}`))
	if err := asA.Patch(ctx(t), vr.DeepCopy(), patch); err != nil {
		t.Fatalf("tenant A editing her own VidraResource refused: %v", err)
	}
	if err := asA.Delete(ctx(t), vr.DeepCopy()); err != nil {
		t.Fatalf("tenant A deleting her own VidraResource refused: %v", err)
	}
	if err := asA.Delete(ctx(t), s.DeepCopy()); err != nil {
		t.Fatalf("tenant A deleting her own sync refused: %v", err)
	}
}

// Issue 42, finding 2: once deletion has started, the spec is what the finalizer cleans up
// after; nobody changes it, its owner and the admin included.
func TestSpecFrozenOnceDeletionStarts(t *testing.T) {
	_, nsA, asA := tenant(t, "deleting")
	dest := infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"}
	hold := "test.metalhub.io/hold"
	s := syncTo("deleting-"+nsA, "https://infrahub-deleting.example", dest)
	s.Finalizers = []string{hold}
	vr := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "deleting-vr-" + nsA, Finalizers: []string{hold}},
		Spec: infrahubv1alpha1.VidraResourceSpec{Destination: dest, Manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"}}
	for _, obj := range []client.Object{s, vr} {
		if err := asA.Create(ctx(t), obj); err != nil {
			t.Fatalf("%T refused: %v", obj, err)
		}
		t.Cleanup(func() {
			_ = env.Client.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		})
		if err := asA.Delete(ctx(t), obj); err != nil {
			t.Fatalf("deleting %T: %v", obj, err)
		}
	}
	for _, c := range []client.Client{asA, env.Client} {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"manifest":"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n"}}`))
		forbidden(t, c.Patch(ctx(t), vr.DeepCopy(), patch), "spec cannot change once deletion has started")
		patch = client.RawPatch(types.MergePatchType, []byte(`{"spec":{"destination":{"namespace":"default"}}}`))
		forbidden(t, c.Patch(ctx(t), s.DeepCopy(), patch), "spec cannot change once deletion has started")
	}
	// Metadata still moves: the finalizer is released.
	if err := env.Client.Patch(ctx(t), vr.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatalf("releasing the finalizer of a VidraResource being deleted: %v", err)
	}
}

// Issue 42, finding 1: the configuration this package installs is what the delivery
// controllers look for before they act as a ServiceAccount a writer named.
func TestInstalledConfigurationGuardsDelivery(t *testing.T) {
	var list admissionregistrationv1.ValidatingWebhookConfigurationList
	if err := env.Client.List(ctx(t), &list); err != nil {
		t.Fatal(err)
	}
	if err := sealing.WebhooksGuard(list.Items, "metalhub-system"); err != nil {
		t.Fatalf("the installed webhook configuration does not guard delivery: %v", err)
	}
}

// Issue 42, finding 3: handover-from moves a VidraResource's objects to another; only the
// operator writes it (for a sync whose artifact changed its id). A tenant may neither create a
// VidraResource with it nor add or change it on one, not even on her own; the operator may.
func TestOnlyTheOperatorWritesHandover(t *testing.T) {
	a, nsA, asA := tenant(t, "handover")
	dest := infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"}
	refusal := fmt.Sprintf("user %q may not set annotation %s", a, infrahubv1alpha1.HandoverAnnotation)
	vr := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "handover-thief-" + nsA,
		Annotations: map[string]string{infrahubv1alpha1.HandoverAnnotation: "victim:0a0a0a0a-0000-4000-8000-000000000000"}},
		Spec: infrahubv1alpha1.VidraResourceSpec{Destination: dest, Manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"}}
	forbidden(t, asA.Create(ctx(t), vr.DeepCopy()), refusal)

	// Her own VidraResource, without it: admitted; adding it afterwards is refused.
	own := vr.DeepCopy()
	own.Annotations = nil
	if err := asA.Create(ctx(t), own); err != nil {
		t.Fatalf("tenant's own VidraResource refused: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), own) })
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+infrahubv1alpha1.HandoverAnnotation+`":"victim:0a0a0a0a-0000-4000-8000-000000000000"}}}`))
	forbidden(t, asA.Patch(ctx(t), own.DeepCopy(), patch), refusal)

	// The operator (the admin here is the webhook's own user) sets it; the tenant may neither
	// change it nor, as it only narrows, is she refused removing it.
	if err := env.Client.Patch(ctx(t), own.DeepCopy(), patch); err != nil {
		t.Fatalf("the operator's handover-from refused: %v", err)
	}
	changed := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+infrahubv1alpha1.HandoverAnnotation+`":"other:0b0b0b0b-0000-4000-8000-000000000000"}}}`))
	forbidden(t, asA.Patch(ctx(t), own.DeepCopy(), changed), refusal)
	removed := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+infrahubv1alpha1.HandoverAnnotation+`":null}}}`))
	if err := asA.Patch(ctx(t), own.DeepCopy(), removed); err != nil {
		t.Fatalf("removing handover-from refused: %v", err)
	}
}

// Deleting a VidraResource whose sync is going was open to anyone (for the garbage collector's
// sake): tenant B could delete tenant A's VidraResource while A's sync waited on a finalizer, and
// its cleanup would prune as A's ServiceAccount. Only the garbage collector follows the sync's
// deletion unchecked; B needs A's rights.
func TestOnlyTheGarbageCollectorFollowsASyncsDeletion(t *testing.T) {
	_, nsA, asA := tenant(t, "gc-owner")
	b, _, asB := tenant(t, "gc-intruder")
	dest := infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"}
	hold := "test.metalhub.io/hold"
	s := syncTo("gc-"+nsA, "https://infrahub-gc.example", dest)
	s.Finalizers = []string{hold}
	if err := asA.Create(ctx(t), s); err != nil {
		t.Fatalf("A's sync refused: %v", err)
	}
	t.Cleanup(func() {
		_ = env.Client.Patch(context.Background(), s, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	vr := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "gc-vr-" + nsA,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: infrahubv1alpha1.GroupVersion.String(), Kind: "InfrahubSync", Name: s.Name, UID: s.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: infrahubv1alpha1.VidraResourceSpec{Destination: dest, Manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"}}
	vr.Finalizers = []string{hold}
	if err := asA.Create(ctx(t), vr); err != nil {
		t.Fatalf("A's VidraResource of her sync refused: %v", err)
	}
	t.Cleanup(func() {
		_ = env.Client.Patch(context.Background(), vr, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		_ = env.Client.Delete(context.Background(), vr)
	})
	// A deletes her sync, which waits on its finalizer (orphaning nothing: background).
	if err := asA.Delete(ctx(t), s.DeepCopy()); err != nil {
		t.Fatalf("A deleting her sync: %v", err)
	}
	forbidden(t, asB.Delete(ctx(t), vr.DeepCopy()), fmt.Sprintf(`user %q may not impersonate`, b))

	// As the garbage collector (its rights as a real cluster gives them: delete on every kind).
	gcUser := "system:kube-controller-manager"
	mustCreate(t, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-gc-" + nsA},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{infrahubv1alpha1.GroupVersion.Group}, Resources: []string{"vidraresources"}, Verbs: []string{"delete"}}}})
	mustCreate(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-gc-" + nsA},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "test-gc-" + nsA},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: gcUser}}})
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: gcUser}
	gc, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the garbage collector's deletion admitted", func() (bool, string) {
		if err := gc.Delete(ctx(t), vr.DeepCopy()); err != nil {
			return false, err.Error() // the authorizer learns of the new binding through a watch
		}
		return true, ""
	})
}

// dependsOn names syncs whose state the object then waits on and names in its status: a writer
// must be able to read each. A tenant who may read syncs is admitted; one whose role covers only
// VidraResources is refused, naming the right.
func TestDependsOnNeedsTheRightToReadTheSync(t *testing.T) {
	a, nsA, asA := tenant(t, "depends-a")
	mustCreate(t, syncTo("dep-target-"+a, "https://infrahub-deps.example", infrahubv1alpha1.Destination{Namespace: nsA}))
	vr := func(name string) *infrahubv1alpha1.VidraResource {
		return &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: infrahubv1alpha1.VidraResourceSpec{Destination: infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"},
				DependsOn: []infrahubv1alpha1.Dependency{{Name: "dep-target-" + a}}}}
	}
	ok := vr("dep-ok-" + a)
	if err := asA.Create(ctx(t), ok); err != nil {
		t.Fatalf("a tenant who may read the sync refused: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx(t), ok) })

	// A writer of VidraResources only.
	user := "vr-only-" + a
	mustCreate(t, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "vr-writer-" + user},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{infrahubv1alpha1.GroupVersion.Group},
			Resources: []string{"vidraresources"}, Verbs: []string{"create", "get", "list", "update", "patch", "delete"}}}})
	mustCreate(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "vr-writer-" + user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "vr-writer-" + user},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})
	mustCreate(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "edit-" + user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	asVR, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	attrs := authorizationv1.ResourceAttributes{Verb: "create", Group: infrahubv1alpha1.GroupVersion.Group, Resource: "vidraresources"}
	testenv.Eventually(t, 10*time.Second, "the writer's bindings in effect", func() (bool, string) {
		r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}
		if err := asVR.Create(ctx(t), r); err != nil {
			return false, err.Error()
		}
		return r.Status.Allowed, "create vidraresources not allowed yet"
	})
	forbidden(t, asVR.Create(ctx(t), vr("dep-refused-"+a)),
		fmt.Sprintf(`user %q may not get infrahubsyncs.infrahub.operators.com "dep-target-%s": spec.dependsOn names it`, user, a))
}

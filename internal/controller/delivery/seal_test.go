package delivery

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/sealing"
	"github.com/metalhub/metalhub/internal/scheme"
)

func testSealer(t *testing.T, c client.Client, now time.Time) *sealing.Sealer {
	t.Helper()
	return &sealing.Sealer{Keys: sealing.NewKeys(c, c, "ops"), Now: func() time.Time { return now }}
}

func sealedSync() *infrahubv1alpha1.InfrahubSync {
	return &infrahubv1alpha1.InfrahubSync{
		ObjectMeta: metav1.ObjectMeta{Name: "s", UID: "uid-1", CreationTimestamp: metav1.NewTime(time.Unix(1_800_000_000, 0)),
			Annotations: map[string]string{infrahubv1alpha1.AdmittedCredentialsAnnotation: "team/creds"}},
		Spec: infrahubv1alpha1.InfrahubSyncSpec{
			Source:      infrahubv1alpha1.Source{InfrahubAPIURL: "https://infrahub.example", TargetBranch: "main", ArtefactName: "a"},
			Destination: infrahubv1alpha1.Destination{Namespace: "team", ServiceAccountName: "deployer"},
		},
	}
}

func sealedResource() *infrahubv1alpha1.VidraResource {
	return &infrahubv1alpha1.VidraResource{
		ObjectMeta: metav1.ObjectMeta{Name: "r", UID: "uid-2", CreationTimestamp: metav1.NewTime(time.Unix(1_800_000_000, 0)),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: infrahubv1alpha1.GroupVersion.String(), Kind: "InfrahubSync", Name: "s", UID: "uid-1", Controller: ptr.To(true)}},
			Annotations:     map[string]string{infrahubv1alpha1.AdmittedKubeconfigAnnotation: "team/kube"}},
		Spec: infrahubv1alpha1.VidraResourceSpec{Destination: infrahubv1alpha1.Destination{Namespace: "team", ServiceAccountName: "deployer"},
			Manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"},
	}
}

// A seal verifies on the object it was written for and stops verifying when anything it covers
// changes; what it does not cover (what the operator does not act on) may change.
func TestSealCoversWhatTheObjectAsks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	now := time.Unix(1_800_000_100, 0)
	s := testSealer(t, c, now)

	for _, tc := range []struct {
		name   string
		obj    func() client.Object
		change func(client.Object)
		want   sealing.Level
	}{
		{"sync as sealed", func() client.Object { return sealedSync() }, func(client.Object) {}, sealing.Admitted},
		{"sync: label", func() client.Object { return sealedSync() }, func(o client.Object) { o.SetLabels(map[string]string{"x": "y"}) }, sealing.Admitted},
		{"sync: reconcileOnEvents", func() client.Object { return sealedSync() }, func(o client.Object) {
			o.(*infrahubv1alpha1.InfrahubSync).Spec.Destination.ReconcileOnEvents = true
		}, sealing.Admitted},
		{"sync: bookkeeping annotation", func() client.Object { return sealedSync() }, func(o client.Object) {
			setAnn(o, infrahubv1alpha1.PrunePendingAnnotation, "x")
		}, sealing.Admitted},
		{"sync: ServiceAccount", func() client.Object { return sealedSync() }, func(o client.Object) {
			o.(*infrahubv1alpha1.InfrahubSync).Spec.Destination.ServiceAccountName = "admin"
		}, sealing.Unsealed},
		{"sync: ServiceAccount namespace", func() client.Object { return sealedSync() }, func(o client.Object) {
			o.(*infrahubv1alpha1.InfrahubSync).Spec.Destination.ServiceAccountNamespace = "kube-system"
		}, sealing.Unsealed},
		{"sync: namespace", func() client.Object { return sealedSync() }, func(o client.Object) {
			o.(*infrahubv1alpha1.InfrahubSync).Spec.Destination.Namespace = "other"
		}, sealing.Unsealed},
		{"sync: server", func() client.Object { return sealedSync() }, func(o client.Object) {
			o.(*infrahubv1alpha1.InfrahubSync).Spec.Destination.Server = "https://other.example"
		}, sealing.Unsealed},
		{"sync: source URL", func() client.Object { return sealedSync() }, func(o client.Object) {
			o.(*infrahubv1alpha1.InfrahubSync).Spec.Source.InfrahubAPIURL = "https://evil.example"
		}, sealing.Unsealed},
		{"sync: artefact", func() client.Object { return sealedSync() }, func(o client.Object) {
			o.(*infrahubv1alpha1.InfrahubSync).Spec.Source.ArtefactName = "nothing"
		}, sealing.Unsealed},
		{"sync: allowEmpty", func() client.Object { return sealedSync() }, func(o client.Object) {
			o.(*infrahubv1alpha1.InfrahubSync).Spec.Source.AllowEmpty = true
		}, sealing.Unsealed},
		{"sync: admitted credentials", func() client.Object { return sealedSync() }, func(o client.Object) {
			setAnn(o, infrahubv1alpha1.AdmittedCredentialsAnnotation, "kube-system/admin-creds")
		}, sealing.Unsealed},
		{"sync: another object of the name", func() client.Object { return sealedSync() }, func(o client.Object) { o.SetUID("uid-9") }, sealing.Unsealed},
		{"sync: renamed", func() client.Object { return sealedSync() }, func(o client.Object) { o.SetName("t") }, sealing.Unsealed},
		{"sync: seal level raised", func() client.Object { return sealedSync() }, func(o client.Object) {
			v := o.GetAnnotations()[infrahubv1alpha1.SealAnnotation]
			setAnn(o, infrahubv1alpha1.SealAnnotation, strings.Replace(v, "v1.a.", "v1.o.", 1))
		}, sealing.Unsealed},
		{"sync: malformed", func() client.Object { return sealedSync() }, func(o client.Object) {
			setAnn(o, infrahubv1alpha1.SealAnnotation, "v1.a.x")
		}, sealing.Unsealed},
		{"resource as sealed", func() client.Object { return sealedResource() }, func(client.Object) {}, sealing.Admitted},
		{"resource: cached without its manifest", func() client.Object { return sealedResource() }, func(o client.Object) {
			if _, err := manifests.Strip(o); err != nil {
				t.Fatal(err)
			}
		}, sealing.Admitted},
		{"resource: manifest", func() client.Object { return sealedResource() }, func(o client.Object) {
			o.(*infrahubv1alpha1.VidraResource).Spec.Manifest += "---\nkind: ClusterRoleBinding\n"
		}, sealing.Unsealed},
		{"resource: manifest emptied", func() client.Object { return sealedResource() }, func(o client.Object) {
			o.(*infrahubv1alpha1.VidraResource).Spec.Manifest = ""
		}, sealing.Unsealed},
		{"resource: controller", func() client.Object { return sealedResource() }, func(o client.Object) {
			o.(*infrahubv1alpha1.VidraResource).OwnerReferences[0].UID = "uid-other-sync"
		}, sealing.Unsealed},
		{"resource: admitted kubeconfig", func() client.Object { return sealedResource() }, func(o client.Object) {
			setAnn(o, infrahubv1alpha1.AdmittedKubeconfigAnnotation, "kube-system/admin-kube")
		}, sealing.Unsealed},
		{"resource: handover (the controller checks it against the sync)", func() client.Object { return sealedResource() }, func(o client.Object) {
			setAnn(o, infrahubv1alpha1.HandoverAnnotation, "old:uid-0")
		}, sealing.Admitted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := tc.obj()
			if err := s.Seal(ctx, obj, sealing.Admitted); err != nil {
				t.Fatal(err)
			}
			tc.change(obj)
			if got, why := s.Level(ctx, obj); got != tc.want {
				t.Errorf("level = %d (%s); want %d", got, why, tc.want)
			}
		})
	}
}

func setAnn(o client.Object, k, v string) {
	a := o.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	o.SetAnnotations(a)
}

// A seal written on create (no UID yet) holds for the object created then, not for a namesake
// created later with a copy of it; one written with another key holds for nothing.
func TestSealOnCreateAndAnotherKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	created := time.Unix(1_800_000_000, 0)
	s := testSealer(t, c, created.Add(-2*time.Second))

	obj := sealedSync()
	obj.UID, obj.CreationTimestamp = "", metav1.Time{}
	if err := s.Seal(ctx, obj, sealing.Admitted); err != nil {
		t.Fatal(err)
	}
	obj.UID, obj.CreationTimestamp = "uid-1", metav1.NewTime(created)
	if got, why := s.Level(ctx, obj); got != sealing.Admitted {
		t.Errorf("the object created with it: level %d (%s)", got, why)
	}
	later := obj.DeepCopy()
	later.UID, later.CreationTimestamp = "uid-2", metav1.NewTime(created.Add(time.Hour))
	if got, _ := s.Level(ctx, later); got != sealing.Unsealed {
		t.Errorf("a namesake created an hour later with the copied seal: level %d; want unsealed", got)
	}

	other := testSealer(t, fake.NewClientBuilder().WithScheme(scheme.New()).Build(), created)
	if got, why := other.Level(ctx, obj); got != sealing.Unsealed || !strings.Contains(why, "another key") {
		t.Errorf("another key: level %d (%s); want unsealed", got, why)
	}
}

// The key is made once, in the operator's namespace, and shared by every replica; a Secret
// holding no usable key is an error, not a key.
func TestSealKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	a, b := sealing.NewKeys(c, c, "ops"), sealing.NewKeys(c, c, "ops")
	ka, err := a.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := b.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ka) != sealing.KeyBytes || string(ka) != string(kb) {
		t.Errorf("two replicas' keys: %d bytes, same %t", len(ka), string(ka) == string(kb))
	}
	sec := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ops", Name: sealing.KeySecret}, sec); err != nil {
		t.Fatalf("the key Secret: %v", err)
	}

	bad := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: sealing.KeySecret}, Data: map[string][]byte{"key": []byte("short")}}).Build()
	if _, err := sealing.NewKeys(bad, bad, "ops").Get(ctx); err == nil || !strings.Contains(err.Error(), "32 bytes") {
		t.Errorf("a short key: %v", err)
	}
}

// Issue 42 finding 3, without the webhook: a controller reference naming a sync by its exact
// apiVersion, Kind, name and UID is anyone's to write. It lends the sync's kubeconfig only to a
// VidraResource the operator sealed for that sync (or admission sealed), and to any while it is
// being deleted (its finalizer removes only what carries its own mark).
func TestForgedControllerReferenceLendsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := sealedSync()
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(s).Build()
	seals := testSealer(t, c, time.Now())
	r := &VidraResourceReconciler{client: c, seals: seals, trustAdmitted: true}

	forged := sealedResource()
	forged.UID = "uid-forged"
	if who := r.claimant(ctx, forged); len(who.Syncs) != 0 || who.Admitted != "" {
		t.Errorf("unsealed, forged reference: lent syncs %v, admitted %q", who.Syncs, who.Admitted)
	}
	if err := r.unsealedKubeconfig(ctx, forged); err == nil || !strings.Contains(err.Error(), "team/kube") {
		t.Errorf("unsealed admitted kubeconfig: %v", err)
	}

	owned := sealedResource()
	if err := seals.Seal(ctx, owned, sealing.Owned); err != nil {
		t.Fatal(err)
	}
	if who := r.claimant(ctx, owned); len(who.Syncs) != 1 || who.Admitted != "" {
		t.Errorf("sealed by the operator for an unsealed sync: lent syncs %v (want the sync), admitted %q (want none)", who.Syncs, who.Admitted)
	}

	admitted := sealedResource()
	if err := seals.Seal(ctx, admitted, sealing.Admitted); err != nil {
		t.Fatal(err)
	}
	if who := r.claimant(ctx, admitted); len(who.Syncs) != 1 || who.Admitted != "team/kube" {
		t.Errorf("sealed as admitted: lent syncs %v, admitted %q", who.Syncs, who.Admitted)
	}

	deleting := sealedResource()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if who := r.claimant(ctx, deleting); len(who.Syncs) != 1 {
		t.Errorf("unsealed, being deleted: lent syncs %v; want the sync (its cleanup must reach the cluster)", who.Syncs)
	}
}

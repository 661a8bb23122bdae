package webhook_test

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/sealing"
)

// sealOf is what obj's stored seal vouches for ("admitted", "owned"), or "unsealed: why".
func sealOf(t *testing.T, obj client.Object) string {
	t.Helper()
	if err := env.Client.Get(ctx(t), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	// The operator's namespace in these tests is none: its key lives in "default".
	got, err := sealing.VerifySeal(ctx(t), env.Client, "default", obj)
	if err != nil {
		return "unsealed: " + err.Error()
	}
	return got
}

func mergePatch(s string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(s)) }

// Issue 42 finding 3: the webhook seals what it found the writer had the rights for, and only
// that. A seal the writer brings is replaced; a change by someone without the rights leaves no
// seal; an object written with no check (here by the operator's identity, as before the
// webhook existed) is unsealed until someone with the rights re-admits it with one annotation.
func TestAdmissionSealsWhatTheWriterMayAsk(t *testing.T) {
	a, nsA, asA := tenant(t, "sealed-a")
	_, nsB, asB := tenant(t, "sealed-b")
	url := "https://infrahub-seal.example"
	_ = a

	// A's own sync, with a seal she made up: admitted, and sealed by the webhook instead.
	own := syncTo("seal-own-"+nsA, url, infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"})
	own.Annotations = map[string]string{infrahubv1alpha1.SealAnnotation: "v1.a.1.." + "forged"}
	if err := asA.Create(ctx(t), own); err != nil {
		t.Fatalf("tenant A's sync refused: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), own) })
	if got := sealOf(t, own); got != "admitted" {
		t.Fatalf("tenant A's own sync: %s; want admitted", got)
	}
	sealed := own.Annotations[infrahubv1alpha1.SealAnnotation]

	// B labels it (no instruction to the operator, admitted): the seal stays as it was.
	if err := asB.Patch(ctx(t), own.DeepCopy(), mergePatch(`{"metadata":{"labels":{"seen-by":"b"}}}`)); err != nil {
		t.Fatalf("a label refused: %v", err)
	}
	if got := sealOf(t, own); got != "admitted" || own.Annotations[infrahubv1alpha1.SealAnnotation] != sealed {
		t.Errorf("after B's label: %s, seal changed %t; want the same seal", got, own.Annotations[infrahubv1alpha1.SealAnnotation] != sealed)
	}
	// B drops the seal or writes one of her own: the sync keeps A's. A re-admits her own sync.
	for _, patch := range []string{
		fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, infrahubv1alpha1.SealAnnotation),
		fmt.Sprintf(`{"metadata":{"annotations":{%q:"v1.a.1..made-up"}}}`, infrahubv1alpha1.SealAnnotation),
	} {
		_ = asB.Patch(ctx(t), own.DeepCopy(), mergePatch(patch))
		if got := sealOf(t, own); got != "admitted" || own.Annotations[infrahubv1alpha1.SealAnnotation] != sealed {
			t.Errorf("after B's patch %s: %s, seal changed %t; want A's seal", patch, got, own.Annotations[infrahubv1alpha1.SealAnnotation] != sealed)
		}
	}
	if err := asA.Patch(ctx(t), own.DeepCopy(), mergePatch(fmt.Sprintf(`{"metadata":{"annotations":{%q:"1"}}}`, infrahubv1alpha1.ReadmitAnnotation))); err != nil {
		t.Fatalf("A re-admitting her sync refused: %v", err)
	}
	if got := sealOf(t, own); got != "admitted" {
		t.Errorf("after A re-admitted it: %s", got)
	}

	// Written without a check (the operator's own identity writes what it likes): unsealed.
	// B may not re-admit it (the rights are A's); A may, with one annotation.
	legacy := syncTo("seal-legacy-"+nsA, url, infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"})
	mustCreate(t, legacy)
	if got := sealOf(t, legacy); got == "admitted" {
		t.Fatalf("a sync written with no check is sealed")
	}
	forbidden(t, asB.Patch(ctx(t), legacy.DeepCopy(), mergePatch(fmt.Sprintf(`{"metadata":{"annotations":{%q:"1"}}}`, infrahubv1alpha1.ReadmitAnnotation))),
		"may not impersonate")
	if err := asB.Patch(ctx(t), legacy.DeepCopy(), mergePatch(`{"metadata":{"labels":{"seen-by":"b"}}}`)); err != nil {
		t.Fatalf("a label refused: %v", err)
	}
	if got := sealOf(t, legacy); got == "admitted" {
		t.Errorf("B's label sealed a sync B has no rights for")
	}
	if err := asA.Patch(ctx(t), legacy.DeepCopy(), mergePatch(fmt.Sprintf(`{"metadata":{"annotations":{%q:"1"}}}`, infrahubv1alpha1.ReadmitAnnotation))); err != nil {
		t.Fatalf("A re-admitting the sync refused: %v", err)
	}
	if got := sealOf(t, legacy); got != "admitted" {
		t.Errorf("after A re-admitted it: %s", got)
	}

	// VidraResources the same: A's own sealed; B's edit of its manifest refused.
	vr := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "seal-vr-" + nsA},
		Spec: infrahubv1alpha1.VidraResourceSpec{Destination: infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"},
			Manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"}}
	if err := asA.Create(ctx(t), vr); err != nil {
		t.Fatalf("tenant A's VidraResource refused: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), vr) })
	if got := sealOf(t, vr); got != "admitted" {
		t.Errorf("tenant A's VidraResource: %s", got)
	}
	forbidden(t, asB.Patch(ctx(t), vr.DeepCopy(), mergePatch(`{"spec":{"manifest":"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: planted\n"}}`)),
		"may not impersonate")
	_ = nsB
}

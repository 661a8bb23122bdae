package webhook_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/webhook/rights"
)

// Issue 42, finding 4: limits were per sync, and hand-made VidraResources had none. Each writer
// may have at most --delivery-max-objects-per-writer (3 in this package) of each kind, counted
// by the label the mutating webhook records them with; another writer, and the operator, are
// not held by it.
func TestWriterQuota(t *testing.T) {
	a, nsA, asA := tenant(t, "quota-a")
	_, nsB, asB := tenant(t, "quota-b")
	vrOf := func(name, ns string) *infrahubv1alpha1.VidraResource {
		return &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: infrahubv1alpha1.VidraResourceSpec{Destination: infrahubv1alpha1.Destination{Namespace: ns, ServiceAccountName: "deployer"}}}
	}
	create := func(c client.Client, obj client.Object) error {
		err := c.Create(ctx(t), obj)
		if err == nil {
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
		}
		return err
	}
	label := rights.WriterLabelValue(a)
	var first *infrahubv1alpha1.VidraResource
	for i := range 3 {
		vr := vrOf(fmt.Sprintf("%s-vr-%d", a, i), nsA)
		if err := create(asA, vr); err != nil {
			t.Fatalf("VidraResource %d of 3 refused: %v", i+1, err)
		}
		if vr.Labels[infrahubv1alpha1.WriterLabel] != label {
			t.Fatalf("created without the writer label: %v", vr.Labels)
		}
		if first == nil {
			first = vr
		}
	}
	// The quota counts from the webhook's cache, which follows the creates: dry runs until it has.
	refusedDry := func(obj client.Object) func() (bool, string) {
		return func() (bool, string) {
			err := asA.Create(ctx(t), obj.DeepCopyObject().(client.Object), client.DryRunAll)
			return err != nil, "admitted"
		}
	}
	testenv.Eventually(t, 10*time.Second, "a fourth VidraResource refused", refusedDry(vrOf(a+"-vr-4", nsA)))
	forbidden(t, create(asA, vrOf(a+"-vr-4", nsA)), fmt.Sprintf(`user %q already has 3 VidraResources, the most one writer may have`, a))
	if err := create(asB, vrOf("quota-b-vr", nsB)); err != nil {
		t.Fatalf("another writer's VidraResource refused: %v", err)
	}
	// The label cannot be taken off (nor changed) to leave the count.
	upd := first.DeepCopy()
	delete(upd.Labels, infrahubv1alpha1.WriterLabel)
	upd.Labels["other"] = "x"
	if err := asA.Update(ctx(t), upd); err != nil {
		t.Fatalf("updating the labels: %v", err)
	}
	if upd.Labels[infrahubv1alpha1.WriterLabel] != label || upd.Labels["other"] != "x" {
		t.Fatalf("after the update the labels are %v", upd.Labels)
	}
	// One deleted frees its place.
	if err := env.Client.Delete(ctx(t), first); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "a VidraResource admitted once one is gone", func() (bool, string) {
		err := asA.Create(ctx(t), vrOf(a+"-vr-5", nsA), client.DryRunAll)
		return err == nil, fmt.Sprint(err)
	})
	if err := create(asA, vrOf(a+"-vr-5", nsA)); err != nil {
		t.Fatalf("a VidraResource refused once one is gone: %v", err)
	}

	// InfrahubSyncs are counted apart, by the same bound.
	url := "https://infrahub-quota.example"
	for i := range 3 {
		if err := create(asA, syncTo(fmt.Sprintf("%s-sync-%d", a, i), url, infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"})); err != nil {
			t.Fatalf("InfrahubSync %d of 3 refused: %v", i+1, err)
		}
	}
	testenv.Eventually(t, 10*time.Second, "a fourth InfrahubSync refused",
		refusedDry(syncTo(a+"-sync-4", url, infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"})))
	forbidden(t, create(asA, syncTo(a+"-sync-4", url, infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"})),
		fmt.Sprintf(`user %q already has 3 InfrahubSyncs`, a))

	// The operator's own (the admin's, in this package) carry no writer label and are not counted.
	own := vrOf(a+"-operator", nsA)
	own.Labels = map[string]string{infrahubv1alpha1.WriterLabel: label}
	if err := create(env.Client, own); err != nil {
		t.Fatal(err)
	}
	if _, ok := own.Labels[infrahubv1alpha1.WriterLabel]; ok {
		t.Fatalf("the operator's VidraResource carries a writer label: %v", own.Labels)
	}
}

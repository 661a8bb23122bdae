package delivery

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

// An artifact that ships a CRD with custom resources of it, and a Namespace with objects in it,
// is applied in stages in one pass: definitions first, waited for, then what needs them. Before
// the staged apply, the custom resource's kind was "not served" and the whole artifact refused.
func TestStagedApplyOfDefinitionsAndWhatNeedsThem(t *testing.T) {
	o := fastOptions()
	ns := namespace(t)
	fresh := fmt.Sprintf("staged-%d", time.Now().UnixNano()%1_000_000)
	o.Policy.AllowedKinds = []string{"*", "Namespace", "CustomResourceDefinition.apiextensions.k8s.io"}
	o.Policy.AllowedNamespaces = []string{ns, fresh}
	h := startManager(t, o)
	crd := fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.%[1]s.example.com
spec:
  group: %[1]s.example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`, fresh)
	gadget := fmt.Sprintf("apiVersion: %s.example.com/v1\nkind: Gadget\nmetadata:\n  name: g1\nspec:\n  size: 3\n", fresh)
	namespaceDoc := fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", fresh)
	// Definitions last in the manifest: the order of the artifact does not matter.
	newResource(t, "d-staged", ns, docs(gadget, configMapYAML("in-new-ns", fresh, "1"), crd, namespaceDoc))
	vr := waitResource(t, "d-staged", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	if len(vr.Status.ManagedResources) != 4 {
		t.Fatalf("managed %v, want the 4 objects", vr.Status.ManagedResources)
	}
	g := &unstructured.Unstructured{}
	g.SetAPIVersion(fresh + ".example.com/v1")
	g.SetKind("Gadget")
	if err := exists(t, env.Client, g, ns, "g1"); err != nil {
		t.Fatalf("custom resource: %v", err)
	}
	if err := exists(t, env.Client, &corev1.ConfigMap{}, fresh, "in-new-ns"); err != nil {
		t.Fatalf("object in the new namespace: %v", err)
	}

	// Then, unchanged: the periodic and forced passes write nothing (the custom resource is
	// watched from the pass after its CRD).
	h.writes.reset()
	requestSync(t, getResource(t, "d-staged"))
	eventually(t, 10*time.Second, func() error {
		if getResource(t, "d-staged").Status.ObservedGeneration == 0 {
			return fmt.Errorf("not observed")
		}
		return nil
	})
	if got := h.writes.count("PATCH", "/g1"); got > 1 { // the forced pass dry-runs it once
		t.Fatalf("custom resource patched %d times on an unchanged pass: %s", got, h.writes)
	}

	// Deleting the VidraResource removes it all, the definitions too.
	deleteResource(t, "d-staged")
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "d-staged"}, &infrahubv1alpha1.VidraResource{}); err == nil {
		t.Fatal("VidraResource still there: its cleanup is held")
	}
	eventually(t, 10*time.Second, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "gadgets." + fresh + ".example.com"}, crd); err == nil && crd.DeletionTimestamp == nil {
			return fmt.Errorf("CRD left behind")
		}
		n := &corev1.Namespace{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: fresh}, n); err == nil && n.DeletionTimestamp == nil {
			return fmt.Errorf("namespace left behind")
		}
		return nil
	})
}

// Drift is judged by a server-side dry-run against the live object: when a field we manage
// passed to another manager with the same value (an edit away and back), nothing of ours is
// different and nothing is written. Before, any change of our field set re-applied, rewriting the
// object's field ownership.
func TestDriftIsJudgedByDryRunDiff(t *testing.T) {
	startManager(t, fastOptions())
	ns := namespace(t)
	newResource(t, "d-diff", ns, configMapYAML("diffed", "", "a"), func(vr *infrahubv1alpha1.VidraResource) {
		vr.Spec.Destination.ReconcileOnEvents = false // the edits' events bring report-only passes
	})
	waitResource(t, "d-diff", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	edit := func(value string) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cm := &corev1.ConfigMap{}
			if err := exists(t, env.Client, cm, ns, "diffed"); err != nil {
				return err
			}
			cm.Data["value"] = value
			return env.Client.Update(context.Background(), cm, client.FieldOwner("kubectl-edit"))
		}); err != nil {
			t.Fatal(err)
		}
	}
	edit("b")
	edit("a")
	var rv string
	eventually(t, 10*time.Second, func() error {
		cm := &corev1.ConfigMap{}
		if err := exists(t, env.Client, cm, ns, "diffed"); err != nil {
			return err
		}
		if cm.Data["value"] != "a" {
			return fmt.Errorf("value %q", cm.Data["value"])
		}
		rv = cm.ResourceVersion
		return nil
	})
	// A forced pass: token differs from the last apply, the dry-run finds nothing to change.
	requestSync(t, getResource(t, "d-diff"))
	consistently(t, 2*time.Second, func() error {
		cm := &corev1.ConfigMap{}
		if err := exists(t, env.Client, cm, ns, "diffed"); err != nil {
			return err
		}
		if cm.ResourceVersion != rv {
			var managers []string
			for _, f := range cm.ManagedFields {
				managers = append(managers, f.Manager+":"+string(f.Operation))
			}
			return fmt.Errorf("object rewritten with nothing to change (managers now %s)", strings.Join(managers, ", "))
		}
		return nil
	})
}

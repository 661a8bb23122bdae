package delivery

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
)

// Under driftPolicy Warn (set on the sync, copied into its VidraResource) a field someone else
// changed by force is left as they set it: status.drift names the object and the field, the
// Drifted condition is True, a DriftDetected Warning event names the object. Switching the sync
// to Correct restores the field and clears the report.
func TestDriftPolicyWarnReportsAndCorrectRestores(t *testing.T) {
	o := fastOptions()
	startManager(t, o)
	ns := namespace(t)
	e, url := startInfrahub(t, nil, "drift-warn")
	if _, err := e.AddArtifact("main", "drift-art", "application/yaml", []byte(configMapYAML("drifty", "", "1"))); err != nil {
		t.Fatal(err)
	}
	newSync(t, "drift-warn", url, "drift-art", ns, func(s *infrahubv1alpha1.InfrahubSync) {
		s.Spec.DriftPolicy = infrahubv1alpha1.DriftPolicyWarn
	})
	waitSync(t, "drift-warn", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
	var list infrahubv1alpha1.VidraResourceList
	if err := env.Client.List(context.Background(), &list, client.MatchingLabels{manifests.SyncLabel: "drift-warn"}); err != nil || len(list.Items) != 1 {
		t.Fatalf("the sync's VidraResources: %d (%v)", len(list.Items), err)
	}
	name := list.Items[0].Name
	if got := list.Items[0].Spec.DriftPolicy; got != infrahubv1alpha1.DriftPolicyWarn {
		t.Fatalf("VidraResource driftPolicy %q: the sync's was not copied", got)
	}
	eventually(t, 10*time.Second, func() error {
		vr := getResource(t, name)
		if c := meta.FindStatusCondition(vr.Status.Conditions, infrahubv1alpha1.ConditionDrifted); c == nil || c.Status != metav1.ConditionFalse || c.Reason != infrahubv1alpha1.ReasonNoDrift {
			return fmt.Errorf("Drifted condition %+v: want False NoDrift after the first apply", c)
		}
		return nil
	})

	// A hand edit by another manager, forced: it takes the field from our apply.
	hand := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "drifty", "namespace": ns},
		"data":     map[string]any{"value": "hand"},
	}}
	if err := env.Client.Patch(context.Background(), hand, client.Apply, client.FieldOwner("hand-editor"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	requestSync(t, getResource(t, name))
	eventually(t, 15*time.Second, func() error {
		vr := getResource(t, name)
		c := meta.FindStatusCondition(vr.Status.Conditions, infrahubv1alpha1.ConditionDrifted)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != infrahubv1alpha1.ReasonDriftDetected {
			return fmt.Errorf("Drifted condition %+v: want True DriftDetected", c)
		}
		want := infrahubv1alpha1.DriftedObject{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "drifty"}
		if len(vr.Status.Drift) != 1 || !slices.Contains(vr.Status.Drift[0].Fields, "/data/value") {
			return fmt.Errorf("status.drift %+v: want %+v with /data/value", vr.Status.Drift, want)
		}
		got := vr.Status.Drift[0]
		got.Fields = nil
		if !reflect.DeepEqual(got, want) {
			return fmt.Errorf("status.drift names %+v, want %+v", got, want)
		}
		return nil
	})
	waitVREvent(t, name, infrahubv1alpha1.ReasonDriftDetected, "ConfigMap/"+ns+"/drifty (/data/value)")
	valueIs := func(want string) func() error {
		return func() error {
			cm := &corev1.ConfigMap{}
			if err := exists(t, env.Client, cm, ns, "drifty"); err != nil {
				return err
			}
			if cm.Data["value"] != want {
				return fmt.Errorf("data.value %q, want %q", cm.Data["value"], want)
			}
			return nil
		}
	}
	requestSync(t, getResource(t, name)) // another full pass leaves it too
	consistently(t, 2*time.Second, valueIs("hand"))
	waitResource(t, name, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, time.Second)

	// Correct: the sync rewrites its VidraResource, whose next pass restores the field.
	patchObject(t, env.Client, &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: "drift-warn"}}, func(s *infrahubv1alpha1.InfrahubSync) {
		s.Spec.DriftPolicy = infrahubv1alpha1.DriftPolicyCorrect
	})
	eventually(t, 30*time.Second, valueIs("1"))
	eventually(t, 10*time.Second, func() error {
		vr := getResource(t, name)
		if vr.Spec.DriftPolicy != infrahubv1alpha1.DriftPolicyCorrect || len(vr.Status.Drift) != 0 ||
			meta.FindStatusCondition(vr.Status.Conditions, infrahubv1alpha1.ConditionDrifted) != nil {
			return fmt.Errorf("driftPolicy %q, drift %+v, conditions %+v: want Correct, no drift report", vr.Spec.DriftPolicy, vr.Status.Drift, vr.Status.Conditions)
		}
		return nil
	})
}

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
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
)

// Two syncs, "apps" dependsOn "defs": defs' artifact a CRD, apps' an object of it. apps
// delivers nothing while defs does not exist or is not ready (Pending, DependencyNotReady,
// waitingOn naming it), and its object is applied only once defs is Succeeded with the CRD
// Established; without the dependency the object would fail first (its kind not served).
func TestDependsOnWaitsForTheDefinitions(t *testing.T) {
	o := fastOptions()
	ns := namespace(t)
	group := fmt.Sprintf("dep%d.example.com", time.Now().UnixNano()%1_000_000)
	o.Policy.AllowedKinds = []string{"*", "CustomResourceDefinition.apiextensions.k8s.io"}
	startManager(t, o)
	e, url := startInfrahub(t, nil, "dep-defs", "dep-apps")
	crd := fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.%[1]s
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`, group)
	if _, err := e.AddArtifact("main", "dep-defs-art", "application/yaml", []byte(crd)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddArtifact("main", "dep-apps-art", "application/yaml", []byte("apiVersion: "+group+"/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 2\n")); err != nil {
		t.Fatal(err)
	}

	newSync(t, "dep-apps", url, "dep-apps-art", ns, func(s *infrahubv1alpha1.InfrahubSync) {
		s.Spec.DependsOn = []infrahubv1alpha1.Dependency{{Name: "dep-defs"}}
	})
	s := waitSync(t, "dep-apps", infrahubv1alpha1.StatePending, infrahubv1alpha1.ReasonDependencyNotReady, 30*time.Second)
	if s.Status.WaitingOn != "dep-defs" {
		t.Fatalf("waitingOn %q", s.Status.WaitingOn)
	}
	var list infrahubv1alpha1.VidraResourceList
	if err := env.Client.List(context.Background(), &list, client.MatchingLabels{manifests.SyncLabel: "dep-apps"}); err != nil || len(list.Items) != 0 {
		t.Fatalf("the waiting sync delivered %d VidraResources (%v)", len(list.Items), err)
	}

	newSync(t, "dep-defs", url, "dep-defs-art", ns)
	waitSync(t, "dep-defs", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
	s = waitSync(t, "dep-apps", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
	if s.Status.WaitingOn != "" {
		t.Fatalf("waitingOn %q after it delivered", s.Status.WaitingOn)
	}
	w := &unstructured.Unstructured{}
	w.SetAPIVersion(group + "/v1")
	w.SetKind("Widget")
	if err := exists(t, env.Client, w, ns, "w1"); err != nil {
		t.Fatalf("the object of the CRD: %v", err)
	}
	def := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "widgets." + group}, def); err != nil {
		t.Fatal(err)
	}
	var established *apiextensionsv1.CustomResourceDefinitionCondition
	for i, c := range def.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			established = &def.Status.Conditions[i]
		}
	}
	if established == nil {
		t.Fatalf("CRD conditions %v", def.Status.Conditions)
	}
	// The object came after the definition was Established, not before (seconds: the API's
	// resolution).
	if created := w.GetCreationTimestamp(); created.Before(&established.LastTransitionTime) {
		t.Fatalf("Widget created at %s, before its CRD was Established at %s", w.GetCreationTimestamp(), established.LastTransitionTime)
	}
	if err := env.Client.List(context.Background(), &list, client.MatchingLabels{manifests.SyncLabel: "dep-apps"}); err != nil || len(list.Items) != 1 ||
		len(list.Items[0].Spec.DependsOn) != 1 || list.Items[0].Spec.DependsOn[0].Name != "dep-defs" {
		t.Fatalf("the sync's VidraResources %+v (%v): want one carrying its dependsOn", list.Items, err)
	}
}

// A VidraResource made by hand with spec.dependsOn applies nothing while the sync it names is
// missing (Pending, DependencyNotReady naming it), and applies once that sync is Succeeded with
// every VidraResource healthy.
func TestDependsOnHoldsAHandMadeVidraResource(t *testing.T) {
	o := fastOptions()
	ns := namespace(t)
	startManager(t, o)
	e, url := startInfrahub(t, nil, "dep-base")
	if _, err := e.AddArtifact("main", "dep-base-art", "application/yaml", []byte(configMapYAML("base", ns, "1"))); err != nil {
		t.Fatal(err)
	}
	newResource(t, "dep-hand", ns, configMapYAML("on-top", ns, "2"), func(vr *infrahubv1alpha1.VidraResource) {
		vr.Spec.DependsOn = []infrahubv1alpha1.Dependency{{Name: "dep-base"}}
	})
	vr := waitResource(t, "dep-hand", infrahubv1alpha1.StatePending, infrahubv1alpha1.ReasonDependencyNotReady, 30*time.Second)
	// Named, not described: the sync is not the VidraResource writer's to read.
	if msg := conditionMessage(vr); !strings.Contains(msg, "waiting on InfrahubSync dep-base;") || strings.Contains(msg, "does not exist") {
		t.Fatalf("status %+v", vr.Status)
	}
	if err := exists(t, env.Client, &corev1.ConfigMap{}, ns, "on-top"); err == nil {
		t.Fatal("applied while its dependency does not exist")
	}
	newSync(t, "dep-base", url, "dep-base-art", ns)
	waitResource(t, "dep-hand", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	if err := exists(t, env.Client, &corev1.ConfigMap{}, ns, "on-top"); err != nil {
		t.Fatal(err)
	}
}

func conditionMessage(vr *infrahubv1alpha1.VidraResource) string {
	for _, c := range vr.Status.Conditions {
		if c.Type == infrahubv1alpha1.ConditionReady {
			return c.Message
		}
	}
	return ""
}

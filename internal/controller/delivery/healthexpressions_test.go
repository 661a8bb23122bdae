package delivery

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

// A kind whose objects carry no status is Current for kstatus at once; a healthExpressions
// entry for it keeps the VidraResource's Healthy condition False until the expression holds
// (status.ready set by someone else), then True.
func TestHealthExpressionsDecideHealth(t *testing.T) {
	o := fastOptions()
	o.HealthPoll = time.Second
	startManager(t, o)
	ns := namespace(t)
	group := fmt.Sprintf("hx%d.example.com", time.Now().UnixNano()%1_000_000)
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
	if err := env.Client.Create(context.Background(), crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), crd) })
	eventually(t, 30*time.Second, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(crd), crd); err != nil {
			return err
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("CRD not Established: %v", crd.Status.Conditions)
	})

	newResource(t, "hx", ns, "apiVersion: "+group+"/v1\nkind: Gadget\nmetadata:\n  name: g1\nspec:\n  size: 1\n", func(vr *infrahubv1alpha1.VidraResource) {
		vr.Spec.HealthExpressions = []infrahubv1alpha1.HealthExpression{{APIVersion: group + "/v1", Kind: "Gadget", Current: "status.ready == true", Failed: "has(status.error)"}}
	})
	waitResource(t, "hx", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	notHealthy := func() error {
		vr := getResource(t, "hx")
		c := meta.FindStatusCondition(vr.Status.Conditions, infrahubv1alpha1.ConditionHealthy)
		if c == nil || c.Status != metav1.ConditionFalse || vr.Status.Health != "InProgress" ||
			!strings.Contains(c.Message, "Gadget/"+ns+"/g1: InProgress: healthExpressions[0].current is not true yet") {
			return fmt.Errorf("health %q, condition %+v: want InProgress naming the Gadget and its expression", vr.Status.Health, c)
		}
		return nil
	}
	eventually(t, 10*time.Second, notHealthy)
	consistently(t, 3*time.Second, notHealthy) // three health polls: kstatus alone says Current

	g := &unstructured.Unstructured{}
	g.SetAPIVersion(group + "/v1")
	g.SetKind("Gadget")
	g.SetNamespace(ns)
	g.SetName("g1")
	if err := env.Client.Patch(context.Background(), g, client.RawPatch("application/merge-patch+json", []byte(`{"status":{"ready":true}}`))); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		vr := getResource(t, "hx")
		if c := meta.FindStatusCondition(vr.Status.Conditions, infrahubv1alpha1.ConditionHealthy); vr.Status.Health != "Current" || c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("health %q, condition %+v: want Current once status.ready is true", vr.Status.Health, c)
		}
		return nil
	})

	// The failed expression comes first, whatever current says (a healthy VidraResource polls
	// no more: the next pass sees it).
	if err := env.Client.Patch(context.Background(), g, client.RawPatch("application/merge-patch+json", []byte(`{"status":{"error":"disk full"}}`))); err != nil {
		t.Fatal(err)
	}
	requestSync(t, getResource(t, "hx"))
	eventually(t, 10*time.Second, func() error {
		vr := getResource(t, "hx")
		c := meta.FindStatusCondition(vr.Status.Conditions, infrahubv1alpha1.ConditionHealthy)
		if vr.Status.Health != "Failed" || c == nil || !strings.Contains(c.Message, "healthExpressions[0].failed is true: has(status.error)") {
			return fmt.Errorf("health %q, condition %+v: want Failed naming the failed expression", vr.Status.Health, c)
		}
		return nil
	})
}

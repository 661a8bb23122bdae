package delivery

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

func TestServiceAccountFor(t *testing.T) {
	for _, tc := range []struct {
		d                infrahubv1alpha1.Destination
		defaultSA        string
		wantNS, wantName string
	}{
		{infrahubv1alpha1.Destination{Namespace: "apps", ServiceAccountName: "deployer"}, "", "apps", "deployer"},
		{infrahubv1alpha1.Destination{Namespace: "apps", ServiceAccountName: "deployer", ServiceAccountNamespace: "ci"}, "x", "ci", "deployer"},
		{infrahubv1alpha1.Destination{Namespace: "apps"}, "delivery", "apps", "delivery"},
		{infrahubv1alpha1.Destination{Namespace: "apps"}, "platform/delivery", "platform", "delivery"},
		{infrahubv1alpha1.Destination{}, "delivery", "default", "delivery"},
		{infrahubv1alpha1.Destination{Namespace: "apps"}, "", "", ""},
	} {
		ns, name := ServiceAccountFor(tc.d, tc.defaultSA)
		if ns != tc.wantNS || name != tc.wantName {
			t.Errorf("ServiceAccountFor(%+v, %q) = %s/%s, want %s/%s", tc.d, tc.defaultSA, ns, name, tc.wantNS, tc.wantName)
		}
	}
}

// Issue 24, finding 1: with no ServiceAccount and no default, a VidraResource used to apply as
// the operator. Without --delivery-allow-operator-identity it is refused and says why, and
// nothing is applied.
func TestNoServiceAccountAppliesNothing(t *testing.T) {
	o := fastOptions()
	o.AllowOperatorIdentity = false
	startManager(t, o)
	ns := namespace(t)
	newResource(t, "no-sa", ns, configMapYAML("no-sa", "", "1"))
	vr := waitResource(t, "no-sa", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonNoServiceAccount, 30*time.Second)
	if !strings.Contains(vr.Status.LastError, "--delivery-allow-operator-identity") {
		t.Fatalf("lastError %q does not say how to allow it", vr.Status.LastError)
	}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "no-sa"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the ConfigMap was applied, or reading it failed: %v", err)
	}
}

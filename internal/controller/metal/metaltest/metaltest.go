// Package metaltest holds the fixtures of the metal controllers' single-pass table tests: objects
// as the controllers find them, and a fake client that answers their lookups as the manager's
// cache does.
//
// Only test files import it; it imports no controller package nor the assembly (hack/layers.sh),
// so that every controller's tests can use it.
package metaltest

import (
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/registry"
	"github.com/metalhub/metalhub/internal/scheme"
)

// FreeServer is a server a claim may bind: Available by its annotation, observed off.
func FreeServer(name string, labels map[string]string, mutate ...func(*metalv1alpha1.Server)) *metalv1alpha1.Server {
	s := &metalv1alpha1.Server{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{
			lifecycle.StateAnnotation: string(metalv1alpha1.ServerStateAvailable),
		}},
		Spec:   metalv1alpha1.ServerSpec{SystemUUID: "uuid-" + name},
		Status: metalv1alpha1.ServerStatus{State: metalv1alpha1.ServerStateAvailable, PowerState: metalv1alpha1.PowerStateOff},
	}
	for _, m := range mutate {
		m(s)
	}
	return s
}

// FakeClient is a fake client holding objects, with the status subresource of the metal kinds
// and the controllers' own field indexes: what the single-pass table tests run on.
func FakeClient(objects ...client.Object) client.Client {
	fb := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objects...).
		WithStatusSubresource(&metalv1alpha1.Server{}, &metalv1alpha1.ServerClaim{}, &metalv1alpha1.ServerMaintenance{},
			&metalv1alpha1.ServerBootConfiguration{})
	for _, i := range index.All() {
		fb = fb.WithIndex(i.Obj, i.Name, i.Fn)
	}
	// The registry's index of Servers by system UUID (registry.SetupIndexes in the manager).
	fb = fb.WithIndex(&metalv1alpha1.Server{}, index.ServerUUID, func(o client.Object) []string {
		return []string{registry.NormalizeUUID(o.(*metalv1alpha1.Server).Spec.SystemUUID)}
	})
	return fb.Build()
}

// NewMaintenance is a maintenance of server with a reason, as a user or another controller
// writes one.
func NewMaintenance(ns, name, server string, policy metalv1alpha1.ServerMaintenancePolicy, power metalv1alpha1.Power, prio int32) *metalv1alpha1.ServerMaintenance {
	return &metalv1alpha1.ServerMaintenance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{metalv1alpha1.MaintenanceReasonAnnotation: "firmware update"}},
		Spec: metalv1alpha1.ServerMaintenanceSpec{ServerRef: &corev1.LocalObjectReference{Name: server}, Policy: policy,
			ServerPower: power, Priority: prio},
	}
}

// PhaseReason is "<phase>/<reason of the condition typ>", what the status tests compare.
func PhaseReason(phase string, conds []metav1.Condition, typ string) string {
	reason := ""
	if c := apimeta.FindStatusCondition(conds, typ); c != nil {
		reason = c.Reason
	}
	return phase + "/" + reason
}

// MaintenanceStatus is "<state>/<reason of InMaintenance>".
func MaintenanceStatus(m *metalv1alpha1.ServerMaintenance) string {
	if m == nil {
		return "gone"
	}
	return PhaseReason(string(m.Status.State), m.Status.Conditions, metalv1alpha1.ConditionInMaintenance)
}

package migrate

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal"
	"github.com/metalhub/metalhub/internal/scheme"
)

func TestServerActions(t *testing.T) {
	claims := map[string]*metalv1alpha1.ServerClaim{
		"ns/on": {Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn}},
	}
	maints := map[string]*metalv1alpha1.ServerMaintenance{
		"ns/off": {Spec: metalv1alpha1.ServerMaintenanceSpec{ServerPower: metalv1alpha1.PowerOff}},
	}
	srv := func(state metalv1alpha1.ServerState, power metalv1alpha1.PowerState, mutate ...func(*metalv1alpha1.Server)) *metalv1alpha1.Server {
		s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "s"}}
		s.Status.State, s.Status.PowerState = state, power
		for _, m := range mutate {
			m(s)
		}
		return s
	}
	claimed := func(name string) func(*metalv1alpha1.Server) {
		return func(s *metalv1alpha1.Server) {
			s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "ns", Name: name}
		}
	}
	for _, tc := range []struct {
		name string
		s    *metalv1alpha1.Server
		want string // "" for none, else a substring of the one action
	}{
		{"available off", srv(metalv1alpha1.ServerStateAvailable, metalv1alpha1.PowerStateOff), ""},
		{"available on is powered off", srv(metalv1alpha1.ServerStateAvailable, metalv1alpha1.PowerStateOn), "power Off"},
		{"reserved as its claim asks", srv(metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerStateOn, claimed("on")), ""},
		{"reserved off, claim wants on", srv(metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerStateOff, claimed("on")), "power On"},
		{"reserved, claim gone", srv(metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerStateOn, claimed("gone")), "release"},
		{"no state: discovered", srv("", ""), "discover"},
		{"discovery on: waits", srv(metalv1alpha1.ServerStateDiscovery, metalv1alpha1.PowerStateOn), "none until it is Off"},
		{"discovery off: again", srv(metalv1alpha1.ServerStateDiscovery, metalv1alpha1.PowerStateOff), "discover again"},
		{"parked", srv(metalv1alpha1.ServerStateParked, metalv1alpha1.PowerStateOn, func(s *metalv1alpha1.Server) {
			s.Annotations = map[string]string{metalv1alpha1.ParkedAnnotation: "true"}
		}), ""},
		{"maintenance as asked", srv(metalv1alpha1.ServerStateMaintenance, metalv1alpha1.PowerStateOff, func(s *metalv1alpha1.Server) {
			s.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Namespace: "ns", Name: "off"}
		}), ""},
		{"maintenance, power differs", srv(metalv1alpha1.ServerStateMaintenance, metalv1alpha1.PowerStateOn, func(s *metalv1alpha1.Server) {
			s.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Namespace: "ns", Name: "off"}
		}), "power Off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state, src := metal.StateOnStart(tc.s)
			got := serverActions(tc.s, state, src, claims, maints)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("actions %q, want none (state %s)", got, state)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("actions %q, want one saying %q (state %s)", got, tc.want, state)
			}
		})
	}
}

func TestFinalizerBlockers(t *testing.T) {
	s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Finalizers: []string{
		metal.ServerFinalizer, "metal.ironcore.dev/biossettings", "example.com/other"}}}
	got := finalizerBlockers(s)
	if len(got) != 1 || !strings.Contains(got[0], "metal.ironcore.dev/biossettings") {
		t.Fatalf("blockers %q, want only the reference's biossettings finalizer", got)
	}
}

// Deletions the reference had not finished are finished by metalhub's finalizers (the same
// names): the plan lists what that does to the boxes.
func TestPlanListsUnfinishedDeletions(t *testing.T) {
	now := metav1.Now()
	objs := []client.Object{
		&metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: metalv1alpha1.BMCSpec{
			Access: &metalv1alpha1.InlineEndpoint{IP: "10.0.0.1"}, Protocol: metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: 443}}},
		&metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "gone", DeletionTimestamp: &now, Finalizers: []string{metal.ServerFinalizer}},
			Spec:   metalv1alpha1.ServerSpec{SystemUUID: "u1", BMCRef: &corev1.LocalObjectReference{Name: "b"}},
			Status: metalv1alpha1.ServerStatus{State: metalv1alpha1.ServerStateAvailable}},
		&metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "kept"},
			Spec:   metalv1alpha1.ServerSpec{SystemUUID: "u2", BMCRef: &corev1.LocalObjectReference{Name: "b"}},
			Status: metalv1alpha1.ServerStatus{State: metalv1alpha1.ServerStateAvailable, PowerState: metalv1alpha1.PowerStateOff}},
		&metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", DeletionTimestamp: &now, Finalizers: []string{metal.ServerClaimFinalizer}},
			Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "i", ServerRef: &corev1.LocalObjectReference{Name: "kept"}}},
	}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).Build()
	p, err := Make(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	p.Print(&out)
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == "gone" && !strings.Contains(l, "finish its deletion: power Off") {
			t.Errorf("the Server being deleted: %q", l)
		}
	}
	for _, want := range []string{"release Server kept"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan does not say %q:\n%s", want, out.String())
		}
	}
	if p.Blocked() {
		t.Errorf("plan blocked by deletions metalhub finishes:\n%s", out.String())
	}
}

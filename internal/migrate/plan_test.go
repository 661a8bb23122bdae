package migrate

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/claim"
	"github.com/metalhub/metalhub/internal/controller/metal/server"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/scheme"
)

// Every state the reference can leave a Server in, with the BMC requests metalhub's first passes
// make on it. test/migration runs the same layouts against the emulated BMCs.
func TestServerActions(t *testing.T) {
	uid := func(u string) types.UID { return types.UID(u) }
	r := refs{
		claims: map[string]*metalv1alpha1.ServerClaim{
			"ns/on":  {Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn}},
			"ns/off": {Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOff}},
		},
		maintenances: map[string]*metalv1alpha1.ServerMaintenance{
			"ns/off":  {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "off", UID: uid("m-off")}, Spec: metalv1alpha1.ServerMaintenanceSpec{ServerPower: metalv1alpha1.PowerOff}},
			"ns/boot": {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "boot", UID: uid("m-boot")}, Spec: metalv1alpha1.ServerMaintenanceSpec{ServerPower: metalv1alpha1.PowerOn}},
			"ns/moved": {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "moved", UID: uid("m-new"),
				Annotations: map[string]string{lifecycle.MovedFromAnnotation: "m-src"}}, Spec: metalv1alpha1.ServerMaintenanceSpec{ServerPower: metalv1alpha1.PowerOn}},
		},
		bootConfigs: map[string]*metalv1alpha1.ServerBootConfiguration{
			"ns/boot":    {Spec: metalv1alpha1.ServerBootConfigurationSpec{ServerRef: corev1.LocalObjectReference{Name: "s"}}, Status: metalv1alpha1.ServerBootConfigurationStatus{State: metalv1alpha1.ServerBootConfigurationStateReady}},
			"ns/pending": {Spec: metalv1alpha1.ServerBootConfigurationSpec{ServerRef: corev1.LocalObjectReference{Name: "s"}}, Status: metalv1alpha1.ServerBootConfigurationStatus{State: metalv1alpha1.ServerBootConfigurationStatePending}},
		},
	}
	srv := func(state metalv1alpha1.ServerState, power metalv1alpha1.PowerState, mutate ...func(*metalv1alpha1.Server)) *metalv1alpha1.Server {
		s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: metalv1alpha1.ServerSpec{SystemUUID: "u"}}
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
	maintained := func(name, bootConfig string) func(*metalv1alpha1.Server) {
		return func(s *metalv1alpha1.Server) {
			s.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Namespace: "ns", Name: name}
			if bootConfig != "" {
				s.Spec.MaintenanceBootConfigurationRef = &metalv1alpha1.ObjectReference{Namespace: "ns", Name: bootConfig}
			}
		}
	}
	annotated := func(k, v string) func(*metalv1alpha1.Server) {
		return func(s *metalv1alpha1.Server) { lifecycle.SetAnnotation(s, k, v) }
	}
	discovered := func(s *metalv1alpha1.Server) {
		s.Status.NetworkInterfaces = []metalv1alpha1.NetworkInterface{{Name: "eth0", MACAddress: "aa:bb:cc:dd:ee:ff"}}
	}
	const (
		on, off = metalv1alpha1.PowerStateOn, metalv1alpha1.PowerStateOff
	)
	for _, tc := range []struct {
		name string
		s    *metalv1alpha1.Server
		want []Request
		text string // a substring of the first action, when it matters
	}{
		{"no state, off: discovered", srv("", off), []Request{PXEOnce, PowerOn}, "discover"},
		{"initial on: discovered from Off", srv(metalv1alpha1.ServerStateInitial, on), []Request{PowerOff, PXEOnce, PowerOn}, "discover"},
		{"discovery on: waits", srv(metalv1alpha1.ServerStateDiscovery, on), nil, "none until it is Off"},
		{"discovery off: again", srv(metalv1alpha1.ServerStateDiscovery, off), []Request{PXEOnce, PowerOn}, "discover again"},
		{"available off", srv(metalv1alpha1.ServerStateAvailable, off), nil, ""},
		{"available on is powered off", srv(metalv1alpha1.ServerStateAvailable, on), []Request{PowerOff}, "power Off"},
		{"reserved, claim on, box on", srv(metalv1alpha1.ServerStateReserved, on, claimed("on")), nil, ""},
		{"reserved, claim on, box off", srv(metalv1alpha1.ServerStateReserved, off, claimed("on")), []Request{PowerOn}, "power On"},
		{"reserved, claim off, box on", srv(metalv1alpha1.ServerStateReserved, on, claimed("off")), []Request{GracefulOff}, "power Off"},
		{"reserved, claim off, box off", srv(metalv1alpha1.ServerStateReserved, off, claimed("off")), nil, ""},
		{"reserved, claim gone, box on", srv(metalv1alpha1.ServerStateReserved, on, claimed("gone")), []Request{GracefulOff}, "release"},
		{"released with its claim ref, off", srv(metalv1alpha1.ServerStateReleased, off, claimed("gone")), nil, "release"},
		{"released with its claim ref, on", srv(metalv1alpha1.ServerStateReleased, on, claimed("gone")), []Request{GracefulOff}, "release"},
		{"released, ref removed, off", srv(metalv1alpha1.ServerStateReleased, off), nil, ""},
		{"released, ref removed, on", srv(metalv1alpha1.ServerStateReleased, on), []Request{PowerOff}, "power Off"},
		{"parked on", srv(metalv1alpha1.ServerStateParked, on, annotated(metalv1alpha1.ParkedAnnotation, "true")), nil, ""},
		{"parked off", srv(metalv1alpha1.ServerStateParked, off, annotated(metalv1alpha1.ParkedAnnotation, "true")), nil, ""},
		{"maintenance off as asked", srv(metalv1alpha1.ServerStateMaintenance, off, maintained("off", "")), nil, ""},
		{"maintenance, power differs", srv(metalv1alpha1.ServerStateMaintenance, on, maintained("off", "")), []Request{GracefulOff}, "power Off"},
		// The reference powers a box on once the maintenance's configuration is Ready and
		// never restarts a running one: an On box runs it.
		{"maintenance boot, on, adopted", srv(metalv1alpha1.ServerStateMaintenance, on, maintained("boot", "boot")), nil, ""},
		{"maintenance boot, off, adopted", srv(metalv1alpha1.ServerStateMaintenance, off, maintained("boot", "boot")), []Request{PXEOnce, PowerOn}, "boot into"},
		{"maintenance boot, on, configuration pending", srv(metalv1alpha1.ServerStateMaintenance, on, maintained("boot", "pending")), nil, "none until"},
		{"maintenance boot, on, entered by metalhub, not booted", srv(metalv1alpha1.ServerStateMaintenance, on, maintained("boot", "boot"),
			annotated(lifecycle.StateAnnotation, "Maintenance"), annotated(serverstate.PreviousStateAnnotation, "Reserved")), []Request{PXEOnce, Restart}, "boot into"},
		{"maintenance boot, on, booted by metalhub", srv(metalv1alpha1.ServerStateMaintenance, on, maintained("boot", "boot"),
			annotated(lifecycle.StateAnnotation, "Maintenance"), annotated(serverstate.MaintenanceBootAnnotation, "ns/boot/m-boot")), nil, ""},
		{"maintenance boot, on, a moved copy", srv(metalv1alpha1.ServerStateMaintenance, on, maintained("moved", "boot"),
			annotated(lifecycle.StateAnnotation, "Maintenance"), annotated(serverstate.MaintenanceBootAnnotation, "ns/moved/m-src")), nil, ""},
		{"maintenance boot, on, a new maintenance of the same name", srv(metalv1alpha1.ServerStateMaintenance, on, maintained("boot", "boot"),
			annotated(lifecycle.StateAnnotation, "Maintenance"), annotated(serverstate.MaintenanceBootAnnotation, "ns/boot/m-old")), []Request{PXEOnce, Restart}, "boot into"},
		// Adopted Error is no rediscovery.
		{"error, discovered, off", srv(metalv1alpha1.ServerStateError, off, discovered), nil, "Available"},
		{"error, discovered, on", srv(metalv1alpha1.ServerStateError, on, discovered), nil, "stays in Error"},
		{"error, undiscovered, off", srv(metalv1alpha1.ServerStateError, off), nil, "stays in Error"},
		{"error, claimed (derived Reserved)", srv(metalv1alpha1.ServerStateError, on, claimed("on")), nil, ""},
		{"error of metalhub's own, from Available", srv(metalv1alpha1.ServerStateError, on, discovered,
			annotated(lifecycle.StateAnnotation, "Error"), annotated(serverstate.PreviousStateAnnotation, "Available")), []Request{PowerOff}, "Available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state, src := server.StateOnStart(tc.s)
			text, got := serverActions(server.AsOnStart(tc.s), state, src, r)
			if !slices.Equal(got, tc.want) {
				t.Errorf("requests %q, want %q (state %s, actions %q)", got, tc.want, state, text)
			}
			switch {
			case tc.text == "" && len(text) > 0:
				t.Errorf("actions %q, want none (state %s)", text, state)
			case tc.text != "" && (len(text) == 0 || !strings.Contains(text[0], tc.text)):
				t.Errorf("actions %q, want the first saying %q (state %s)", text, tc.text, state)
			}
		})
	}
}

func TestFinalizerBlockers(t *testing.T) {
	s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Finalizers: []string{
		server.Finalizer, "metal.ironcore.dev/biossettings", "example.com/other"}}}
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
		&metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "gone", DeletionTimestamp: &now, Finalizers: []string{server.Finalizer}},
			Spec:   metalv1alpha1.ServerSpec{SystemUUID: "u1", BMCRef: &corev1.LocalObjectReference{Name: "b"}},
			Status: metalv1alpha1.ServerStatus{State: metalv1alpha1.ServerStateAvailable}},
		&metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "kept"},
			Spec:   metalv1alpha1.ServerSpec{SystemUUID: "u2", BMCRef: &corev1.LocalObjectReference{Name: "b"}},
			Status: metalv1alpha1.ServerStatus{State: metalv1alpha1.ServerStateAvailable, PowerState: metalv1alpha1.PowerStateOff}},
		&metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", DeletionTimestamp: &now, Finalizers: []string{claim.Finalizer}},
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

package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// One pass of the Server controller per lifecycle state, driven directly through the lifecycle
// Reconciler: objects on a fake client (with the controllers' field indexes), the box an
// emulated BMC. The row says what the pass does: the state it records, the power action it
// issues (recorded before, in the same write), or nothing. The envtest suites cover the passes
// that follow.
func TestServerStateStep(t *testing.T) {
	const ns = "default"
	claimed := func(s *metalv1alpha1.Server) {
		s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: ns, Name: "c"}
		s.Spec.BootConfigurationRef = &metalv1alpha1.ObjectReference{Namespace: ns, Name: "c"}
	}
	claim := func(power metalv1alpha1.Power) client.Object {
		return &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c", UID: "claim-uid"},
			Spec: metalv1alpha1.ServerClaimSpec{Power: power, Image: "os:1", ServerRef: &corev1.LocalObjectReference{Name: "s"}}}
	}
	bootConfig := func(state metalv1alpha1.ServerBootConfigurationState) client.Object {
		return &metalv1alpha1.ServerBootConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"},
			Spec:   metalv1alpha1.ServerBootConfigurationSpec{ServerRef: corev1.LocalObjectReference{Name: "s"}, Image: "os:1"},
			Status: metalv1alpha1.ServerBootConfigurationStatus{State: state}}
	}
	firstBootOnly := func(o client.Object) client.Object {
		sbc := o.(*metalv1alpha1.ServerBootConfiguration)
		sbc.UID = "sbc-uid"
		sbc.Spec.NetworkBoot = metalv1alpha1.NetworkBootFirstPowerOn
		return sbc
	}
	moved := func(o client.Object) client.Object {
		o.SetUID("copy-uid")
		o.SetAnnotations(map[string]string{lifecycle.MovedFromAnnotation: "source-uid"})
		return o
	}
	cases := []struct {
		name    string
		state   metalv1alpha1.ServerState
		power   string // the box's, on the BMC
		server  func(*metalv1alpha1.Server)
		objects []client.Object
		// wantState is the state annotation after the pass, wantPower the target of the power
		// record it wrote ("" none), wantResets the BMC actions it took.
		wantState  metalv1alpha1.ServerState
		wantPower  metalv1alpha1.Power
		wantResets string
	}{
		{"Available, unclaimed, box on: powered off", metalv1alpha1.ServerStateAvailable, redfish.PowerOn, nil, nil,
			metalv1alpha1.ServerStateAvailable, metalv1alpha1.PowerOff, "[ForceOff]"},
		{"Available, unclaimed, box off: nothing to do", metalv1alpha1.ServerStateAvailable, redfish.PowerOff, nil, nil,
			metalv1alpha1.ServerStateAvailable, "", "[]"},
		{"Available, claimed, boot configuration Ready: Reserved, network-booted and powered on in one pass", metalv1alpha1.ServerStateAvailable, redfish.PowerOff,
			claimed, []client.Object{claim(metalv1alpha1.PowerOn), bootConfig(metalv1alpha1.ServerBootConfigurationStateReady)},
			metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerOn, "[Boot:Pxe/Once On]"},
		{"Available, claimed, boot configuration the built-in provider has not judged yet: Reserved, network-booted and powered on in one pass", metalv1alpha1.ServerStateAvailable, redfish.PowerOff,
			claimed, []client.Object{claim(metalv1alpha1.PowerOn), bootConfig("")},
			metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerOn, "[Boot:Pxe/Once On]"},
		{"Reserved, claim On, box off: network-booted and powered on", metalv1alpha1.ServerStateReserved, redfish.PowerOff,
			claimed, []client.Object{claim(metalv1alpha1.PowerOn), bootConfig(metalv1alpha1.ServerBootConfigurationStateReady)},
			metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerOn, "[Boot:Pxe/Once On]"},
		{"Reserved, claim On, box off, FirstPowerOn not yet booted: network-booted and powered on", metalv1alpha1.ServerStateReserved, redfish.PowerOff,
			claimed, []client.Object{claim(metalv1alpha1.PowerOn), firstBootOnly(bootConfig(metalv1alpha1.ServerBootConfigurationStateReady))},
			metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerOn, "[Boot:Pxe/Once On]"},
		{"Reserved, claim On, box off, FirstPowerOn booted before: the disk", metalv1alpha1.ServerStateReserved, redfish.PowerOff,
			func(s *metalv1alpha1.Server) { claimed(s); s.Annotations[serverstate.ClaimBootAnnotation] = "sbc-uid" },
			[]client.Object{claim(metalv1alpha1.PowerOn), firstBootOnly(bootConfig(metalv1alpha1.ServerBootConfigurationStateReady))},
			metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerOn, "[On]"},
		{"Reserved, claim On, box off, FirstPowerOn booted under a moved copy: the disk", metalv1alpha1.ServerStateReserved, redfish.PowerOff,
			func(s *metalv1alpha1.Server) {
				claimed(s)
				s.Annotations[serverstate.ClaimBootAnnotation] = "source-uid"
			},
			[]client.Object{claim(metalv1alpha1.PowerOn), moved(firstBootOnly(bootConfig(metalv1alpha1.ServerBootConfigurationStateReady)))},
			metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerOn, "[On]"},
		{"Available, claimed, no boot configuration yet: Reserved, not powered", metalv1alpha1.ServerStateAvailable, redfish.PowerOff,
			claimed, []client.Object{claim(metalv1alpha1.PowerOn)},
			metalv1alpha1.ServerStateReserved, "", "[]"},
		{"Reserved, claim On, boot configuration Pending: waits", metalv1alpha1.ServerStateReserved, redfish.PowerOff,
			claimed, []client.Object{claim(metalv1alpha1.PowerOn), bootConfig(metalv1alpha1.ServerBootConfigurationStatePending)},
			metalv1alpha1.ServerStateReserved, "", "[]"},
		{"Reserved, claim Off, box on: powered off gracefully", metalv1alpha1.ServerStateReserved, redfish.PowerOn,
			claimed, []client.Object{claim(metalv1alpha1.PowerOff), bootConfig(metalv1alpha1.ServerBootConfigurationStateReady)},
			metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerOff, "[GracefulShutdown]"},
		{"Reserved, claim gone, box on: powered off before it is handed back", metalv1alpha1.ServerStateReserved, redfish.PowerOn,
			claimed, nil, metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerOff, "[GracefulShutdown]"},
		{"Reserved, claim gone, box off: Available", metalv1alpha1.ServerStateReserved, redfish.PowerOff,
			claimed, nil, metalv1alpha1.ServerStateAvailable, "", "[]"},
		{"Reserved, claim gone, Retain, box off: Released", metalv1alpha1.ServerStateReserved, redfish.PowerOff,
			func(s *metalv1alpha1.Server) { claimed(s); s.Spec.ReclaimPolicy = metalv1alpha1.ReclaimPolicyRetain }, nil,
			metalv1alpha1.ServerStateReleased, "", "[]"},
		{"Parked, box on: left alone", metalv1alpha1.ServerStateParked, redfish.PowerOn, nil, nil,
			metalv1alpha1.ServerStateParked, "", "[]"},
		{"Available, maintenance ref: Maintenance", metalv1alpha1.ServerStateAvailable, redfish.PowerOn,
			func(s *metalv1alpha1.Server) {
				s.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Namespace: ns, Name: "m"}
			}, nil, metalv1alpha1.ServerStateMaintenance, "", "[]"},
	}
	pool := bmc.NewPool(bmc.Options{RequestTimeout: testOpts.BMCRequestTimeout})
	t.Cleanup(pool.Close)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := fleet.Take(t)
			sys := b.Systems()[0]
			sys.SetPowerState(tc.power)
			user, pass := b.Credentials()
			s := &metalv1alpha1.Server{
				ObjectMeta: metav1.ObjectMeta{Name: "s", Finalizers: []string{Finalizer},
					Annotations: map[string]string{lifecycle.StateAnnotation: string(tc.state)}},
				Spec: metalv1alpha1.ServerSpec{SystemUUID: sys.UUID(), BMCRef: &corev1.LocalObjectReference{Name: "b"}},
			}
			if tc.server != nil {
				tc.server(s)
			}
			objects := append([]client.Object{s, suite.BMCObject(b, "b"),
				&metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Data: map[string][]byte{"username": []byte(user), "password": []byte(pass)}},
			}, tc.objects...)
			c := metaltest.FakeClient(objects...)
			// One pass of the state step: the hardware log's reads have their own tests.
			opts := testOpts
			opts.HardwareLogPoll = 0
			r := &Reconciler{Client: c, Pool: pool, Recorder: events.NewFakeRecorder(100), Options: opts}
			r.init()
			start := time.Now()
			rec := lifecycle.NewReconciler[*metalv1alpha1.Server](c, func() *metalv1alpha1.Server { return &metalv1alpha1.Server{} }, r.handle)
			if _, err := rec.Reconcile(ctx(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "s"}}); err != nil {
				t.Fatal(err)
			}
			after := &metalv1alpha1.Server{}
			if err := c.Get(ctx(), client.ObjectKey{Name: "s"}, after); err != nil {
				t.Fatal(err)
			}
			if got := metalv1alpha1.ServerState(after.Annotations[lifecycle.StateAnnotation]); got != tc.wantState {
				t.Errorf("state %s, want %s", got, tc.wantState)
			}
			gotPower := metalv1alpha1.Power("")
			if v := after.Annotations[serverstate.PowerAnnotation]; v != "" {
				gotPower = metalv1alpha1.Power(strings.SplitN(v, "@", 2)[0])
			}
			if gotPower != tc.wantPower {
				t.Errorf("power record %q, want %q", after.Annotations[serverstate.PowerAnnotation], tc.wantPower)
			}
			if got := fmt.Sprint(suite.ResetTypes(suite.Since(fleet.BoxActions(b), start))); got != tc.wantResets {
				t.Errorf("BMC actions %s, want %s", got, tc.wantResets)
			}
		})
	}
}

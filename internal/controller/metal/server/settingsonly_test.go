package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/discovery"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// One whole pass (every step of handle) over a settings-only server: whatever its state, power,
// maintenance or the operation asked, the box sees no reset and no boot override, and the row
// says where the server is left. The mark is the server's own or its BMC's.
func TestSettingsOnlyServerPass(t *testing.T) {
	const ns = "default"
	onServer := func(s *metalv1alpha1.Server) { s.Annotations[metalv1alpha1.SettingsOnlyAnnotation] = "true" }
	maintained := func(s *metalv1alpha1.Server) {
		s.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Namespace: ns, Name: "m"}
		s.Spec.MaintenanceBootConfigurationRef = &metalv1alpha1.ObjectReference{Namespace: ns, Name: "m"}
	}
	maintenance := &metalv1alpha1.ServerMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m", UID: "m-uid"},
		Spec: metalv1alpha1.ServerMaintenanceSpec{ServerRef: &corev1.LocalObjectReference{Name: "s"}, ServerPower: metalv1alpha1.PowerOn}}
	maintenanceBoot := &metalv1alpha1.ServerBootConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"},
		Spec:   metalv1alpha1.ServerBootConfigurationSpec{ServerRef: corev1.LocalObjectReference{Name: "s"}, Image: "fw:1"},
		Status: metalv1alpha1.ServerBootConfigurationStatus{State: metalv1alpha1.ServerBootConfigurationStateReady}}
	operation := func(op string) func(*metalv1alpha1.Server) {
		return func(s *metalv1alpha1.Server) {
			s.Annotations[metalv1alpha1.OperationAnnotation] = op
			s.Annotations[intent.RequesterAnnotation] = "tok-1"
		}
	}
	for _, tc := range []struct {
		name     string
		state    metalv1alpha1.ServerState
		power    string
		bmcMark  bool // the mark on the BMC, not the server
		server   func(*metalv1alpha1.Server)
		objects  []client.Object
		want     metalv1alpha1.ServerState
		refused  bool // the operation asked was refused: gone, its requester answered refused
		noStatus bool // the pass wrote bookkeeping; status comes with the next
	}{
		{name: "Initial, box off: no discovery", state: metalv1alpha1.ServerStateInitial, power: redfish.PowerOff,
			want: metalv1alpha1.ServerStateInitial},
		{name: "Initial, box on: not powered off for discovery", state: metalv1alpha1.ServerStateInitial, power: redfish.PowerOn,
			want: metalv1alpha1.ServerStateInitial},
		{name: "Initial, marked on the BMC: no discovery", state: metalv1alpha1.ServerStateInitial, power: redfish.PowerOff, bmcMark: true,
			want: metalv1alpha1.ServerStateInitial},
		{name: "Available, box on: back to Initial, not powered off", state: metalv1alpha1.ServerStateAvailable, power: redfish.PowerOn,
			want: metalv1alpha1.ServerStateInitial, noStatus: true},
		{name: "Discovery: back to Initial", state: metalv1alpha1.ServerStateDiscovery, power: redfish.PowerOn, bmcMark: true,
			want: metalv1alpha1.ServerStateInitial, noStatus: true},
		{name: "Cleaning: never runs", state: metalv1alpha1.ServerStateCleaning, power: redfish.PowerOff,
			server: func(s *metalv1alpha1.Server) { s.Annotations[serverstate.CleaningAnnotation] = "AllDisks" },
			want:   metalv1alpha1.ServerStateInitial, noStatus: true},
		{name: "maintenance ref: in Maintenance without power", state: metalv1alpha1.ServerStateInitial, power: redfish.PowerOff,
			server: maintained, objects: []client.Object{maintenance, maintenanceBoot}, want: metalv1alpha1.ServerStateMaintenance, noStatus: true},
		{name: "Maintenance, power On and a Ready boot configuration: neither booted nor powered", state: metalv1alpha1.ServerStateMaintenance,
			power: redfish.PowerOff, server: maintained, objects: []client.Object{maintenance, maintenanceBoot}, want: metalv1alpha1.ServerStateMaintenance},
		{name: "Maintenance, box on, not booted into it: not restarted", state: metalv1alpha1.ServerStateMaintenance, power: redfish.PowerOn, bmcMark: true,
			server: maintained, objects: []client.Object{maintenance, maintenanceBoot}, want: metalv1alpha1.ServerStateMaintenance},
		{name: "hard-restart-server refused", state: metalv1alpha1.ServerStateInitial, power: redfish.PowerOn,
			server: operation(metalv1alpha1.OperationHardRestartServer), want: metalv1alpha1.ServerStateInitial, refused: true, noStatus: true},
		{name: "force-on-server refused (BMC mark)", state: metalv1alpha1.ServerStateInitial, power: redfish.PowerOff, bmcMark: true,
			server: operation(metalv1alpha1.OperationForceOnServer), want: metalv1alpha1.ServerStateInitial, refused: true, noStatus: true},
		{name: "force-off-server refused in Maintenance", state: metalv1alpha1.ServerStateMaintenance, power: redfish.PowerOn,
			server:  func(s *metalv1alpha1.Server) { maintained(s); operation(metalv1alpha1.OperationForceOffServer)(s) },
			objects: []client.Object{maintenance, maintenanceBoot}, want: metalv1alpha1.ServerStateMaintenance, refused: true, noStatus: true},
		{name: "an owed power-cycle from before the mark is not issued", state: metalv1alpha1.ServerStateInitial, power: redfish.PowerOn,
			server: func(s *metalv1alpha1.Server) {
				s.Annotations[intent.Annotation] = intent.Intent{Op: metalv1alpha1.OperationPowerCycleServer, Phase: intent.Owed, At: time.Now(), By: "tok-1"}.String()
			}, want: metalv1alpha1.ServerStateInitial, refused: true, noStatus: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fleet.Take(t)
			sys := b.Systems()[0]
			sys.SetPowerState(tc.power)
			user, pass := b.Credentials()
			s := &metalv1alpha1.Server{
				ObjectMeta: metav1.ObjectMeta{Name: "s", Finalizers: []string{Finalizer},
					Annotations: map[string]string{lifecycle.StateAnnotation: string(tc.state)}},
				Spec: metalv1alpha1.ServerSpec{SystemUUID: sys.UUID(), BMCRef: &corev1.LocalObjectReference{Name: "b"},
					BootOrder: []metalv1alpha1.BootOrder{{Name: "cd", Priority: 1, Device: "Boot0002"}}},
			}
			bmcObj := suite.BMCObject(b, "b")
			if tc.bmcMark {
				bmcObj.Annotations = map[string]string{metalv1alpha1.SettingsOnlyAnnotation: "true"}
			} else {
				onServer(s)
			}
			if tc.server != nil {
				tc.server(s)
			}
			objects := append([]client.Object{s, bmcObj,
				&metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Data: map[string][]byte{"username": []byte(user), "password": []byte(pass)}},
			}, tc.objects...)
			c := metaltest.FakeClient(objects...)
			opts := testOpts
			opts.HardwareLogPoll = 0
			rec := events.NewFakeRecorder(100)
			pool := bmc.NewPool(bmc.Options{RequestTimeout: testOpts.BMCRequestTimeout})
			t.Cleanup(pool.Close)
			r := &Reconciler{Client: c, APIReader: c, Pool: pool, Recorder: rec, Options: opts}
			r.init()
			start := time.Now()
			lr := lifecycle.NewReconciler[*metalv1alpha1.Server](c, func() *metalv1alpha1.Server { return &metalv1alpha1.Server{} }, r.handle)
			if _, err := lr.Reconcile(ctx(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "s"}}); err != nil {
				t.Fatal(err)
			}
			if acts := suite.ResetTypes(suite.Since(fleet.BoxActions(b), start)); len(acts) != 0 {
				t.Errorf("BMC actions on a settings-only server: %v", acts)
			}
			after := &metalv1alpha1.Server{}
			if err := c.Get(ctx(), client.ObjectKey{Name: "s"}, after); err != nil {
				t.Fatal(err)
			}
			if got := metalv1alpha1.ServerState(after.Annotations[lifecycle.StateAnnotation]); got != tc.want {
				t.Errorf("state %s, want %s", got, tc.want)
			}
			if v := after.Annotations[serverstate.PowerAnnotation]; v != "" {
				t.Errorf("power recorded: %s", v)
			}
			if after.Annotations[serverstate.BootOnceAnnotation] != "" || after.Annotations[serverstate.MaintenanceBootAnnotation] != "" {
				t.Errorf("a boot recorded: %v", after.Annotations)
			}
			if err := c.Get(ctx(), client.ObjectKey{Namespace: testOpts.DiscoveryNamespace, Name: discovery.ObjectName("s")}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
				t.Errorf("a discovery round was started: %v", err)
			}
			if tc.refused {
				if _, ok := after.Annotations[metalv1alpha1.OperationAnnotation]; ok || after.Annotations[intent.Annotation] != "" {
					t.Errorf("operation left: %q, intent %q", after.Annotations[metalv1alpha1.OperationAnnotation], after.Annotations[intent.Annotation])
				}
				if got := after.Annotations[intent.ResultAnnotation]; got != "tok-1 "+intent.ResultRefused {
					t.Errorf("requester's result %q, want refused", got)
				}
				if ev := drain(rec); !strings.Contains(ev, metalv1alpha1.ReasonPowerRefused) {
					t.Errorf("no %s event: %s", metalv1alpha1.ReasonPowerRefused, ev)
				}
			}
			if tc.noStatus {
				return
			}
			ready := apimeta.FindStatusCondition(after.Status.Conditions, metalv1alpha1.ConditionReady)
			if ready == nil || ready.Reason != metalv1alpha1.ReasonSettingsOnly {
				t.Errorf("Ready condition %v, want reason %s", ready, metalv1alpha1.ReasonSettingsOnly)
			}
			if after.Status.State != tc.want {
				t.Errorf("status.state %q, want %s", after.Status.State, tc.want)
			}
		})
	}
}

func drain(rec *events.FakeRecorder) string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return fmt.Sprint(out)
		}
	}
}

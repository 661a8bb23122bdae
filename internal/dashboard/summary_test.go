package dashboard

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/telemetry/latest"
)

func TestParsePlacement(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   Placement
		key    string
	}{
		{"none", nil, Placement{}, "unplaced"},
		{"row-rack", map[string]string{LabelLocation: "DC1", LabelRack: "1-2", LabelShelf: "4", LabelHeight: "2"},
			Placement{Placed: true, Location: "DC1", Row: "1", Rack: "1-2", Shelf: 4, Height: 2}, "DC1/1-2"},
		{"other rack label", map[string]string{LabelLocation: "DC1", LabelRack: "east-cage-7b", LabelShelf: "10"},
			Placement{Placed: true, Location: "DC1", Row: "?", Rack: "east-cage-7b", Shelf: 10, Height: 1}, "DC1/east-cage-7b"},
		{"no location", map[string]string{LabelRack: "3-1"},
			Placement{Placed: true, Location: "?", Row: "3", Rack: "3-1", Height: 1}, "?/3-1"},
		{"bad numbers", map[string]string{LabelLocation: "X", LabelRack: "2-2", LabelShelf: "top", LabelHeight: "-1"},
			Placement{Placed: true, Location: "X", Row: "2", Rack: "2-2", Height: 1}, "X/2-2"},
		{"location only", map[string]string{LabelLocation: "DC1", LabelShelf: "3"}, Placement{}, "unplaced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parsePlacement(tc.labels)
			if got != tc.want {
				t.Errorf("parsePlacement = %+v, want %+v", got, tc.want)
			}
			if got.RackKey() != tc.key {
				t.Errorf("RackKey = %q, want %q", got.RackKey(), tc.key)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	bmcReady := &metalv1alpha1.BMC{Status: metalv1alpha1.BMCStatus{State: metalv1alpha1.BMCStateEnabled,
		Conditions: []metav1.Condition{{Type: metalv1alpha1.ConditionReady, Status: metav1.ConditionTrue}}}}
	bmcDown := &metalv1alpha1.BMC{Status: metalv1alpha1.BMCStatus{State: metalv1alpha1.BMCStateEnabled,
		Conditions: []metav1.Condition{{Type: metalv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Unreachable", Message: "dial tcp: timeout"}}}}
	bmcPending := &metalv1alpha1.BMC{Status: metalv1alpha1.BMCStatus{State: metalv1alpha1.BMCStatePending}}
	server := func(mut func(s *metalv1alpha1.Server)) *metalv1alpha1.Server {
		s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "s1", Annotations: map[string]string{}}}
		mut(s)
		return s
	}
	for _, tc := range []struct {
		name string
		s    *metalv1alpha1.Server
		bmc  *metalv1alpha1.BMC
		want Summary
	}{
		{"empty is Initial", server(func(*metalv1alpha1.Server) {}), nil, Summary{Name: "s1", State: "Initial"}},
		{"status state", server(func(s *metalv1alpha1.Server) {
			s.Status.State = metalv1alpha1.ServerStateAvailable
			s.Status.PowerState = metalv1alpha1.PowerStateOff
			s.Spec.IndicatorLED = metalv1alpha1.IndicatorLEDLit
		}), nil, Summary{Name: "s1", State: "Available", Power: "Off", LED: "Lit"}},
		{"annotation wins over a wiped status, status LED wins over spec", server(func(s *metalv1alpha1.Server) {
			s.Annotations[lifecycle.StateAnnotation] = "Reserved"
			s.Spec.IndicatorLED = metalv1alpha1.IndicatorLEDLit
			s.Status.IndicatorLED = metalv1alpha1.IndicatorLEDBlinking
			s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "ns", Name: "c1"}
		}), nil, Summary{Name: "s1", State: "Reserved", Claim: "ns/c1", LED: "Blinking"}},
		{"parked, cordoned, maintenance, pending", server(func(s *metalv1alpha1.Server) {
			s.Annotations[lifecycle.StateAnnotation] = "Parked"
			s.Annotations[metalv1alpha1.OperationAnnotation] = metalv1alpha1.OperationUnpark
			s.Spec.Unclaimable = true
			s.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Namespace: "ns", Name: "m1"}
		}), nil, Summary{Name: "s1", State: "Parked", Parked: true, Cordoned: true, Maintenance: "ns/m1", Pending: metalv1alpha1.OperationUnpark}},
		{"fault and drift", server(func(s *metalv1alpha1.Server) {
			s.Annotations[metalv1alpha1.HardwareFaultAnnotation] = `[{"entry":"1","message":"PSU"}]`
			s.Annotations[metalv1alpha1.InventoryDriftAnnotation] = "1 of 2 GPUs missing"
		}), nil, Summary{Name: "s1", State: "Initial", Health: "fault,drift"}},
		{"cleaning", server(func(s *metalv1alpha1.Server) {
			s.Annotations[lifecycle.StateAnnotation] = "Cleaning"
			s.Status.Conditions = []metav1.Condition{{Type: metalv1alpha1.ConditionCleaned, Status: metav1.ConditionFalse,
				Reason: metalv1alpha1.ReasonCleaningInProgress, Message: "cleaning agent booted"}}
		}), nil, Summary{Name: "s1", State: "Cleaning", Cleaned: "CleaningInProgress: cleaning agent booted"}},
		{"drift only", server(func(s *metalv1alpha1.Server) {
			s.Annotations[metalv1alpha1.InventoryDriftAnnotation] = "NIC missing"
		}), nil, Summary{Name: "s1", State: "Initial", Health: "drift"}},
		{"bmc ready", server(func(s *metalv1alpha1.Server) { s.Spec.BMCRef = &corev1.LocalObjectReference{Name: "b1"} }), bmcReady,
			Summary{Name: "s1", State: "Initial", BMC: "b1", BMCHealth: "ok"}},
		{"bmc not ready", server(func(s *metalv1alpha1.Server) { s.Spec.BMCRef = &corev1.LocalObjectReference{Name: "b1"} }), bmcDown,
			Summary{Name: "s1", State: "Initial", BMC: "b1", BMCHealth: "error", BMCMessage: "Unreachable: dial tcp: timeout"}},
		{"bmc pending", server(func(s *metalv1alpha1.Server) { s.Spec.BMCRef = &corev1.LocalObjectReference{Name: "b1"} }), bmcPending,
			Summary{Name: "s1", State: "Initial", BMC: "b1", BMCHealth: "pending"}},
		{"bmc unseen", server(func(s *metalv1alpha1.Server) { s.Spec.BMCRef = &corev1.LocalObjectReference{Name: "b1"} }), nil,
			Summary{Name: "s1", State: "Initial", BMC: "b1", BMCHealth: "unknown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := summarize(tc.s, tc.bmc); got != tc.want {
				t.Errorf("summarize =\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}
}

func TestSyncOf(t *testing.T) {
	owned := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", Labels: map[string]string{syncLabel: "other"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: infrahubv1alpha1.GroupVersion.String(), Kind: "InfrahubSync", Name: "owner", Controller: new(true)}}}}
	// Another group's reference with the Kind is not the sync's: the label decides.
	foreign := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", Labels: map[string]string{syncLabel: "lbl"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "evil.example/v1", Kind: "InfrahubSync", Name: "owner", Controller: new(true)}}}}
	labelled := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", Labels: map[string]string{syncLabel: "lbl"}}}
	orphan := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r"}}
	cluster := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "r", Labels: map[string]string{syncLabel: "lbl"}}}
	for r, want := range map[*infrahubv1alpha1.VidraResource]string{owned: "ns/owner", foreign: "ns/lbl", labelled: "ns/lbl", orphan: "", cluster: "lbl"} {
		if got := syncOf(r); got != want {
			t.Errorf("syncOf(%v) = %q, want %q", r.ObjectMeta, got, want)
		}
	}
}

func TestConditionWord(t *testing.T) {
	conds := []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "ApplyFailed"}, {Type: "Healthy", Status: metav1.ConditionTrue, Reason: "Fine"}}
	for typ, want := range map[string]string{"Ready": "False (ApplyFailed)", "Healthy": "True", "Missing": ""} {
		if got := conditionWord(conds, typ); got != want {
			t.Errorf("conditionWord(%s) = %q, want %q", typ, got, want)
		}
	}
}

// A tile's reading is whole watts and degrees; what the BMC does not report stays out.
func TestTileTelemetryOf(t *testing.T) {
	at := time.Unix(1700000000, 900_000_000)
	got := tileTelemetry(latest.Reading{At: at, PowerWatts: watts(249.5), HottestCelsius: watts(70.49), HottestSensor: "CPU1 Temp",
		FailedPSUs: []string{"PSU1"}})
	want := TileTelemetry{At: 1700000000, PowerWatts: watts(250), HottestCelsius: watts(70), HottestSensor: "CPU1 Temp", FailedPSUs: []string{"PSU1"}}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("tileTelemetry = %+v, want %+v", *got, want)
	}
	if got := tileTelemetry(latest.Reading{At: at}); got.PowerWatts != nil || got.HottestCelsius != nil {
		t.Errorf("no power nor temperature reported, shown %+v", got)
	}
}

package firmware

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccontroller"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// ownerActions are the records of b's boxes that act on their power or boot (everything but the
// BIOS settings staged and the locator LED): on a settings-only server, none, ever.
func ownerActions(b *redfish.BMC) []string {
	var out []string
	for _, r := range fleet.BoxActions(b) {
		if r.Action != redfish.ActionBiosSettings && r.Action != redfish.ActionIndicatorLED {
			out = append(out, suite.ResetTypes([]redfish.Record{r})...)
		}
	}
	return out
}

// BIOS settings on a server whose power and boot another system owns (its BMC marked
// settings-only, so from its first pass): the server is never discovered, the settings go
// through a maintenance it enters without power, are staged, and wait for the owner's restart
// (AwaitingOwnerReboot) instead of one of metalhub's. The owner restarts the box outside Redfish;
// the settings then read back and apply. The BMC records no reset, boot override, boot order or
// medium from start to end.
func TestBIOSSettingsOnSettingsOnlyServerAwaitOwnerReboot(t *testing.T) {
	b := fleet.Take(t)
	sys := b.Systems()[0]
	sys.SetPowerState(redfish.PowerOn) // the owner runs it
	const bmcName = "bioss-owned"
	user, pass := b.Credentials()
	if err := env.Client.Create(ctx(), &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: bmcName},
		StringData: map[string]string{"username": user, "password": pass}}); err != nil {
		t.Fatal(err)
	}
	bo := suite.BMCObject(b, bmcName)
	bo.Annotations = map[string]string{metalv1alpha1.SettingsOnlyAnnotation: "true"}
	if err := env.Client.Create(ctx(), bo); err != nil {
		t.Fatal(err)
	}
	name := bmccontroller.ServerName(bmcName, b.SystemIDs()[0])
	testenv.Eventually(t, 60*time.Second, "server "+name+" settings-only in Initial", func() (bool, string) {
		s := suite.Server(env, name)
		if s == nil {
			return false, "no server"
		}
		ready := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionReady)
		return s.Annotations[lifecycle.StateAnnotation] == string(metalv1alpha1.ServerStateInitial) && s.Status.State == metalv1alpha1.ServerStateInitial &&
				ready != nil && ready.Reason == metalv1alpha1.ReasonSettingsOnly,
			fmt.Sprintf("state %s/%s, ready %v", s.Annotations[lifecycle.StateAnnotation], s.Status.State, ready)
	})

	bs := &systemv1alpha1.BIOSSettings{
		ObjectMeta: metav1.ObjectMeta{Name: "bioss-owned"},
		Spec: systemv1alpha1.BIOSSettingsSpec{ServerRef: &corev1.LocalObjectReference{Name: name},
			BIOSSettingsTemplate: systemv1alpha1.BIOSSettingsTemplate{Version: sys.BIOSVersion(),
				SettingsFlow: []systemv1alpha1.SettingsFlowItem{
					{Name: "cpu", Priority: 10, Settings: map[string]string{"ProcVirtualization": "Disabled"}},
				}}},
	}
	if err := env.Client.Create(ctx(), bs); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "settings staged, awaiting the owner's restart", func() (bool, string) {
		got := &systemv1alpha1.BIOSSettings{}
		if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(bs), got); err != nil {
			return false, err.Error()
		}
		c := apimeta.FindStatusCondition(got.Status.Conditions, systemv1alpha1.ConditionApplied)
		return c != nil && c.Reason == systemv1alpha1.ReasonAwaitingOwnerReboot && got.Status.State == systemv1alpha1.SettingsStateInProgress,
			fmt.Sprintf("state %s, record %s, applied %v", got.Status.State, got.Annotations[record.Annotation], c)
	})
	if pending := sys.PendingBiosAttributes(); fmt.Sprint(pending["ProcVirtualization"]) != "Disabled" {
		t.Fatalf("pending %v, want ProcVirtualization staged", pending)
	}
	if s := suite.Server(env, name); s.Annotations[lifecycle.StateAnnotation] != string(metalv1alpha1.ServerStateMaintenance) {
		t.Errorf("server %s while the settings wait, want Maintenance", s.Annotations[lifecycle.StateAnnotation])
	}
	if ev := eventsOf("bioss-owned"); !strings.Contains(ev, systemv1alpha1.ReasonAwaitingOwnerReboot) || strings.Contains(ev, "RebootRequested") {
		t.Errorf("events: %s", ev)
	}
	if acts := ownerActions(b); len(acts) != 0 {
		t.Fatalf("power or boot actions on a settings-only server before its owner's restart: %v", acts)
	}
	if sys.PowerState() != redfish.PowerOn {
		t.Errorf("power %s, the owner left it On", sys.PowerState())
	}

	// The owner restarts it, outside metalhub.
	sys.HostReset("ForceRestart")
	waitSettingsState(t, "bioss-owned", systemv1alpha1.SettingsStateApplied, 60*time.Second)
	if attrs := sys.BiosAttributes(); attrs["ProcVirtualization"] != "Disabled" {
		t.Errorf("in effect %v", attrs)
	}
	// The maintenance is handed back: the server returns to Initial, still undiscovered.
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateInitial, 30*time.Second)
	if acts := ownerActions(b); len(acts) != 0 {
		t.Errorf("power or boot actions on a settings-only server: %v", acts)
	}
}

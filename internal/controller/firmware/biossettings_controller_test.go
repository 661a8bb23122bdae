package firmware

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

func waitSettingsState(t *testing.T, name string, want systemv1alpha1.SettingsState, timeout time.Duration) *systemv1alpha1.BIOSSettings {
	t.Helper()
	var s *systemv1alpha1.BIOSSettings
	testenv.Eventually(t, timeout, "BIOSSettings "+name+" "+string(want), func() (bool, string) {
		s = &systemv1alpha1.BIOSSettings{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, s); err != nil {
			return false, err.Error()
		}
		return s.Status.State == want, fmt.Sprintf("status %s, record %s, conditions %v", s.Status.State, s.Annotations[record.Annotation], s.Status.Conditions)
	})
	return s
}

// A flow of three steps: the one already in effect costs nothing, the other two are staged and
// installed one after the other, lowest priority first, one restart each.
func TestBIOSSettingsFlowInPriorityOrder(t *testing.T) {
	names, bmcs := availableServers(t, "bioss-flow", 1)
	sys := bmcs[0].Systems()[0]
	s := &systemv1alpha1.BIOSSettings{
		ObjectMeta: metav1.ObjectMeta{Name: "bioss-flow"},
		Spec: systemv1alpha1.BIOSSettingsSpec{ServerRef: &corev1.LocalObjectReference{Name: names[0]},
			BIOSSettingsTemplate: systemv1alpha1.BIOSSettingsTemplate{Version: sys.BIOSVersion(),
				SettingsFlow: []systemv1alpha1.SettingsFlowItem{
					{Name: "sriov", Priority: 20, Settings: map[string]string{"SriovGlobalEnable": "Enabled"}},
					{Name: "already", Priority: 5, Settings: map[string]string{"BootMode": "Uefi"}},
					{Name: "cpu", Priority: 10, Settings: map[string]string{"ProcVirtualization": "Disabled", "NumaNodesPerSocket": "2"}},
				}}},
	}
	if err := env.Client.Create(ctx(), s); err != nil {
		t.Fatal(err)
	}
	s = waitSettingsState(t, "bioss-flow", systemv1alpha1.SettingsStateApplied, 60*time.Second)
	// From the first settings on (discovery's power actions come before): each staging, then
	// its restart (a power-on for a server that is off). Powering off is no restart: the server
	// back in Available after its maintenance may already have been switched off.
	var got []string
	for _, r := range fleet.RecordsOf(bmcs[0]) {
		switch {
		case r.Action == redfish.ActionBiosSettings:
			got = append(got, fmt.Sprintf("settings%v", r.Settings))
		case r.Action == redfish.ActionReset && len(got) > 0 && r.ResetType != "ForceOff" && r.ResetType != "GracefulShutdown":
			got = append(got, "reset")
		}
	}
	want := "settingsmap[NumaNodesPerSocket:2 ProcVirtualization:Disabled] reset settingsmap[SriovGlobalEnable:Enabled] reset"
	if strings.Join(got, " ") != want {
		t.Errorf("BMC saw %v, want %s", got, want)
	}
	attrs := sys.BiosAttributes()
	if attrs["SriovGlobalEnable"] != "Enabled" || attrs["ProcVirtualization"] != "Disabled" || fmt.Sprint(attrs["NumaNodesPerSocket"]) != "2" {
		t.Errorf("in effect %v", attrs)
	}
	if len(s.Status.FlowState) != 3 || s.Status.FlowState[0].Name != "already" || s.Status.LastAppliedTime == nil {
		t.Errorf("flow state %+v", s.Status.FlowState)
	}
	for _, f := range s.Status.FlowState {
		if f.FlowState != systemv1alpha1.SettingsStateApplied {
			t.Errorf("step %s %s", f.Name, f.FlowState)
		}
	}
	// Each restart was asked for once: none was lost and asked for again.
	if ev := eventsOf("bioss-flow"); strings.Contains(ev, "RebootAgain") {
		t.Errorf("a restart was asked for again: %s", ev)
	}
	suite.WaitServerState(t, env, names[0], metalv1alpha1.ServerStateAvailable, 30*time.Second)
}

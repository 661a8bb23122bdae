package metal

import (
	"fmt"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// spec.indicatorLED is set through the BMC and reported in status.indicatorLED: once per change
// (the recorder shows each write), none while it is as asked, none when the field is cleared.
func TestIndicatorLEDFollowsSpec(t *testing.T) {
	t.Parallel()
	names, bmcs := availableServers(t, "led", 1, func(int) map[string]string { return map[string]string{"pool": "led"} })
	name, b := names[0], bmcs[0]
	start := time.Now()
	setLED := func(led metalv1alpha1.IndicatorLED) {
		t.Helper()
		editServer(t, name, func(s *metalv1alpha1.Server) { s.Spec.IndicatorLED = led })
	}
	waitLED := func(want metalv1alpha1.IndicatorLED) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, "status.indicatorLED "+string(want), func() (bool, string) {
			got := suite.Server(env, name).Status.IndicatorLED
			return got == want, string(got)
		})
	}
	ledWrites := func() []string {
		var out []string
		for _, r := range suite.Since(fleet.BoxActions(b), start) {
			if r.Action == redfish.ActionIndicatorLED {
				out = append(out, r.LED)
			}
		}
		return out
	}

	setLED(metalv1alpha1.IndicatorLEDBlinking)
	waitLED(metalv1alpha1.IndicatorLEDBlinking)
	setLED(metalv1alpha1.IndicatorLEDLit)
	waitLED(metalv1alpha1.IndicatorLEDLit)
	// Cleared: the pass that observes the new generation leaves the LED as it is.
	setLED("")
	waitObserved(t, name)
	if got := fmt.Sprint(ledWrites()); got != "[Blinking Lit]" {
		t.Errorf("LED writes %s, want one per change", got)
	}
	if s := suite.Server(env, name); durableState(s) != string(metalv1alpha1.ServerStateAvailable) {
		t.Errorf("server %s after its LED changed", durableState(s))
	}
}

// A maintenance's locatorLED holds while the server is in it, recorded on the Server before the
// LED is set; once the maintenance is over the LED goes back to what the Server asks (here
// nothing: Off) and the record goes.
func TestMaintenanceLocatorLED(t *testing.T) {
	const ns = "default"
	names, bmcs := availableServers(t, "mled", 1, func(int) map[string]string { return map[string]string{"pool": "mled"} })
	name, b := names[0], bmcs[0]
	start := time.Now()
	m := metaltest.NewMaintenance(ns, "mled", name, metalv1alpha1.ServerMaintenancePolicyEnforced, metalv1alpha1.PowerOff, 0)
	m.Spec.LocatorLED = metalv1alpha1.IndicatorLEDBlinking
	if err := env.Client.Create(ctx(), m); err != nil {
		t.Fatal(err)
	}
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateMaintenance, 10*time.Second)
	testenv.Eventually(t, 10*time.Second, "LED Blinking, recorded", func() (bool, string) {
		s := suite.Server(env, name)
		return s.Status.IndicatorLED == metalv1alpha1.IndicatorLEDBlinking && s.Annotations[serverstate.MaintenanceLEDAnnotation] == "Blinking",
			fmt.Sprintf("%s, record %q", s.Status.IndicatorLED, s.Annotations[serverstate.MaintenanceLEDAnnotation])
	})
	deleteMaintenance(t, ns, "mled")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 10*time.Second)
	testenv.Eventually(t, 10*time.Second, "LED Off, record gone", func() (bool, string) {
		s := suite.Server(env, name)
		_, recorded := s.Annotations[serverstate.MaintenanceLEDAnnotation]
		return s.Status.IndicatorLED == metalv1alpha1.IndicatorLEDOff && !recorded,
			fmt.Sprintf("%s, recorded %v", s.Status.IndicatorLED, recorded)
	})
	var leds []string
	for _, r := range suite.Since(fleet.BoxActions(b), start) {
		if r.Action == redfish.ActionIndicatorLED {
			leds = append(leds, r.LED)
		}
	}
	if fmt.Sprint(leds) != "[Blinking Off]" {
		t.Errorf("LED writes %v, want the maintenance's and its undoing", leds)
	}
	checkNoDoubleWrites(t)
}

// waitObserved waits for a pass over the Server's current generation (its Lifecycle condition
// carries it).
func waitObserved(t *testing.T, name string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "a pass over "+name+"'s generation", func() (bool, string) {
		s := suite.Server(env, name)
		c := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionLifecycle)
		if c == nil {
			return false, "no Lifecycle condition"
		}
		return c.ObservedGeneration == s.Generation, fmt.Sprintf("observed %d of %d", c.ObservedGeneration, s.Generation)
	})
}

// editServer patches a Server the controller also writes, on a fresh read, again on a conflict.
func editServer(t *testing.T, name string, mutate func(*metalv1alpha1.Server)) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "edit server "+name, func() (bool, string) {
		err := lifecycle.PatchMetadata(ctx(), env.Client, suite.Server(env, name), func(o client.Object) { mutate(o.(*metalv1alpha1.Server)) })
		return err == nil, fmt.Sprint(err)
	})
}

package metal

import (
	"fmt"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// spec.indicatorLED is set through the BMC and reported in status.indicatorLED: once per change
// (the recorder shows each write), none while it is as asked, none when the field is cleared.
func TestIndicatorLEDFollowsSpec(t *testing.T) {
	names, bmcs := availableServers(t, "led", 1, func(int) map[string]string { return map[string]string{"pool": "led"} })
	name, b := names[0], bmcs[0]
	start := time.Now()
	setLED := func(led metalv1alpha1.IndicatorLED) {
		t.Helper()
		if err := lifecycle.PatchMetadata(ctx(), env.Client, getServer(t, name), func(o client.Object) {
			o.(*metalv1alpha1.Server).Spec.IndicatorLED = led
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitLED := func(want metalv1alpha1.IndicatorLED) {
		t.Helper()
		eventually(t, 10*time.Second, "status.indicatorLED "+string(want), func() (bool, string) {
			got := getServer(t, name).Status.IndicatorLED
			return got == want, string(got)
		})
	}
	ledWrites := func() []string {
		var out []string
		for _, r := range since(records(b), start) {
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
	if s := getServer(t, name); durableState(s) != string(metalv1alpha1.ServerStateAvailable) {
		t.Errorf("server %s after its LED changed", durableState(s))
	}
}

// waitObserved waits for a pass over the Server's current generation (its Lifecycle condition
// carries it).
func waitObserved(t *testing.T, name string) {
	t.Helper()
	eventually(t, 10*time.Second, "a pass over "+name+"'s generation", func() (bool, string) {
		s := getServer(t, name)
		c := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionLifecycle)
		if c == nil {
			return false, "no Lifecycle condition"
		}
		return c.ObservedGeneration == s.Generation, fmt.Sprintf("observed %d of %d", c.ObservedGeneration, s.Generation)
	})
}

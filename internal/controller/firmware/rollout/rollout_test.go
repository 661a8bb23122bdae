package rollout

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
)

// targets builds targets from a string of states: . none, p pending, i in progress, c completed,
// f failed; named s0, s1, ...
func targets(states string) []rolloutTarget {
	m := map[rune]childState{'.': childNone, 'p': childPending, 'i': childInProgress, 'c': childCompleted, 'f': childFailed}
	out := make([]rolloutTarget, 0, len(states))
	for i, r := range states {
		out = append(out, rolloutTarget{name: "s" + string(rune('0'+i)), state: m[r]})
	}
	return out
}

func TestPlanRollout(t *testing.T) {
	canary2max3 := &systemv1alpha1.RolloutSpec{Canary: 2, MaxUnavailable: ptr.To(intstr.FromInt32(3))}
	for _, tc := range []struct {
		name   string
		states string
		ro     *systemv1alpha1.RolloutSpec
		paused bool
		create string
		phase  systemv1alpha1.RolloutPhase
		wave   int32
		waves  int32
	}{
		{"no rollout: all at once", "....", nil, false, "s0 s1 s2 s3", systemv1alpha1.RolloutRolling, 1, 1},
		{"no rollout: a failure stops nothing", "f...", nil, false, "s1 s2 s3", systemv1alpha1.RolloutRolling, 1, 1},
		{"canaries first", "........", canary2max3, false, "s0 s1", systemv1alpha1.RolloutCanary, 1, 3},
		{"canary running", "ic......", canary2max3, false, "", systemv1alpha1.RolloutCanary, 1, 3},
		{"canaries done: first wave", "cc......", canary2max3, false, "s2 s3 s4", systemv1alpha1.RolloutRolling, 2, 3},
		{"wave in flight: nothing more", "ccicp...", canary2max3, false, "", systemv1alpha1.RolloutRolling, 2, 3},
		{"wave done: the next", "ccccc...", canary2max3, false, "s5 s6 s7", systemv1alpha1.RolloutRolling, 3, 3},
		{"failed canary stops", "fi......", canary2max3, false, "", systemv1alpha1.RolloutStopped, 1, 3},
		{"a failure stops with the default threshold", "cccfc...", canary2max3, false, "", systemv1alpha1.RolloutStopped, 2, 3},
		{"a threshold of 2 goes on after one", "cccfc...", &systemv1alpha1.RolloutSpec{Canary: 2, MaxUnavailable: ptr.To(intstr.FromInt32(3)), FailureThreshold: ptr.To[int32](2)}, false, "s5 s6 s7", systemv1alpha1.RolloutRolling, 3, 3},
		{"paused", "cc......", canary2max3, true, "", systemv1alpha1.RolloutPaused, 1, 3},
		{"done", "cccccfcc", &systemv1alpha1.RolloutSpec{FailureThreshold: ptr.To[int32](5)}, false, "", systemv1alpha1.RolloutDone, 1, 1},
		{"percent: 25% of 8 is 2", "........", &systemv1alpha1.RolloutSpec{MaxUnavailable: ptr.To(intstr.FromString("25%"))}, false, "s0 s1", systemv1alpha1.RolloutRolling, 1, 4},
		{"percent rounds down but is at least 1", "...", &systemv1alpha1.RolloutSpec{MaxUnavailable: ptr.To(intstr.FromString("10%"))}, false, "s0", systemv1alpha1.RolloutRolling, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planRollout(targets(tc.states), tc.ro, tc.paused)
			if got := strings.Join(p.create, " "); got != tc.create || p.phase != tc.phase || p.wave != tc.wave || p.waves != tc.waves {
				t.Errorf("plan = create %q %s wave %d/%d, want %q %s %d/%d", got, p.phase, p.wave, p.waves, tc.create, tc.phase, tc.wave, tc.waves)
			}
		})
	}
}

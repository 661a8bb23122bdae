package rollout

import (
	"k8s.io/apimachinery/pkg/util/intstr"

	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
)

// childState is where a *Set's per-target object stands, from its record (never its status).
type childState int

const (
	// childNone: no object for the target yet.
	childNone childState = iota
	// childPending: made, nothing flashed yet (it may be waiting for its maintenance).
	childPending
	// childInProgress: flashing, restarting, verifying, or ended but not yet handing the server
	// back: the target is unavailable.
	childInProgress
	childCompleted
	childFailed
)

func (s childState) inFlight() bool { return s == childPending || s == childInProgress }

// rolloutTarget is one selected target in rollout order.
type rolloutTarget struct {
	name  string
	state childState
}

// rolloutPlan is what a *Set does this pass and reports.
type rolloutPlan struct {
	create []string
	phase  systemv1alpha1.RolloutPhase
	wave   int32
	waves  int32
}

// waveSize resolves maxUnavailable against n targets: a count, or a percentage rounded down,
// at least 1; without it, all of them (the reference's behaviour).
func waveSize(ro *systemv1alpha1.RolloutSpec, n int) int {
	if ro == nil || ro.MaxUnavailable == nil || n == 0 {
		return max(n, 1)
	}
	v, err := intstr.GetScaledValueFromIntOrPercent(ro.MaxUnavailable, n, false)
	if err != nil || v < 1 {
		return 1
	}
	return v
}

// planRollout decides which targets get their object now. Targets come in rollout order
// (unclaimed first, then claims whose owner approved maintenance, then the rest). The canary
// wave (the first Canary targets) must complete before anything else starts; after it, a wave
// of up to maxUnavailable targets starts only when nothing is in flight, so never more than
// maxUnavailable targets are out of service at once. A failed canary, or FailureThreshold
// failed targets (1 by default once a rollout is set), stops the rollout; the pause annotation
// holds it. What runs always finishes.
func planRollout(targets []rolloutTarget, ro *systemv1alpha1.RolloutSpec, paused bool) rolloutPlan {
	n := len(targets)
	w := waveSize(ro, n)
	c := 0
	if ro != nil {
		c = min(int(ro.Canary), n)
	}
	waves := int32(0)
	if c > 0 {
		waves = 1
	}
	if rest := n - c; rest > 0 {
		waves += int32((rest + w - 1) / w)
	}
	var inFlight, failed, terminal, startedAfterCanary int
	canaryDone, canaryFailed := true, false
	for i, t := range targets {
		switch {
		case t.state.inFlight():
			inFlight++
		case t.state == childFailed:
			failed++
		}
		if t.state == childCompleted || t.state == childFailed {
			terminal++
		}
		if i < c {
			canaryDone = canaryDone && t.state == childCompleted
			canaryFailed = canaryFailed || t.state == childFailed
		} else if t.state != childNone {
			startedAfterCanary++
		}
	}
	wave := int32((startedAfterCanary + w - 1) / w)
	if c > 0 {
		wave++
	}
	p := rolloutPlan{phase: systemv1alpha1.RolloutRolling, wave: wave, waves: waves}
	threshold := 0
	if ro != nil {
		threshold = 1
		if ro.FailureThreshold != nil {
			threshold = int(*ro.FailureThreshold)
		}
	}
	switch {
	case terminal == n:
		p.phase = systemv1alpha1.RolloutDone
		return p
	case canaryFailed || (threshold > 0 && failed >= threshold):
		p.phase = systemv1alpha1.RolloutStopped
		return p
	case c > 0 && !canaryDone:
		p.phase = systemv1alpha1.RolloutCanary
	}
	if paused {
		p.phase = systemv1alpha1.RolloutPaused
		return p
	}
	if c > 0 && !canaryDone {
		for _, t := range targets[:c] {
			if t.state == childNone {
				p.create = append(p.create, t.name)
			}
		}
		if len(p.create) > 0 && startedAfterCanary == 0 {
			p.wave = 1
		}
		return p
	}
	if inFlight > 0 {
		return p
	}
	for _, t := range targets[c:] {
		if len(p.create) == w {
			break
		}
		if t.state == childNone {
			p.create = append(p.create, t.name)
		}
	}
	if len(p.create) > 0 {
		p.wave = int32((startedAfterCanary+len(p.create)+w-1)/w) + int32(min(c, 1))
	}
	return p
}

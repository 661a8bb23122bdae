package firmware

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// reboot restarts the server to install the staged image (actor.reboot).
func (r *BIOSVersionReconciler) reboot(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	if p.rec.Phase != phaseReboot {
		return lifecycle.Continue(), nil
	}
	return r.actor.reboot(ctx, p.work, "install BIOS "+p.rec.Version, func(why string) (lifecycle.Result, error) {
		return r.failAttempt(ctx, p, why)
	})
}

// verify reads the version back after the restart: the step's version ends the step (the next
// one, planned from the spec as it is now, is owed; none left, completed); another one past
// VerifyTimeout fails the attempt.
func (r *BIOSVersionReconciler) verify(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	if p.rec.Phase != phaseVerify {
		return lifecycle.Continue(), nil
	}
	if err := r.connect(p.work); err != nil {
		return r.bmcFailed(p.work, err)
	}
	got := p.sys.BiosVersion
	if got != p.rec.Version {
		res, err, again, late := r.rebootAgain(ctx, p.work, fmt.Sprintf("reports BIOS %q, not %q", got, p.rec.Version))
		switch {
		case again:
			return res, err
		case !late:
			return lifecycle.RequeueAfter(r.Options.Poll, "version not reported yet"), nil
		}
		return r.failAttempt(ctx, p, fmt.Sprintf("server reports BIOS %q after the restart, want %q", got, p.rec.Version))
	}
	now := r.now().Unix()
	if steps := remaining(&p.Obj.Spec.BIOSVersionTemplate, got); len(steps) > 0 && !(got == p.Obj.Spec.Version && p.rec.For == p.Obj.Spec.Version) {
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "StepUpgraded", "Upgrade", "server %s runs BIOS %s; next %s", p.server.Name, got, steps[0].Version)
		return r.record(ctx, p.work, record{Phase: phaseOwed, For: p.Obj.Spec.Version, Version: steps[0].Version, Image: steps[0].Image.URI,
			Attempt: 1, Failed: p.rec.Failed, At: now, Task: p.rec.Task})
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, systemv1alpha1.ReasonUpgraded, "Upgrade", "server %s runs BIOS %s", p.server.Name, got)
	done := record{Phase: phaseCompleted, For: p.Obj.Spec.Version, Version: got, Failed: p.rec.Failed, At: now, Task: p.rec.Task}
	upgradesFinished(kindBIOS, done)
	return r.record(ctx, p.work, done)
}

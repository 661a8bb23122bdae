package version

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/flash"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// reboot restarts the server to install the staged image (work.Actor.Reboot).
func (r *BIOSVersionReconciler) reboot(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	if p.Rec.Phase != record.PhaseReboot {
		return lifecycle.Continue(), nil
	}
	return r.Actor.Reboot(ctx, p.Work, "install BIOS "+p.Rec.Version, func(why string) (lifecycle.Result, error) {
		return r.failAttempt(ctx, p, why)
	})
}

// verify reads the version back after the restart: the step's version ends the step (the next
// one, planned from the spec as it is now, is owed; none left, completed); another one past
// VerifyTimeout fails the attempt.
func (r *BIOSVersionReconciler) verify(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	if p.Rec.Phase != record.PhaseVerify {
		return lifecycle.Continue(), nil
	}
	if err := r.Connect(p.Work); err != nil {
		return r.BMCFailed(p.Work, err)
	}
	got := p.Sys.BiosVersion
	if got != p.Rec.Version {
		res, err, again, late := r.RebootAgain(ctx, p.Work, fmt.Sprintf("reports BIOS %q, not %q", got, p.Rec.Version))
		switch {
		case again:
			return res, err
		case !late:
			return lifecycle.RequeueAfter(r.Options.Poll, "version not reported yet"), nil
		}
		return r.failAttempt(ctx, p, fmt.Sprintf("server reports BIOS %q after the restart, want %q", got, p.Rec.Version))
	}
	now := r.Clock().Unix()
	if steps := record.Remaining(&p.Obj.Spec.BIOSVersionTemplate, got); len(steps) > 0 && !(got == p.Obj.Spec.Version && p.Rec.For == p.Obj.Spec.Version) {
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "StepUpgraded", "Upgrade", "server %s runs BIOS %s; next %s", p.Server.Name, got, steps[0].Version)
		return r.Record(ctx, p.Work, record.Record{Phase: record.PhaseOwed, For: p.Obj.Spec.Version, Version: steps[0].Version, Image: steps[0].Image.URI,
			Attempt: 1, Failed: p.Rec.Failed, At: now, Task: p.Rec.Task})
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, systemv1alpha1.ReasonUpgraded, "Upgrade", "server %s runs BIOS %s", p.Server.Name, got)
	done := record.Record{Phase: record.PhaseCompleted, For: p.Obj.Spec.Version, Version: got, Failed: p.Rec.Failed, At: now, Task: p.Rec.Task}
	flash.UpgradesFinished(kindBIOS, done)
	return r.Record(ctx, p.Work, done)
}

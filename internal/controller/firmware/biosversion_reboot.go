package firmware

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// reboot gets the restart that installs a staged image, exactly once: it is asked of the Server
// through its operation annotation, named by the record's token, and the Server reports how
// that request ended (metal.OperationResultAnnotation). A pass that finds the request pending
// waits; one that finds neither request nor result asks (again: the ask was lost).
func (r *BIOSVersionReconciler) reboot(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	if p.rec.Phase != phaseReboot {
		return lifecycle.Continue(), nil
	}
	token := p.rec.token(string(p.Obj.UID))
	switch outcome, pending := operationState(p.server, token); {
	case outcome == metal.OperationDone || outcome == metal.OperationUncertain:
		// Uncertain: the version read back decides.
		next := p.rec
		next.Phase, next.At = phaseVerify, r.Now().Unix()
		return r.record(ctx, p, next)
	case outcome != "":
		return r.failAttempt(ctx, p, "the server's restart was refused")
	case pending:
		return lifecycle.Done(), nil // the Server's report brings the next pass
	}
	if _, busy := p.server.Annotations[metalv1alpha1.OperationAnnotation]; busy || p.server.Annotations[metal.OperationIntentAnnotation] != "" {
		// Another operation first: one at a time.
		return lifecycle.RequeueAfter(r.Options.Poll, "server busy"), nil
	}
	if err := r.connect(p); err != nil {
		return r.bmcFailed(p, err)
	}
	op := metalv1alpha1.OperationHardRestartServer
	if p.sys.PowerState == bmc.PowerStateOff {
		op = metalv1alpha1.OperationForceOnServer
	}
	if err := lifecycle.PatchMetadata(ctx, p.c, p.server, func(o client.Object) {
		lifecycle.SetAnnotation(o, metalv1alpha1.OperationAnnotation, op)
		lifecycle.SetAnnotation(o, metal.OperationRequesterAnnotation, token)
	}); err != nil {
		return lifecycle.Result{}, fmt.Errorf("asking server %s for a restart: %w", p.server.Name, err)
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "RebootRequested", "Upgrade", "server %s asked for %s to install BIOS %s", p.server.Name, op, p.rec.Version)
	return lifecycle.Done(), nil // the Server's update brings the next pass
}

// operationState reads what the Server says of the request named token: its outcome once it is
// over, or that it is still pending (asked, or being carried out).
func operationState(s *metalv1alpha1.Server, token string) (outcome string, pending bool) {
	for _, res := range strings.Split(s.Annotations[metal.OperationResultAnnotation], ",") {
		if tok, out, ok := strings.Cut(strings.TrimSpace(res), " "); ok && tok == token {
			return out, false
		}
	}
	if s.Annotations[metal.OperationRequesterAnnotation] == token {
		return "", true
	}
	return "", strings.Contains(s.Annotations[metal.OperationIntentAnnotation], " by="+token)
}

// maxRerequests bounds the restarts asked for again in one step.
const maxRerequests = 2

// verify reads the version back after the restart: the step's version ends the step (the next
// one, planned from the spec as it is now, is owed; none left, completed); another one past
// VerifyTimeout fails the attempt.
func (r *BIOSVersionReconciler) verify(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	if p.rec.Phase != phaseVerify {
		return lifecycle.Continue(), nil
	}
	if err := r.connect(p); err != nil {
		return r.bmcFailed(p, err)
	}
	got := p.sys.BiosVersion
	if got != p.rec.Version {
		// An Off system was not restarted: the restart was lost (the Server reported it
		// uncertain), and the image is still staged. Past the timeout, one that may have been
		// lost is asked for again, a few times, before the attempt counts as failed: a restart
		// in maintenance costs nothing, a flash repeated would.
		elapsed := r.Now().Sub(p.rec.at())
		off := p.sys.PowerState == bmc.PowerStateOff && elapsed >= r.Options.VerifyTimeout/4
		late := elapsed >= r.Options.VerifyTimeout
		if (off || late) && p.rec.Rerequested < maxRerequests {
			next := p.rec
			next.Phase, next.At, next.Rerequested = phaseReboot, r.Now().Unix(), p.rec.Rerequested+1
			r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, "RebootAgain", "Upgrade", "server %s is %s and reports BIOS %q, not %q: asking for the restart again",
				p.server.Name, p.sys.PowerState, got, p.rec.Version)
			return r.record(ctx, p, next)
		}
		if !late {
			return lifecycle.RequeueAfter(r.Options.Poll, "version not reported yet"), nil
		}
		return r.failAttempt(ctx, p, fmt.Sprintf("server reports BIOS %q after the restart, want %q", got, p.rec.Version))
	}
	now := r.Now().Unix()
	if steps := remaining(&p.Obj.Spec.BIOSVersionTemplate, got); len(steps) > 0 && !(got == p.Obj.Spec.Version && p.rec.For == p.Obj.Spec.Version) {
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "StepUpgraded", "Upgrade", "server %s runs BIOS %s; next %s", p.server.Name, got, steps[0].Version)
		return r.record(ctx, p, record{Phase: phaseOwed, For: p.Obj.Spec.Version, Version: steps[0].Version, Image: steps[0].Image.URI,
			Attempt: 1, Failed: p.rec.Failed, At: now, Task: p.rec.Task})
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, systemv1alpha1.ReasonUpgraded, "Upgrade", "server %s runs BIOS %s", p.server.Name, got)
	done := record{Phase: phaseCompleted, For: p.Obj.Spec.Version, Version: got, Failed: p.rec.Failed, At: now, Task: p.rec.Task}
	upgradesFinished(kindBIOS, done)
	return r.record(ctx, p, done)
}

package firmware

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// issuedUpdates holds SimpleUpdate's answers, per object and claim time, until the next pass
// records them.
type issuedUpdates struct{ m sync.Map }

type issuedUpdate struct {
	task string
	err  error
}

func issuedKey(uid types.UID, at int64) string { return string(uid) + "@" + strconv.FormatInt(at, 10) }

// issue claims the step's flash with one write (phase issuing) and, once that write has won,
// sends SimpleUpdate. Everything that can fail before the request (the BMC, the identity proof,
// the credentials) comes before the claim: only the request itself lies between the record and
// the BMC.
func (r *BIOSVersionReconciler) issue(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	if p.rec.Phase != phaseMaintenance && p.rec.Phase != phaseOwed {
		return lifecycle.Continue(), nil
	}
	if err := r.connect(p.work); err != nil {
		return r.bmcFailed(p.work, err)
	}
	// The version may have moved while the step waited (another object upgraded the box, or
	// someone by hand): nothing is flashed that is already there.
	switch steps := remaining(&p.Obj.Spec.BIOSVersionTemplate, p.sys.BiosVersion); {
	case len(steps) == 0:
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, systemv1alpha1.ReasonUpToDate, "Upgrade", "server %s runs BIOS %s by now", p.server.Name, p.sys.BiosVersion)
		return r.record(ctx, p.work, record{Phase: phaseCompleted, For: p.Obj.Spec.Version, Version: p.sys.BiosVersion, Failed: p.rec.Failed, At: r.now().Unix(), Message: "already at the version"})
	case steps[0].Version != p.rec.Version:
		next := p.rec
		next.Phase, next.Version, next.Image, next.Attempt = phaseOwed, steps[0].Version, steps[0].Image.URI, 1
		return r.record(ctx, p.work, next)
	}
	req := bmc.UpdateRequest{ImageURI: p.rec.Image, SystemID: p.sysID, TransferProtocol: p.Obj.Spec.Image.TransferProtocol}
	if img := stepImage(&p.Obj.Spec.BIOSVersionTemplate, p.rec); img != nil {
		req.TransferProtocol = img.TransferProtocol
		if img.SecretRef != nil {
			user, pass, err := imageCredentials(ctx, p.Client(), img.SecretRef)
			if err != nil {
				p.problem, p.reason = err, systemv1alpha1.ReasonFlashFailed
				return lifecycle.RequeueAfter(r.Options.RetryAfter, "image credentials"), nil
			}
			req.Username, req.Password = user, pass
		}
	}
	next := p.rec
	next.Phase, next.At, next.Task, next.Message = phaseIssuing, r.now().Unix(), "", ""
	res, err := r.record(ctx, p.work, next)
	if err != nil {
		return res, err
	}
	task, uerr := p.conn.SimpleUpdate(p.bctx, req)
	r.issued.m.Store(issuedKey(p.Obj.UID, next.At), issuedUpdate{task: task, err: uerr})
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "FlashStarted", "Upgrade", "SimpleUpdate of %s sent to server %s's BMC (attempt %d)", p.rec.Image, p.server.Name, p.rec.Attempt)
	return res, nil
}

// stepImage is the image spec of the record's step, for its transfer protocol and credentials.
func stepImage(spec *systemv1alpha1.BIOSVersionTemplate, rec record) *systemv1alpha1.ImageSpec {
	if spec.Image.URI == rec.Image {
		return &spec.Image
	}
	for i := range spec.UpgradePath {
		if spec.UpgradePath[i].Image.URI == rec.Image {
			return &spec.UpgradePath[i].Image
		}
	}
	return nil
}

func imageCredentials(ctx context.Context, c client.Reader, ref *corev1.SecretReference) (string, string, error) {
	sec := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, sec); err != nil {
		return "", "", fmt.Errorf("reading the image's Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return string(sec.Data["username"]), string(sec.Data["password"]), nil
}

// settleIssue records what became of a claimed flash: the answer this process kept, or, when
// it is unknown (another process claimed it, or the answer was lost), what the BMC's task list
// says. A flash is sent again only when the BMC certainly did not take it.
func (r *BIOSVersionReconciler) settleIssue(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	if p.rec.Phase != phaseIssuing {
		return lifecycle.Continue(), nil
	}
	next := p.rec
	next.At = r.now().Unix()
	if v, ok := r.issued.m.LoadAndDelete(issuedKey(p.Obj.UID, p.rec.At)); ok {
		out := v.(issuedUpdate)
		switch {
		case out.err == nil && out.task == "":
			// Done before answering: the image is staged.
			next.Phase = phaseReboot
			return r.record(ctx, p.work, next)
		case out.err == nil:
			next.Phase, next.Task = phaseTask, out.task
			r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "FlashAccepted", "Upgrade", "BMC of server %s took the image; task %s", p.server.Name, out.task)
			return r.record(ctx, p.work, next)
		case errors.Is(out.err, bmc.ErrNotSent):
			next.Phase = phaseOwed
			r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, "FlashNotSent", "Upgrade", "SimpleUpdate not sent (%v); will send it again", out.err)
			return r.record(ctx, p.work, next)
		case refused(out.err):
			return r.failAttempt(ctx, p, fmt.Sprintf("the BMC refused the update: %v", out.err))
		}
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonOutcomeUnknown, "Upgrade",
			"SimpleUpdate's answer was lost (%v): the BMC's tasks will tell whether it took the image", out.err)
	}
	if err := r.connect(p.work); err != nil {
		return r.bmcFailed(p.work, err)
	}
	tasks, err := p.conn.Tasks(p.bctx)
	if bmc.ReasonOf(err) == bmc.ReasonUnsupported {
		// Without a task list nothing can tell: flashing again could be a second flash.
		next.Phase, next.Message = phaseFailed, "the outcome of the flash is unknown and the BMC lists no tasks: not flashed again; check the BMC, then change the spec to try again"
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonOutcomeUnknown, "Upgrade", "%s", next.Message)
		return r.record(ctx, p.work, next)
	}
	if err != nil {
		return r.bmcFailed(p.work, err)
	}
	if t := findTask(tasks, p.rec.Image, p.rec.at()); t != nil {
		next.Phase, next.Task = phaseTask, t.URI
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "FlashAccepted", "Upgrade", "found the flash among the BMC's tasks: %s", t.URI)
		return r.record(ctx, p.work, next)
	}
	next.Phase = phaseOwed
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, "FlashNotSent", "Upgrade", "the BMC has no task for %s: the flash never arrived; sending it again", p.rec.Image)
	return r.record(ctx, p.work, next)
}

// taskSkew allows for a BMC clock behind ours when matching a task's start to the claim.
const taskSkew = 10 * time.Minute

// findTask is the newest task for image that started after the claim (less the skew); a task
// without a readable start time counts when it is for the image.
func findTask(tasks []bmc.TaskStatus, image string, claimed time.Time) *bmc.TaskStatus {
	for i := len(tasks) - 1; i >= 0; i-- {
		t := &tasks[i]
		if t.Image != image {
			continue
		}
		if st, err := time.Parse(time.RFC3339, t.StartTime); err == nil && st.Before(claimed.Add(-taskSkew)) {
			continue
		}
		return t
	}
	return nil
}

// refused: the BMC answered with a 4xx, so it did not take the image.
func refused(err error) bool {
	var be *bmc.Error
	return errors.As(err, &be) && be.StatusCode >= 400 && be.StatusCode < 500
}

// follow reads the flash's task, once per pass, each Poll.
func (r *BIOSVersionReconciler) follow(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	if p.rec.Phase != phaseTask {
		return lifecycle.Continue(), nil
	}
	if err := r.connect(p.work); err != nil {
		return r.bmcFailed(p.work, err)
	}
	t, err := p.conn.Task(p.bctx, p.rec.Task)
	if bmc.ReasonOf(err) == bmc.ReasonNotFound {
		// BMCs forget tasks when they restart: the restart and the version read back tell.
		next := p.rec
		next.Phase, next.At = phaseReboot, r.now().Unix()
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "TaskGone", "Upgrade", "the BMC no longer has task %s; the version read back after the restart will tell", p.rec.Task)
		return r.record(ctx, p.work, next)
	}
	if err != nil {
		return r.bmcFailed(p.work, err)
	}
	p.task = t
	if !t.Done() {
		return lifecycle.RequeueAfter(r.Options.Poll, "task running"), nil
	}
	taskDuration.WithLabelValues(kindBIOS).Observe(r.now().Sub(p.rec.at()).Seconds())
	if t.Failed() {
		return r.failAttempt(ctx, p, fmt.Sprintf("task %s ended %s/%s %v", t.URI, t.State, t.Status, t.Messages))
	}
	next := p.rec
	next.Phase, next.At = phaseReboot, r.now().Unix()
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "FlashDone", "Upgrade", "BIOS %s staged on server %s; a restart installs it", p.rec.Version, p.server.Name)
	return r.record(ctx, p.work, next)
}

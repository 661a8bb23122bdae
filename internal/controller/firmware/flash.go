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

// flasher is what the flash steps need to know of a per-target version object.
type flasher struct {
	kind string
	// issued holds SimpleUpdate's answers of the reconciler.
	issued *issuedUpdates
	// systemID targets a system's firmware (its BIOS); "" the BMC's own.
	systemID string
	// tmpl is the spec's version, image, path and policy.
	tmpl *systemv1alpha1.BIOSVersionTemplate
	// current reads the version in effect (after connect).
	current func() string
	// afterTask is the phase once the task completed: a BIOS waits for a restart; a BMC
	// restarts by itself.
	afterTask phase
	// failAttempt counts a failed attempt.
	failAttempt func(why string) (lifecycle.Result, error)
}

// issue claims the step's flash with one write (phase issuing) and, once that write has won,
// sends SimpleUpdate. Everything that can fail before the request (the BMC, the identity proof,
// the credentials) comes before the claim: only the request itself lies between the record and
// the BMC.
func (a *actor) issue(ctx context.Context, w *work, f flasher) (lifecycle.Result, error) {
	if w.rec.Phase != phaseMaintenance && w.rec.Phase != phaseOwed {
		return lifecycle.Continue(), nil
	}
	if err := a.connect(w); err != nil {
		return a.bmcFailed(w, err)
	}
	// The version may have moved while the step waited (another object upgraded the box, or
	// someone by hand): nothing is flashed that is already there.
	cur := f.current()
	switch steps := remaining(f.tmpl, cur); {
	case len(steps) == 0:
		a.Recorder.Eventf(w.obj, nil, corev1.EventTypeNormal, systemv1alpha1.ReasonUpToDate, "Upgrade", "%s runs %s by now", w.target(), cur)
		return a.record(ctx, w, record{Phase: phaseCompleted, For: f.tmpl.Version, Version: cur, Failed: w.rec.Failed, At: a.now().Unix(), Message: "already at the version"})
	case steps[0].Version != w.rec.Version:
		next := w.rec
		next.Phase, next.Version, next.Image, next.Attempt = phaseOwed, steps[0].Version, steps[0].Image.URI, 1
		return a.record(ctx, w, next)
	}
	req := bmc.UpdateRequest{ImageURI: w.rec.Image, SystemID: f.systemID}
	if img := stepImage(f.tmpl, w.rec); img != nil {
		req.TransferProtocol = img.TransferProtocol
		if img.SecretRef != nil {
			user, pass, err := imageCredentials(ctx, w.c, img.SecretRef)
			if err != nil {
				w.problem, w.reason = err, systemv1alpha1.ReasonFlashFailed
				return lifecycle.RequeueAfter(a.Options.RetryAfter, "image credentials"), nil
			}
			req.Username, req.Password = user, pass
		}
	}
	next := w.rec
	next.Phase, next.At, next.Task, next.Message = phaseIssuing, a.now().Unix(), "", ""
	res, err := a.record(ctx, w, next)
	if err != nil {
		return res, err
	}
	task, uerr := w.conn.SimpleUpdate(w.bctx, req)
	f.issued.m.Store(issuedKey(w.obj.GetUID(), next.At), issuedUpdate{task: task, err: uerr})
	a.Recorder.Eventf(w.obj, nil, corev1.EventTypeNormal, "FlashStarted", "Upgrade", "SimpleUpdate of %s sent for %s (attempt %d)", w.rec.Image, w.target(), w.rec.Attempt)
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
func (a *actor) settleIssue(ctx context.Context, w *work, f flasher) (lifecycle.Result, error) {
	if w.rec.Phase != phaseIssuing {
		return lifecycle.Continue(), nil
	}
	next := w.rec
	next.At = a.now().Unix()
	if v, ok := f.issued.m.LoadAndDelete(issuedKey(w.obj.GetUID(), w.rec.At)); ok {
		out := v.(issuedUpdate)
		switch {
		case out.err == nil && out.task == "":
			// Done before answering: the image is staged.
			next.Phase = f.afterTask
			return a.record(ctx, w, next)
		case out.err == nil:
			next.Phase, next.Task = phaseTask, out.task
			a.Recorder.Eventf(w.obj, nil, corev1.EventTypeNormal, "FlashAccepted", "Upgrade", "the BMC took the image for %s; task %s", w.target(), out.task)
			return a.record(ctx, w, next)
		case errors.Is(out.err, bmc.ErrNotSent):
			next.Phase = phaseOwed
			a.Recorder.Eventf(w.obj, nil, corev1.EventTypeWarning, "FlashNotSent", "Upgrade", "SimpleUpdate not sent (%v); will send it again", out.err)
			return a.record(ctx, w, next)
		case refused(out.err):
			return f.failAttempt(fmt.Sprintf("the BMC refused the update: %v", out.err))
		}
		a.Recorder.Eventf(w.obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonOutcomeUnknown, "Upgrade",
			"SimpleUpdate's answer was lost (%v): the BMC's tasks will tell whether it took the image", out.err)
	}
	if err := a.connect(w); err != nil {
		return a.bmcFailed(w, err)
	}
	tasks, err := w.conn.Tasks(w.bctx)
	if bmc.ReasonOf(err) == bmc.ReasonUnsupported {
		// Without a task list nothing can tell: flashing again could be a second flash.
		next.Phase, next.Message = phaseFailed, "the outcome of the flash is unknown and the BMC lists no tasks: not flashed again; check the BMC, then change the spec to try again"
		a.Recorder.Eventf(w.obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonOutcomeUnknown, "Upgrade", "%s", next.Message)
		return a.record(ctx, w, next)
	}
	if err != nil {
		return a.bmcFailed(w, err)
	}
	if t := findTask(tasks, w.rec.Image, w.rec.at()); t != nil {
		next.Phase, next.Task = phaseTask, t.URI
		a.Recorder.Eventf(w.obj, nil, corev1.EventTypeNormal, "FlashAccepted", "Upgrade", "found the flash among the BMC's tasks: %s", t.URI)
		return a.record(ctx, w, next)
	}
	next.Phase = phaseOwed
	a.Recorder.Eventf(w.obj, nil, corev1.EventTypeWarning, "FlashNotSent", "Upgrade", "the BMC has no task for %s: the flash never arrived; sending it again", w.rec.Image)
	return a.record(ctx, w, next)
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
func (a *actor) follow(ctx context.Context, w *work, f flasher) (*bmc.TaskStatus, lifecycle.Result, error) {
	if w.rec.Phase != phaseTask {
		return nil, lifecycle.Continue(), nil
	}
	if err := a.connect(w); err != nil {
		res, err := a.bmcFailed(w, err)
		return nil, res, err
	}
	t, err := w.conn.Task(w.bctx, w.rec.Task)
	if bmc.ReasonOf(err) == bmc.ReasonNotFound {
		// BMCs forget tasks when they restart: the restart and the version read back tell.
		next := w.rec
		next.Phase, next.At = f.afterTask, a.now().Unix()
		a.Recorder.Eventf(w.obj, nil, corev1.EventTypeNormal, "TaskGone", "Upgrade", "the BMC no longer has task %s; the version read back will tell", w.rec.Task)
		res, err := a.record(ctx, w, next)
		return nil, res, err
	}
	if err != nil {
		res, err := a.bmcFailed(w, err)
		return nil, res, err
	}
	if !t.Done() {
		return t, lifecycle.RequeueAfter(a.Options.Poll, "task running"), nil
	}
	taskDuration.WithLabelValues(f.kind).Observe(a.now().Sub(w.rec.at()).Seconds())
	if t.Failed() {
		res, err := f.failAttempt(fmt.Sprintf("task %s ended %s/%s %v", t.URI, t.State, t.Status, t.Messages))
		return t, res, err
	}
	next := w.rec
	next.Phase, next.At = f.afterTask, a.now().Unix()
	a.Recorder.Eventf(w.obj, nil, corev1.EventTypeNormal, "FlashDone", "Upgrade", "%s %s flashed on %s", f.kind, w.rec.Version, w.target())
	res, err := a.record(ctx, w, next)
	return t, res, err
}

package firmware

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
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
	// pending: an image push still running (beside the passes).
	pending bool
	task    string
	err     error
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
	// prove proves the BMC again right before an image is pushed (the fetch before it may take
	// minutes, in which an address can change hands); nil where the push proves the system
	// itself (a system target, bmc.Expect).
	prove func(ctx context.Context) error
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
		next.Phase, next.Version, next.Image, next.Attempt, next.Busy = phaseOwed, steps[0].Version, steps[0].Image.URI, 1, 0
		return a.record(ctx, w, next)
	}
	if w.rec.Busy != 0 {
		// The BMC ran another update when last asked: look again a poll later, not at once.
		// (Status says BMCBusy from the record; waiting is for the maintenance.)
		if wait := time.Unix(w.rec.At, 0).Add(a.Options.Poll).Sub(a.now()); wait > 0 {
			return lifecycle.RequeueAfter(wait, "BMC busy with another update"), nil
		}
	}
	simple, push, err := w.conn.UpdateMethods(w.bctx)
	if err != nil {
		return a.bmcFailed(w, err)
	}
	if !simple && !push {
		w.problem, w.reason = fmt.Errorf("the BMC offers neither SimpleUpdate nor MultipartHttpPushUri"), systemv1alpha1.ReasonFlashFailed
		return f.failAttempt(w.problem.Error())
	}
	if res, done, err := a.adoptFlash(ctx, w, !simple); done {
		return res, err
	}
	req := bmc.UpdateRequest{ImageURI: w.rec.Image, SystemID: f.systemID}
	if img := stepImage(f.tmpl, w.rec); img != nil {
		req.TransferProtocol = img.TransferProtocol
		if img.SecretRef != nil {
			if err := secretRefAllowed("the image's secretRef", img.SecretRef.Namespace, img.SecretRef.Name, a.Options.secretNamespace()); err != nil {
				return a.refuseSecretRef(w, err)
			}
			user, pass, err := imageCredentials(ctx, w.c, img.SecretRef)
			if err != nil {
				w.problem, w.reason = err, systemv1alpha1.ReasonFlashFailed
				return lifecycle.RequeueAfter(a.Options.RetryAfter, "image credentials"), nil
			}
			req.Username, req.Password = user, pass
		}
	}
	// The previous attempt's task stays named until this one's is known: settling never
	// mistakes it for this one.
	next := w.rec
	next.Phase, next.At, next.Message, next.Push = phaseIssuing, a.now().Unix(), "", !simple
	res, err := a.record(ctx, w, next)
	if err != nil {
		return res, err
	}
	if !simple {
		// The image is fetched here and pushed, beside the passes: that takes longer than any
		// pass may. The answer is kept like SimpleUpdate's.
		key := issuedKey(w.obj.GetUID(), next.At)
		f.issued.m.Store(key, issuedUpdate{pending: true})
		// The push keeps the pass's fence: a shard given up waits for it, and one lost cuts it.
		conn, timeout, prove, fence := w.conn, a.Options.UploadTimeout, f.prove, bmc.FenceOf(w.bctx)
		go func() {
			task, err := pushImage(conn, req, timeout, prove, fence)
			f.issued.m.Store(key, issuedUpdate{task: task, err: err})
		}()
		a.Recorder.Eventf(w.obj, nil, corev1.EventTypeNormal, "FlashStarted", "Upgrade", "pushing %s to the BMC for %s (attempt %d)", w.rec.Image, w.target(), w.rec.Attempt)
		return res, nil
	}
	task, uerr := w.conn.SimpleUpdate(w.bctx, req)
	if req.Password != "" {
		// The request carried the image Secret's password: the BMC's words may quote it.
		uerr = withoutBMCWords(uerr)
	}
	f.issued.m.Store(issuedKey(w.obj.GetUID(), next.At), issuedUpdate{task: task, err: uerr})
	a.Recorder.Eventf(w.obj, nil, corev1.EventTypeNormal, "FlashStarted", "Upgrade", "SimpleUpdate of %s sent for %s (attempt %d)", w.rec.Image, w.target(), w.rec.Attempt)
	return res, nil
}

// adoptFlash follows, instead of sending the image, a flash of it the BMC already took since
// the step was recorded: a record rolled back (a restore from a backup made before the flash was
// sent, a hand edit) reads as owed while the BMC runs or ran that very flash, and a second
// SimpleUpdate would flash the box twice. Only a task that names the image counts here; one
// without a payload cannot tell a flash from other work, and would stall a first flash for good.
// A BMC without a task list is asked nothing (it cannot tell).
func (a *actor) adoptFlash(ctx context.Context, w *work, push bool) (lifecycle.Result, bool, error) {
	tasks, err := w.conn.Tasks(w.bctx)
	if bmc.ReasonOf(err) == bmc.ReasonUnsupported {
		return lifecycle.Result{}, false, nil
	}
	if err != nil {
		res, err := a.bmcFailed(w, err)
		return res, true, err
	}
	look := w.rec
	look.Push = push
	t, uncertain := findTask(tasks, look)
	if t == nil || uncertain {
		return lifecycle.Result{}, false, nil
	}
	next := w.rec
	next.Phase, next.Task, next.Push, next.At, next.Message = phaseTask, t.URI, push, a.now().Unix(), ""
	a.Recorder.Eventf(w.obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonOutcomeUnknown, "Upgrade",
		"the BMC already took %s (task %s, started %s) although the record said it was owed (restored from a backup?): followed, not sent again", w.rec.Image, t.URI, orNone(t.StartTime))
	res, err := a.record(ctx, w, next)
	return res, true, err
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
	key := issuedKey(w.obj.GetUID(), w.rec.At)
	if v, ok := f.issued.m.Load(key); ok && v.(issuedUpdate).pending {
		return lifecycle.RequeueAfter(a.Options.Poll, "image being pushed"), nil
	}
	if v, ok := f.issued.m.LoadAndDelete(key); ok {
		out := v.(issuedUpdate)
		switch {
		case out.err == nil && out.task == "":
			// Accepted without a task: the BMC may still be writing flash. Recorded, then the
			// task list and the firmware inventory below tell when it is done.
			next.Accepted, next.Busy = true, 0
			a.Recorder.Eventf(w.obj, nil, corev1.EventTypeNormal, "FlashAccepted", "Upgrade", "the BMC took the image for %s without naming a task: waiting for it to show the flash", w.target())
			return a.record(ctx, w, next)
		case out.err == nil:
			next.Phase, next.Task, next.Busy = phaseTask, out.task, 0
			a.Recorder.Eventf(w.obj, nil, corev1.EventTypeNormal, "FlashAccepted", "Upgrade", "the BMC took the image for %s; task %s", w.target(), out.task)
			return a.record(ctx, w, next)
		case errors.Is(out.err, errFetch):
			return f.failAttempt(out.err.Error())
		case errors.Is(out.err, bmc.ErrNotSent):
			next.Phase = phaseOwed
			a.Recorder.Eventf(w.obj, nil, corev1.EventTypeWarning, "FlashNotSent", "Upgrade", "SimpleUpdate not sent (%v); will send it again", out.err)
			return a.record(ctx, w, next)
		case busy(out.err):
			return a.busy(ctx, w, next, out.err, f)
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
	unsupported := bmc.ReasonOf(err) == bmc.ReasonUnsupported
	if err != nil && !unsupported {
		return a.bmcFailed(w, err)
	}
	if t, uncertain := findTask(tasks, w.rec); t != nil {
		next.Phase, next.Task, next.Uncertain = phaseTask, t.URI, uncertain
		if uncertain {
			a.Recorder.Eventf(w.obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonOutcomeUnknown, "Upgrade",
				"task %s (started %s) names no image but cannot be ruled out: followed as the flash's, never flashed again on a guess; the version read back decides", t.URI, orNone(t.StartTime))
		} else {
			a.Recorder.Eventf(w.obj, nil, corev1.EventTypeNormal, "FlashAccepted", "Upgrade", "found the flash among the BMC's tasks: %s", t.URI)
		}
		return a.record(ctx, w, next)
	}
	if w.rec.Accepted {
		return a.settleAccepted(ctx, w, f)
	}
	if unsupported {
		// Without a task list nothing can tell: flashing again could be a second flash.
		next.Phase, next.Message = phaseFailed, "the outcome of the flash is unknown and the BMC lists no tasks: not flashed again; check the BMC, then change the spec to try again"
		a.Recorder.Eventf(w.obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonOutcomeUnknown, "Upgrade", "%s", next.Message)
		return a.record(ctx, w, next)
	}
	next.Phase = phaseOwed
	a.Recorder.Eventf(w.obj, nil, corev1.EventTypeWarning, "FlashNotSent", "Upgrade", "the BMC has no task that could be the flash of %s: it never arrived; sending it again", w.rec.Image)
	return a.record(ctx, w, next)
}

// settleAccepted waits, for a flash the BMC accepted without a task and lists none for, until its
// firmware inventory shows the step's version (installed or staged); past VerifyTimeout the
// attempt fails. It is never sent again: the BMC took it.
func (a *actor) settleAccepted(ctx context.Context, w *work, f flasher) (lifecycle.Result, error) {
	inv, err := w.conn.FirmwareInventory(w.bctx)
	if err != nil && bmc.ReasonOf(err) != bmc.ReasonNotFound {
		return a.bmcFailed(w, err)
	}
	for _, fw := range inv {
		if fw.Version == w.rec.Version {
			next := w.rec
			next.Phase, next.At = f.afterTask, a.now().Unix()
			a.Recorder.Eventf(w.obj, nil, corev1.EventTypeNormal, "FlashDone", "Upgrade", "the BMC's firmware inventory shows %s (%s)", w.rec.Version, fw.ID)
			return a.record(ctx, w, next)
		}
	}
	if a.now().Sub(w.rec.at()) < a.Options.VerifyTimeout {
		return lifecycle.RequeueAfter(a.Options.Poll, "accepted without a task; waiting for the BMC to show it"), nil
	}
	return f.failAttempt(fmt.Sprintf("the BMC accepted %s without a task and, after %s, lists no task for it and no %s in its firmware inventory: not restarted, not flashed again",
		w.rec.Image, a.Options.VerifyTimeout, w.rec.Version))
}

func orNone(s string) string {
	if s == "" {
		return "at no time it reports"
	}
	return s
}

// taskLook is when to read a running task again: when its monitor said (Retry-After), within
// [poll, 10 poll]; poll when it said nothing.
func taskLook(retryAfter, poll time.Duration) time.Duration {
	if retryAfter <= 0 {
		return poll
	}
	return min(max(retryAfter, poll), 10*poll)
}

// taskSkew allows for a BMC clock behind ours when matching a task's start to the claim; a
// pushed image carries no URI to match, so its task is matched by time alone, closer.
const (
	taskSkew     = 10 * time.Minute
	pushTaskSkew = time.Minute
)

// findTask is the task of the claimed flash, in whatever order the BMC lists its tasks: the
// newest for the image (for a pushed image, which carries no URI, one naming its file) that started
// after the claim, less the skew, and is not the previous attempt's. Failing that, the newest
// task that cannot be ruled out: one that names no image (many vendors' tasks carry no payload)
// or has no readable start, and did not start before the claim; uncertain is then true. nil:
// every task is ruled out, so the flash never arrived.
func findTask(tasks []bmc.TaskStatus, rec record) (task *bmc.TaskStatus, uncertain bool) {
	claimed := rec.at()
	skew := taskSkew
	if rec.Push {
		skew = pushTaskSkew
	}
	var sure, maybe *bmc.TaskStatus
	var sureAt, maybeAt time.Time
	for i := range tasks {
		t := &tasks[i]
		if t.URI == rec.Task {
			continue
		}
		st, err := time.Parse(time.RFC3339, t.StartTime)
		readable := err == nil
		if readable && st.Before(claimed.Add(-skew)) {
			continue
		}
		if !readable {
			st = time.Unix(1<<40, 0) // no start: as new as can be
		}
		switch {
		case t.Image == rec.Image, rec.Push && readable && t.Image != "" && strings.HasSuffix(t.Image, path.Base(rec.Image)):
			if sure == nil || st.After(sureAt) {
				sure, sureAt = t, st
			}
		case t.Image == "" || !readable:
			if maybe == nil || st.After(maybeAt) {
				maybe, maybeAt = t, st
			}
		}
	}
	if sure != nil {
		return sure, false
	}
	return maybe, maybe != nil
}

// errFetch marks an image that could not be fetched to be pushed: nothing reached the BMC, and
// the attempt failed (the image's address or credentials are wrong, or its server is down).
var errFetch = errors.New("image not fetched")

// maxImage bounds an image fetched to be pushed.
const maxImage = 4 << 30

// pushImage fetches the image (with the image Secret's credentials) into a temporary file, proves
// the BMC again where prove says how, and pushes it, all within timeout and under the pass's
// fence (nil: none).
func pushImage(conn bmc.BMC, req bmc.UpdateRequest, timeout time.Duration, prove func(context.Context) error, fence bmc.Fence) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if fence != nil {
		ctx = bmc.WithFence(ctx, fence)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, req.ImageURI, nil)
	if err != nil {
		return "", fmt.Errorf("image %s: %v: %w", req.ImageURI, err, errFetch)
	}
	if req.Username != "" {
		hreq.SetBasicAuth(req.Username, req.Password)
	}
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return "", fmt.Errorf("fetching image %s: %v: %w", req.ImageURI, err, errFetch)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("fetching image %s: %s: %w", req.ImageURI, resp.Status, errFetch)
	}
	// The file keeps the image's name: the multipart part carries it, and BMCs read it.
	dir, err := os.MkdirTemp("", "metalhub-image-")
	if err != nil {
		return "", fmt.Errorf("image %s: %v: %w", req.ImageURI, err, errFetch)
	}
	defer os.RemoveAll(dir)
	f, err := os.Create(filepath.Join(dir, path.Base(hreq.URL.Path)))
	if err != nil {
		return "", fmt.Errorf("image %s: %v: %w", req.ImageURI, err, errFetch)
	}
	defer f.Close()
	n, err := io.Copy(f, io.LimitReader(resp.Body, maxImage+1))
	if err == nil && n > maxImage {
		err = fmt.Errorf("larger than %d bytes", maxImage)
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		return "", fmt.Errorf("fetching image %s: %v: %w", req.ImageURI, err, errFetch)
	}
	if prove != nil {
		if err := prove(ctx); err != nil {
			return "", fmt.Errorf("proving the BMC before the push: %v: %w", err, bmc.ErrNotSent)
		}
	}
	return conn.PushUpdate(bmc.WithRequestTimeout(ctx, time.Until(deadline(ctx))), req, f)
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// refused: the BMC answered with a 4xx, so it did not take the image.
func refused(err error) bool {
	var be *bmc.Error
	return errors.As(err, &be) && be.StatusCode >= 400 && be.StatusCode < 500
}

// busy: the BMC refused the flash because it runs another update of that firmware (409
// Conflict, Redfish ResourceInUse). That update may be this step's own (a record rolled back, a
// task without a payload that could not be named), someone else's, or the vendor's: in each case
// the box is being flashed and must not be handed back.
func busy(err error) bool {
	var be *bmc.Error
	return errors.As(err, &be) && be.StatusCode == http.StatusConflict
}

// busy waits for the other update to end: the step goes back to owed without a failed attempt,
// and issue sends the image again a poll later (or finds the version there, when the other update
// was this very flash). Only an update that outlasts VerifyTimeout fails the attempt.
func (a *actor) busy(ctx context.Context, w *work, next record, err error, f flasher) (lifecycle.Result, error) {
	if next.Busy == 0 {
		next.Busy = next.At
		a.Recorder.Eventf(w.obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonBMCBusy, "Upgrade",
			"the BMC of %s runs another update (%v): %s is sent once it ends; the box stays in maintenance", w.target(), err, w.rec.Image)
	} else if since := time.Duration(next.At-next.Busy) * time.Second; since > a.Options.VerifyTimeout {
		return f.failAttempt(fmt.Sprintf("the BMC ran another update for longer than %s: %v", a.Options.VerifyTimeout, err))
	}
	next.Phase = phaseOwed
	return a.record(ctx, w, next)
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
		return t, lifecycle.RequeueAfter(taskLook(t.RetryAfter, a.Options.Poll), "task running"), nil
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

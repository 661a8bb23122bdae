package flash

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
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	"github.com/metalhub/metalhub/internal/controller/firmware/secretvalue"
	"github.com/metalhub/metalhub/internal/controller/firmware/work"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// IssuedUpdates holds SimpleUpdate's answers, per object and claim time, until the next pass
// records them.
type IssuedUpdates struct{ m sync.Map }

type issuedUpdate struct {
	// pending: an image push still running (beside the passes).
	pending bool
	task    string
	err     error
}

func issuedKey(uid types.UID, at int64) string { return string(uid) + "@" + strconv.FormatInt(at, 10) }

// Flasher is what the flash steps need to know of a per-target version object.
type Flasher struct {
	Kind string
	// Issued holds SimpleUpdate's answers of the reconciler.
	Issued *IssuedUpdates
	// SystemID targets a system's firmware (its BIOS); "" the BMC's own.
	SystemID string
	// Template is the spec's version, image, path and policy.
	Template *systemv1alpha1.BIOSVersionTemplate
	// Current reads the version in effect (after Connect).
	Current func() string
	// AfterTask is the phase once the task completed: a BIOS waits for a restart; a BMC
	// restarts by itself.
	AfterTask record.Phase
	// FailAttempt counts a failed attempt.
	FailAttempt func(why string) (lifecycle.Result, error)
	// Prove proves the BMC again right before an image is pushed (the fetch before it may take
	// minutes, in which an address can change hands); nil where the push proves the system
	// itself (a system target, bmc.Expect).
	Prove func(ctx context.Context) error
}

// Issue claims the step's flash with one write (phase issuing) and, once that write has won,
// sends SimpleUpdate. Everything that can fail before the request (the BMC, the identity proof,
// the credentials) comes before the claim: only the request itself lies between the record and
// the BMC.
func Issue(ctx context.Context, a *work.Actor, w *work.Work, f Flasher) (lifecycle.Result, error) {
	if w.Rec.Phase != record.PhaseMaintenance && w.Rec.Phase != record.PhaseOwed {
		return lifecycle.Continue(), nil
	}
	if err := a.Connect(w); err != nil {
		return a.BMCFailed(w, err)
	}
	// The version may have moved while the step waited (another object upgraded the box, or
	// someone by hand): nothing is flashed that is already there.
	cur := f.Current()
	switch steps := record.Remaining(f.Template, cur); {
	case len(steps) == 0:
		a.Recorder.Eventf(w.Self, nil, corev1.EventTypeNormal, systemv1alpha1.ReasonUpToDate, "Upgrade", "%s runs %s by now", w.Target(), cur)
		return a.Record(ctx, w, record.Record{Phase: record.PhaseCompleted, For: f.Template.Version, Version: cur, Failed: w.Rec.Failed, At: a.Clock().Unix(), Message: "already at the version"})
	case steps[0].Version != w.Rec.Version:
		next := w.Rec
		next.Phase, next.Version, next.Image, next.Attempt, next.Busy = record.PhaseOwed, steps[0].Version, steps[0].Image.URI, 1, 0
		return a.Record(ctx, w, next)
	}
	if w.Rec.Busy != 0 {
		// The BMC ran another update when last asked: look again a poll later, not at once.
		// (Status says BMCBusy from the record; waiting is for the maintenance.)
		if wait := time.Unix(w.Rec.At, 0).Add(a.Options.Poll).Sub(a.Clock()); wait > 0 {
			return lifecycle.RequeueAfter(wait, "BMC busy with another update"), nil
		}
	}
	simple, push, err := w.Conn.UpdateMethods(w.BMCContext)
	if err != nil {
		return a.BMCFailed(w, err)
	}
	if !simple && !push {
		w.Problem, w.Reason = fmt.Errorf("the BMC offers neither SimpleUpdate nor MultipartHttpPushUri"), systemv1alpha1.ReasonFlashFailed
		return f.FailAttempt(w.Problem.Error())
	}
	if res, done, err := adoptFlash(ctx, a, w, !simple); done {
		return res, err
	}
	req := bmc.UpdateRequest{ImageURI: w.Rec.Image, SystemID: f.SystemID}
	if img := stepImage(f.Template, w.Rec); img != nil {
		req.TransferProtocol = img.TransferProtocol
		if img.SecretRef != nil {
			if err := secretvalue.RefAllowed("the image's secretRef", img.SecretRef.Namespace, img.SecretRef.Name, a.Options.EffectiveSecretNamespace()); err != nil {
				return a.RefuseSecretRef(w, err)
			}
			user, pass, err := imageCredentials(ctx, w.C, img.SecretRef)
			if err != nil {
				w.Problem, w.Reason = err, systemv1alpha1.ReasonFlashFailed
				return lifecycle.RequeueAfter(a.Options.RetryAfter, "image credentials"), nil
			}
			req.Username, req.Password = user, pass
		}
	}
	// The previous attempt's task stays named until this one's is known: settling never
	// mistakes it for this one.
	next := w.Rec
	next.Phase, next.At, next.Message, next.Push = record.PhaseIssuing, a.Clock().Unix(), "", !simple
	res, err := a.Record(ctx, w, next)
	if err != nil {
		return res, err
	}
	if !simple {
		// The image is fetched here and pushed, beside the passes: that takes longer than any
		// pass may. The answer is kept like SimpleUpdate's.
		key := issuedKey(w.Self.GetUID(), next.At)
		f.Issued.m.Store(key, issuedUpdate{pending: true})
		// The push keeps the pass's fence: a shard given up waits for it, and one lost cuts it.
		conn, timeout, prove, fence := w.Conn, a.Options.UploadTimeout, f.Prove, bmc.FenceOf(w.BMCContext)
		go func() {
			task, err := pushImage(conn, req, timeout, prove, fence)
			f.Issued.m.Store(key, issuedUpdate{task: task, err: err})
		}()
		a.Recorder.Eventf(w.Self, nil, corev1.EventTypeNormal, "FlashStarted", "Upgrade", "pushing %s to the BMC for %s (attempt %d)", w.Rec.Image, w.Target(), w.Rec.Attempt)
		return res, nil
	}
	task, uerr := w.Conn.SimpleUpdate(w.BMCContext, req)
	if req.Password != "" {
		// The request carried the image Secret's password: the BMC's words may quote it.
		uerr = secretvalue.WithoutBMCWords(uerr)
	}
	f.Issued.m.Store(issuedKey(w.Self.GetUID(), next.At), issuedUpdate{task: task, err: uerr})
	a.Recorder.Eventf(w.Self, nil, corev1.EventTypeNormal, "FlashStarted", "Upgrade", "SimpleUpdate of %s sent for %s (attempt %d)", w.Rec.Image, w.Target(), w.Rec.Attempt)
	return res, nil
}

// adoptFlash follows, instead of sending the image, a flash of it the BMC already took since
// the step was recorded: a record rolled back (a restore from a backup made before the flash was
// sent, a hand edit) reads as owed while the BMC runs or ran that very flash, and a second
// SimpleUpdate would flash the box twice. Only a task that names the image counts here; one
// without a payload cannot tell a flash from other work, and would stall a first flash for good.
// A BMC without a task list is asked nothing (it cannot tell).
func adoptFlash(ctx context.Context, a *work.Actor, w *work.Work, push bool) (lifecycle.Result, bool, error) {
	tasks, err := w.Conn.Tasks(w.BMCContext)
	if bmc.ReasonOf(err) == bmc.ReasonUnsupported {
		return lifecycle.Result{}, false, nil
	}
	if err != nil {
		res, err := a.BMCFailed(w, err)
		return res, true, err
	}
	look := w.Rec
	look.Push = push
	t, uncertain := findTask(tasks, look)
	if t == nil || uncertain {
		return lifecycle.Result{}, false, nil
	}
	next := w.Rec
	next.Phase, next.Task, next.Push, next.At, next.Message = record.PhaseTask, t.URI, push, a.Clock().Unix(), ""
	a.Recorder.Eventf(w.Self, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonOutcomeUnknown, "Upgrade",
		"the BMC already took %s (task %s, started %s) although the record said it was owed (restored from a backup?): followed, not sent again", w.Rec.Image, t.URI, orNone(t.StartTime))
	res, err := a.Record(ctx, w, next)
	return res, true, err
}

// stepImage is the image spec of the record's step, for its transfer protocol and credentials.
func stepImage(spec *systemv1alpha1.BIOSVersionTemplate, rec record.Record) *systemv1alpha1.ImageSpec {
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

// SettleIssue records what became of a claimed flash: the answer this process kept, or, when
// it is unknown (another process claimed it, or the answer was lost), what the BMC's task list
// says. A flash is sent again only when the BMC certainly did not take it.
func SettleIssue(ctx context.Context, a *work.Actor, w *work.Work, f Flasher) (lifecycle.Result, error) {
	if w.Rec.Phase != record.PhaseIssuing {
		return lifecycle.Continue(), nil
	}
	next := w.Rec
	next.At = a.Clock().Unix()
	key := issuedKey(w.Self.GetUID(), w.Rec.At)
	if v, ok := f.Issued.m.Load(key); ok && v.(issuedUpdate).pending {
		return lifecycle.RequeueAfter(a.Options.Poll, "image being pushed"), nil
	}
	if v, ok := f.Issued.m.LoadAndDelete(key); ok {
		out := v.(issuedUpdate)
		switch {
		case out.err == nil && out.task == "":
			// Accepted without a task: the BMC may still be writing flash. Recorded, then the
			// task list and the firmware inventory below tell when it is done.
			next.Accepted, next.Busy = true, 0
			a.Recorder.Eventf(w.Self, nil, corev1.EventTypeNormal, "FlashAccepted", "Upgrade", "the BMC took the image for %s without naming a task: waiting for it to show the flash", w.Target())
			return a.Record(ctx, w, next)
		case out.err == nil:
			next.Phase, next.Task, next.Busy = record.PhaseTask, out.task, 0
			a.Recorder.Eventf(w.Self, nil, corev1.EventTypeNormal, "FlashAccepted", "Upgrade", "the BMC took the image for %s; task %s", w.Target(), out.task)
			return a.Record(ctx, w, next)
		case errors.Is(out.err, errFetch):
			return f.FailAttempt(out.err.Error())
		case errors.Is(out.err, bmc.ErrNotSent):
			next.Phase = record.PhaseOwed
			a.Recorder.Eventf(w.Self, nil, corev1.EventTypeWarning, "FlashNotSent", "Upgrade", "SimpleUpdate not sent (%v); will send it again", out.err)
			return a.Record(ctx, w, next)
		case busy(out.err):
			return waitBusy(ctx, a, w, next, out.err, f)
		case work.Refused(out.err):
			return f.FailAttempt(fmt.Sprintf("the BMC refused the update: %v", out.err))
		}
		a.Recorder.Eventf(w.Self, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonOutcomeUnknown, "Upgrade",
			"SimpleUpdate's answer was lost (%v): the BMC's tasks will tell whether it took the image", out.err)
	}
	if err := a.Connect(w); err != nil {
		return a.BMCFailed(w, err)
	}
	tasks, err := w.Conn.Tasks(w.BMCContext)
	unsupported := bmc.ReasonOf(err) == bmc.ReasonUnsupported
	if err != nil && !unsupported {
		return a.BMCFailed(w, err)
	}
	if t, uncertain := findTask(tasks, w.Rec); t != nil {
		next.Phase, next.Task, next.Uncertain = record.PhaseTask, t.URI, uncertain
		if uncertain {
			a.Recorder.Eventf(w.Self, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonOutcomeUnknown, "Upgrade",
				"task %s (started %s) names no image but cannot be ruled out: followed as the flash's, never flashed again on a guess; the version read back decides", t.URI, orNone(t.StartTime))
		} else {
			a.Recorder.Eventf(w.Self, nil, corev1.EventTypeNormal, "FlashAccepted", "Upgrade", "found the flash among the BMC's tasks: %s", t.URI)
		}
		return a.Record(ctx, w, next)
	}
	if w.Rec.Accepted {
		return settleAccepted(ctx, a, w, f)
	}
	if unsupported {
		// Without a task list nothing can tell: flashing again could be a second flash.
		next.Phase, next.Message = record.PhaseFailed, "the outcome of the flash is unknown and the BMC lists no tasks: not flashed again; check the BMC, then change the spec to try again"
		a.Recorder.Eventf(w.Self, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonOutcomeUnknown, "Upgrade", "%s", next.Message)
		return a.Record(ctx, w, next)
	}
	next.Phase = record.PhaseOwed
	a.Recorder.Eventf(w.Self, nil, corev1.EventTypeWarning, "FlashNotSent", "Upgrade", "the BMC has no task that could be the flash of %s: it never arrived; sending it again", w.Rec.Image)
	return a.Record(ctx, w, next)
}

// settleAccepted waits, for a flash the BMC accepted without a task and lists none for, until its
// firmware inventory shows the step's version (installed or staged); past VerifyTimeout the
// attempt fails. It is never sent again: the BMC took it.
func settleAccepted(ctx context.Context, a *work.Actor, w *work.Work, f Flasher) (lifecycle.Result, error) {
	inv, err := w.Conn.FirmwareInventory(w.BMCContext)
	if err != nil && bmc.ReasonOf(err) != bmc.ReasonNotFound {
		return a.BMCFailed(w, err)
	}
	for _, fw := range inv {
		if fw.Version == w.Rec.Version {
			next := w.Rec
			next.Phase, next.At = f.AfterTask, a.Clock().Unix()
			a.Recorder.Eventf(w.Self, nil, corev1.EventTypeNormal, "FlashDone", "Upgrade", "the BMC's firmware inventory shows %s (%s)", w.Rec.Version, fw.ID)
			return a.Record(ctx, w, next)
		}
	}
	if a.Clock().Sub(w.Rec.AtTime()) < a.Options.VerifyTimeout {
		return lifecycle.RequeueAfter(a.Options.Poll, "accepted without a task; waiting for the BMC to show it"), nil
	}
	return f.FailAttempt(fmt.Sprintf("the BMC accepted %s without a task and, after %s, lists no task for it and no %s in its firmware inventory: not restarted, not flashed again",
		w.Rec.Image, a.Options.VerifyTimeout, w.Rec.Version))
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
func findTask(tasks []bmc.TaskStatus, rec record.Record) (task *bmc.TaskStatus, uncertain bool) {
	claimed := rec.AtTime()
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

// busy: the BMC refused the flash because it runs another update of that firmware (409
// Conflict, Redfish ResourceInUse). That update may be this step's own (a record rolled back, a
// task without a payload that could not be named), someone else's, or the vendor's: in each case
// the box is being flashed and must not be handed back.
func busy(err error) bool {
	var be *bmc.Error
	return errors.As(err, &be) && be.StatusCode == http.StatusConflict
}

// waitBusy waits for the other update to end: the step goes back to owed without a failed attempt,
// and issue sends the image again a poll later (or finds the version there, when the other update
// was this very flash). Only an update that outlasts VerifyTimeout fails the attempt.
func waitBusy(ctx context.Context, a *work.Actor, w *work.Work, next record.Record, err error, f Flasher) (lifecycle.Result, error) {
	if next.Busy == 0 {
		next.Busy = next.At
		a.Recorder.Eventf(w.Self, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonBMCBusy, "Upgrade",
			"the BMC of %s runs another update (%v): %s is sent once it ends; the box stays in maintenance", w.Target(), err, w.Rec.Image)
	} else if since := time.Duration(next.At-next.Busy) * time.Second; since > a.Options.VerifyTimeout {
		return f.FailAttempt(fmt.Sprintf("the BMC ran another update for longer than %s: %v", a.Options.VerifyTimeout, err))
	}
	next.Phase = record.PhaseOwed
	return a.Record(ctx, w, next)
}

// Follow reads the flash's task, once per pass, each Poll.
func Follow(ctx context.Context, a *work.Actor, w *work.Work, f Flasher) (*bmc.TaskStatus, lifecycle.Result, error) {
	if w.Rec.Phase != record.PhaseTask {
		return nil, lifecycle.Continue(), nil
	}
	if err := a.Connect(w); err != nil {
		res, err := a.BMCFailed(w, err)
		return nil, res, err
	}
	t, err := w.Conn.Task(w.BMCContext, w.Rec.Task)
	if bmc.ReasonOf(err) == bmc.ReasonNotFound {
		// BMCs forget tasks when they restart: the restart and the version read back tell.
		next := w.Rec
		next.Phase, next.At = f.AfterTask, a.Clock().Unix()
		a.Recorder.Eventf(w.Self, nil, corev1.EventTypeNormal, "TaskGone", "Upgrade", "the BMC no longer has task %s; the version read back will tell", w.Rec.Task)
		res, err := a.Record(ctx, w, next)
		return nil, res, err
	}
	if err != nil {
		res, err := a.BMCFailed(w, err)
		return nil, res, err
	}
	if !t.Done() {
		return t, lifecycle.RequeueAfter(taskLook(t.RetryAfter, a.Options.Poll), "task running"), nil
	}
	taskDuration.WithLabelValues(f.Kind).Observe(a.Clock().Sub(w.Rec.AtTime()).Seconds())
	if t.Failed() {
		res, err := f.FailAttempt(fmt.Sprintf("task %s ended %s/%s %v", t.URI, t.State, t.Status, t.Messages))
		return t, res, err
	}
	next := w.Rec
	next.Phase, next.At = f.AfterTask, a.Clock().Unix()
	a.Recorder.Eventf(w.Self, nil, corev1.EventTypeNormal, "FlashDone", "Upgrade", "%s %s flashed on %s", f.Kind, w.Rec.Version, w.Target())
	res, err := a.Record(ctx, w, next)
	return t, res, err
}

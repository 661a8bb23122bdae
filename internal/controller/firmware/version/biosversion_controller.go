package version

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/firmware/flash"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	"github.com/metalhub/metalhub/internal/controller/firmware/work"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/shard"
)

// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biosversions,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biosversions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=maintenance.metal.ironcore.dev,resources=servermaintenances,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servers,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

// BIOSVersionReconciler upgrades a server's BIOS. Each pass reads the record
// (record.Annotation), does the one thing the phase asks, writes at most once and returns:
//
//	(none) → the version is read; there already → completed; else → maintenance
//	maintenance/owed → once the server is in its ServerMaintenance: issuing, then SimpleUpdate
//	issuing → the answer (in this process's memory) or, after a crash, the BMC's task list → task
//	task → the Redfish task read each Poll → reboot (or owed again / failed)
//	reboot → the Server's operation annotation with a token; its result → verify
//	verify → the version read back → the next step's owed, or completed
//	completed/failed → the maintenance metalhub created is deleted
//
// Status is rebuilt from the record every pass.
type BIOSVersionReconciler struct {
	Client client.Client
	work.Actor

	// issued holds what SimpleUpdate answered until the next pass records it: only the
	// process that issued it knows.
	issued flash.IssuedUpdates
}

// SetupWithManager registers the reconciler.
func (r *BIOSVersionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	rec := lifecycle.NewReconciler(r.Client, func() *systemv1alpha1.BIOSVersion { return &systemv1alpha1.BIOSVersion{} }, r.handle)
	// With the maintenance it created (its creation and deletion): the server entering
	// maintenance, and the result of the restart it was asked for.
	b := work.NewController(mgr, "biosversion", &systemv1alpha1.BIOSVersion{},
		func(v *systemv1alpha1.BIOSVersion) bool { return v.Status.State == "" }, r.Options.Concurrency).
		Watches(&metalv1alpha1.Server{}, handler.EnqueueRequestsFromMapFunc(work.ServerRequests(r.Client,
			func() client.ObjectList { return &systemv1alpha1.BIOSVersionList{} }, IndexServer)),
			builder.WithPredicates(lifecycle.Predicate()))
	return shard.Gate(r.Options.Shards, mgr.GetCache(), b, rec, func() client.ObjectList { return &systemv1alpha1.BIOSVersionList{} },
		func(ctx context.Context, v *systemv1alpha1.BIOSVersion) string {
			return work.ServerRefKey(ctx, r.Client, v, v.Spec.ServerRef)
		}).Complete(rec)
}

// versionPass is what one pass over a BIOSVersion knows.
type versionPass struct {
	*lifecycle.Pass[*systemv1alpha1.BIOSVersion]
	*work.Work
	// task is the flash's task as read this pass.
	task *bmc.TaskStatus
}

func (r *BIOSVersionReconciler) handle(ctx context.Context, lp *lifecycle.Pass[*systemv1alpha1.BIOSVersion]) (lifecycle.Result, error) {
	v := lp.Obj
	w, cancel := r.NewServerWork(ctx, v, lp.Client(), v.Spec.ServerRef, &v.Spec.ServerMaintenanceRef, v.Spec.ServerMaintenancePolicy)
	defer cancel()
	p := &versionPass{Pass: lp, Work: w}
	res, err := lifecycle.Steps(ctx, p, append(work.OpenServerPass[*versionPass](&r.Actor),
		r.restart,
		r.finish,
		r.begin,
		r.maintain,
		r.issue,
		r.settleIssue,
		r.follow,
		r.reboot,
		r.verify,
	)...)
	r.report(p)
	if p.Retried() && err == nil && !res.IsWrote() {
		return lifecycle.RequeueAfter(r.Options.RetryAfter, p.Reason), nil
	}
	return res, err
}

// restart drops a record for another version that did not send anything yet, or that ended:
// the new spec starts over. A flash under way is seen through first (its image is staged and
// owes its restart); verify then plans from the new spec.
func (r *BIOSVersionReconciler) restart(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	return r.StartOver(ctx, p.Work, p.Obj.Spec.Version, record.PhaseCompleted, record.PhaseFailed, record.PhaseMaintenance, record.PhaseOwed)
}

// finish lets go of the maintenance metalhub created once the upgrade ended.
func (r *BIOSVersionReconciler) finish(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	if !p.HasRec || !p.Rec.Terminal() {
		return lifecycle.Continue(), nil
	}
	return work.ReleaseMaintenance(ctx, p.Client(), p.Obj, p.Maint)
}

// begin reads the version the server runs and records the plan's first step, or that there
// is nothing to do.
func (r *BIOSVersionReconciler) begin(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	if p.HasRec {
		return lifecycle.Continue(), nil
	}
	if err := r.Connect(p.Work); err != nil {
		return r.BMCFailed(p.Work, err)
	}
	steps := record.Remaining(&p.Obj.Spec.BIOSVersionTemplate, p.Sys.BiosVersion)
	now := r.Clock()
	if len(steps) == 0 {
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, systemv1alpha1.ReasonUpToDate, "Upgrade", "server %s already runs BIOS %s", p.Server.Name, p.Sys.BiosVersion)
		return r.Record(ctx, p.Work, record.Record{Phase: record.PhaseCompleted, For: p.Obj.Spec.Version, Version: p.Sys.BiosVersion, At: now.Unix(), Message: "already at the version"})
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "UpgradeStarted", "Upgrade", "server %s runs BIOS %q: %d step(s) to %q", p.Server.Name, p.Sys.BiosVersion, len(steps), p.Obj.Spec.Version)
	return r.Record(ctx, p.Work, record.Record{Phase: record.PhaseMaintenance, For: p.Obj.Spec.Version, Version: steps[0].Version, Image: steps[0].Image.URI, Attempt: 1, At: now.Unix()})
}

// maintain makes sure the server is in the upgrade's maintenance before anything that needs it
// (a flash, a restart); the flash in flight and the verification do not wait for it.
func (r *BIOSVersionReconciler) maintain(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	switch p.Rec.Phase {
	case record.PhaseMaintenance, record.PhaseOwed, record.PhaseReboot:
		return r.Actor.Maintain(ctx, p.Work, "biosversion-"+p.Obj.Name, fmt.Sprintf("BIOS upgrade to %s (BIOSVersion %s)", p.Rec.Version, p.Obj.Name))
	}
	return lifecycle.Continue(), nil
}

// flasher is how the flash steps see a BIOSVersion.
func (r *BIOSVersionReconciler) flasher(ctx context.Context, p *versionPass) flash.Flasher {
	return flash.Flasher{Kind: kindBIOS, Issued: &r.issued, SystemID: p.SysID, Template: &p.Obj.Spec.BIOSVersionTemplate,
		Current:   func() string { return p.Sys.BiosVersion },
		AfterTask: record.PhaseReboot,
		FailAttempt: func(why string) (lifecycle.Result, error) {
			return r.failAttempt(ctx, p, why)
		}}
}

func (r *BIOSVersionReconciler) issue(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	if p.Rec.Phase != record.PhaseMaintenance && p.Rec.Phase != record.PhaseOwed {
		return lifecycle.Continue(), nil
	}
	if err := r.Connect(p.Work); err != nil {
		return r.BMCFailed(p.Work, err)
	}
	return flash.Issue(ctx, &r.Actor, p.Work, r.flasher(ctx, p))
}

func (r *BIOSVersionReconciler) settleIssue(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	return flash.SettleIssue(ctx, &r.Actor, p.Work, r.flasher(ctx, p))
}

func (r *BIOSVersionReconciler) follow(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	t, res, err := flash.Follow(ctx, &r.Actor, p.Work, r.flasher(ctx, p))
	if t != nil {
		p.task = t
	}
	return res, err
}

// failAttempt counts a failed attempt of the step: the step is owed again within the retry
// policy, else the upgrade failed.
func (r *BIOSVersionReconciler) failAttempt(ctx context.Context, p *versionPass, why string) (lifecycle.Result, error) {
	next := p.Rec
	next.Failed++
	next.Busy = 0
	next.At = r.Clock().Unix()
	next.Message = why
	if next.Failed >= record.MaxAttempts(p.Obj.Spec.RetryPolicy) {
		next.Phase = record.PhaseFailed
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonFlashFailed, "Upgrade", "BIOS %s on server %s failed (attempt %d): %s", p.Rec.Version, p.Server.Name, p.Rec.Attempt, why)
	} else {
		next.Phase, next.Attempt, next.Rerequested = record.PhaseOwed, p.Rec.Attempt+1, 0
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonFlashRetry, "Upgrade", "BIOS %s on server %s: attempt %d failed (%s); trying again", p.Rec.Version, p.Server.Name, p.Rec.Attempt, why)
	}
	flash.UpgradesFinished(kindBIOS, next)
	return r.Record(ctx, p.Work, next)
}

// report rebuilds status from the record and what the pass saw.
func (r *BIOSVersionReconciler) report(p *versionPass) {
	var cur string
	if p.Sys != nil {
		cur = p.Sys.BiosVersion
	}
	p.Obj.Status = versionStatus(p.Obj.Status, p.Obj.Generation, p.Work, p.task, cur, p.Target())
}

// versionStatus is a version object's status: rebuilt from the record and what the pass saw
// (the task read, the version in effect; "" when not read this pass).
func versionStatus(prev systemv1alpha1.BIOSVersionStatus, gen int64, w *work.Work, task *bmc.TaskStatus, current, target string) systemv1alpha1.BIOSVersionStatus {
	st := prev.DeepCopy()
	st.ObservedGeneration = gen
	st.FailedAttempts = w.Rec.Failed
	switch {
	case current != "":
		st.CurrentVersion = current
	case w.Rec.Phase == record.PhaseCompleted:
		st.CurrentVersion = w.Rec.Version // read back when it completed
	}
	st.Step = ""
	if w.HasRec && !w.Rec.Terminal() {
		st.Step = w.Rec.Version
		if w.Rec.Attempt > 1 {
			st.Step = fmt.Sprintf("%s (attempt %d)", w.Rec.Version, w.Rec.Attempt)
		}
	}
	switch {
	case task != nil:
		st.UpgradeTask = &systemv1alpha1.TaskStatus{URI: task.URI, State: task.State, Status: task.Status, PercentageComplete: int32(task.PercentComplete)}
	case w.Rec.Task != "" && (st.UpgradeTask == nil || st.UpgradeTask.URI != w.Rec.Task):
		st.UpgradeTask = &systemv1alpha1.TaskStatus{URI: w.Rec.Task}
	}
	st.State = StateOf(w.HasRec, w.Rec)
	upgraded := func(status metav1.ConditionStatus, reason, msg string) {
		lifecycle.SetCondition(&st.Conditions, gen, systemv1alpha1.ConditionUpgraded, status, reason, msg)
	}
	switch {
	case w.Problem != nil:
		upgraded(metav1.ConditionFalse, w.Reason, w.Problem.Error())
	case w.Conflict != "":
		upgraded(metav1.ConditionFalse, systemv1alpha1.ReasonMaintenanceConflict, w.Conflict)
	case !w.HasRec:
		upgraded(metav1.ConditionFalse, "Pending", "not looked at yet")
	case w.Rec.Phase == record.PhaseCompleted && w.Rec.Message != "":
		upgraded(metav1.ConditionTrue, systemv1alpha1.ReasonUpToDate, fmt.Sprintf("%s runs %s", target, w.Rec.For))
	case w.Rec.Phase == record.PhaseCompleted:
		upgraded(metav1.ConditionTrue, systemv1alpha1.ReasonUpgraded, fmt.Sprintf("upgraded to %s", w.Rec.For))
	case w.Rec.Phase == record.PhaseFailed:
		upgraded(metav1.ConditionFalse, systemv1alpha1.ReasonFlashFailed, fmt.Sprintf("%s: %s (after %d failed attempt(s)); change the spec to try again", w.Rec.Version, w.Rec.Message, w.Rec.Failed))
	case w.Rec.Busy != 0 && w.Rec.Phase != record.PhaseMaintenance:
		upgraded(metav1.ConditionFalse, systemv1alpha1.ReasonBMCBusy, fmt.Sprintf("the BMC has run another update of this firmware since %s: %s is sent once it ends",
			time.Unix(w.Rec.Busy, 0).UTC().Format(time.RFC3339), w.Rec.Version))
	case w.Waiting != "" || w.Rec.Phase == record.PhaseMaintenance:
		msg := w.Waiting
		if msg == "" {
			msg = "waiting for maintenance"
		}
		upgraded(metav1.ConditionFalse, systemv1alpha1.ReasonAwaitingMaintenance, msg)
	case w.Rec.Uncertain && w.Rec.Phase == record.PhaseTask:
		upgraded(metav1.ConditionFalse, systemv1alpha1.ReasonOutcomeUnknown, fmt.Sprintf("the answer to the flash of %s was lost; following task %s, which names no image but could not be ruled out", w.Rec.Version, w.Rec.Task))
	case w.Rec.Phase == record.PhaseReboot:
		upgraded(metav1.ConditionFalse, systemv1alpha1.ReasonRebooting, fmt.Sprintf("%s staged; %s restarting", w.Rec.Version, target))
	case w.AwaitingOwner():
		upgraded(metav1.ConditionFalse, systemv1alpha1.ReasonAwaitingOwnerReboot,
			fmt.Sprintf("%s staged; %s is settings-only: it installs at the owner's next restart, which metalhub waits for", w.Rec.Version, target))
	case w.Rec.Phase == record.PhaseVerify:
		upgraded(metav1.ConditionFalse, systemv1alpha1.ReasonVerifying, fmt.Sprintf("reading the version back (want %s)", w.Rec.Version))
	default:
		upgraded(metav1.ConditionFalse, systemv1alpha1.ReasonFlashing, fmt.Sprintf("flashing %s (attempt %d)", w.Rec.Version, w.Rec.Attempt))
	}
	return *st
}

// StateOf maps the record to the reference's states.
func StateOf(has bool, rec record.Record) systemv1alpha1.VersionState {
	switch {
	case !has, rec.Phase == record.PhaseMaintenance:
		return systemv1alpha1.VersionStatePending
	case rec.Phase == record.PhaseCompleted:
		return systemv1alpha1.VersionStateCompleted
	case rec.Phase == record.PhaseFailed:
		return systemv1alpha1.VersionStateFailed
	}
	return systemv1alpha1.VersionStateInProgress
}

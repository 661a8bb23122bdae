package firmware

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biosversions,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biosversions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=maintenance.metal.ironcore.dev,resources=servermaintenances,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servers,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

// BIOSVersionReconciler upgrades a server's BIOS. Each pass reads the record
// (RecordAnnotation), does the one thing the phase asks, writes at most once and returns:
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
	Client   client.Client
	Recorder events.EventRecorder
	Options  Options
	// Now is the clock (tests move it).
	Now func() time.Time

	// issued holds what SimpleUpdate answered until the next pass records it: only the
	// process that issued it knows.
	issued issuedUpdates
}

// SetupWithManager registers the reconciler.
func (r *BIOSVersionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Now == nil {
		r.Now = time.Now
	}
	rec := lifecycle.NewReconciler(r.Client, func() *systemv1alpha1.BIOSVersion { return &systemv1alpha1.BIOSVersion{} }, r.handle)
	return ctrl.NewControllerManagedBy(mgr).
		Named("biosversion").
		For(&systemv1alpha1.BIOSVersion{}, builder.WithPredicates(predicate.Or(lifecycle.Predicate(),
			lifecycle.StatusWiped(func(o client.Object) bool { return o.(*systemv1alpha1.BIOSVersion).Status.State == "" })))).
		// The maintenance it created: its creation and deletion.
		Owns(&maintenancev1alpha1.ServerMaintenance{}).
		// The server entering maintenance, and the result of the restart it was asked for.
		Watches(&metalv1alpha1.Server{}, handler.EnqueueRequestsFromMapFunc(r.forServer), builder.WithPredicates(lifecycle.Predicate())).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Options.Concurrency, 1)}).
		Complete(rec)
}

func (r *BIOSVersionReconciler) forServer(ctx context.Context, o client.Object) []reconcile.Request {
	list := &systemv1alpha1.BIOSVersionList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{indexVersionServer: o.GetName()}); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// versionPass is what one pass over a BIOSVersion knows.
type versionPass struct {
	*lifecycle.Pass[*systemv1alpha1.BIOSVersion]
	c    client.Client
	bctx context.Context

	server *metalv1alpha1.Server
	rec    record
	hasRec bool
	// maint is the ServerMaintenance spec.serverMaintenanceRef names, when it exists.
	maint *maintenancev1alpha1.ServerMaintenance

	conn  bmc.BMC
	sysID string
	sys   *bmc.SystemStatus

	// What the pass saw, for the report.
	task     *bmc.TaskStatus
	waiting  string // why the work waits (AwaitingMaintenance's message)
	problem  error  // what is in the way (server missing, BMC failing)
	reason   string // the problem's reason
	conflict string
}

func (r *BIOSVersionReconciler) handle(ctx context.Context, lp *lifecycle.Pass[*systemv1alpha1.BIOSVersion]) (lifecycle.Result, error) {
	bctx, cancel := context.WithTimeout(ctx, r.Options.RequestTimeout)
	defer cancel()
	p := &versionPass{Pass: lp, c: lp.Client(), bctx: bctx}
	p.rec, p.hasRec = parseRecord(lp.Obj.Annotations[RecordAnnotation])
	res, err := lifecycle.Steps(ctx, p,
		r.read,
		r.restart,
		r.finish,
		r.begin,
		r.maintain,
		r.issue,
		r.settleIssue,
		r.follow,
		r.reboot,
		r.verify,
	)
	r.report(p)
	if p.problem != nil && err == nil && !res.IsWrote() {
		return lifecycle.RequeueAfter(r.Options.RetryAfter, p.reason), nil
	}
	return res, err
}

// read reads the server and the maintenance named.
func (r *BIOSVersionReconciler) read(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	v := p.Obj
	s := &metalv1alpha1.Server{}
	if v.Spec.ServerRef == nil || v.Spec.ServerRef.Name == "" {
		p.problem, p.reason = errors.New("spec.serverRef names no server"), systemv1alpha1.ReasonServerNotFound
		return lifecycle.Done(), nil
	}
	if err := p.c.Get(ctx, client.ObjectKey{Name: v.Spec.ServerRef.Name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			p.problem, p.reason = fmt.Errorf("server %s not found", v.Spec.ServerRef.Name), systemv1alpha1.ReasonServerNotFound
			return lifecycle.Done(), nil
		}
		return lifecycle.Result{}, fmt.Errorf("reading server %s: %w", v.Spec.ServerRef.Name, err)
	}
	p.server = s
	if ref := v.Spec.ServerMaintenanceRef; ref != nil {
		m := &maintenancev1alpha1.ServerMaintenance{}
		err := p.c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, m)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return lifecycle.Result{}, fmt.Errorf("reading ServerMaintenance %s/%s: %w", ref.Namespace, ref.Name, err)
		default:
			p.maint = m
		}
	}
	return lifecycle.Continue(), nil
}

// restart drops a record for another version that did not send anything yet, or that ended:
// the new spec starts over. A flash under way is seen through first (its image is staged and
// owes its restart); verify then plans from the new spec.
func (r *BIOSVersionReconciler) restart(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	if !p.hasRec || p.rec.For == p.Obj.Spec.Version {
		return lifecycle.Continue(), nil
	}
	switch p.rec.Phase {
	case phaseCompleted, phaseFailed, phaseMaintenance, phaseOwed:
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "VersionChanged", "Upgrade", "version %s asked for (was %s): starting over", p.Obj.Spec.Version, p.rec.For)
		return lifecycle.Wrote("record cleared"), lifecycle.PatchMetadata(ctx, p.c, p.Obj, func(o client.Object) {
			lifecycle.RemoveAnnotation(o, RecordAnnotation)
		})
	}
	return lifecycle.Continue(), nil
}

// finish lets go of the maintenance metalhub created once the upgrade ended.
func (r *BIOSVersionReconciler) finish(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	if !p.hasRec || !p.rec.terminal() {
		return lifecycle.Continue(), nil
	}
	return releaseMaintenance(ctx, p.c, p.Obj, p.maint)
}

// begin reads the version the server runs and records the plan's first step, or that there
// is nothing to do.
func (r *BIOSVersionReconciler) begin(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	if p.hasRec {
		return lifecycle.Continue(), nil
	}
	if err := r.connect(p); err != nil {
		return r.bmcFailed(p, err)
	}
	steps := remaining(&p.Obj.Spec.BIOSVersionTemplate, p.sys.BiosVersion)
	now := r.Now()
	if len(steps) == 0 {
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, systemv1alpha1.ReasonUpToDate, "Upgrade", "server %s already runs BIOS %s", p.server.Name, p.sys.BiosVersion)
		return r.record(ctx, p, record{Phase: phaseCompleted, For: p.Obj.Spec.Version, Version: p.sys.BiosVersion, At: now.Unix(), Message: "already at the version"})
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "UpgradeStarted", "Upgrade", "server %s runs BIOS %q: %d step(s) to %q", p.server.Name, p.sys.BiosVersion, len(steps), p.Obj.Spec.Version)
	return r.record(ctx, p, record{Phase: phaseMaintenance, For: p.Obj.Spec.Version, Version: steps[0].Version, Image: steps[0].Image.URI, Attempt: 1, At: now.Unix()})
}

// record writes the record: the pass's one write.
func (r *BIOSVersionReconciler) record(ctx context.Context, p *versionPass, rec record) (lifecycle.Result, error) {
	p.rec, p.hasRec = rec, true
	return lifecycle.Wrote("record " + string(rec.Phase)), lifecycle.PatchMetadata(ctx, p.c, p.Obj, func(o client.Object) {
		lifecycle.SetAnnotation(o, RecordAnnotation, rec.String())
	})
}

// maintain makes sure the server is in the upgrade's maintenance before anything that needs it
// (a flash, a restart); the flash in flight and the verification do not wait for it.
func (r *BIOSVersionReconciler) maintain(ctx context.Context, p *versionPass) (lifecycle.Result, error) {
	switch p.rec.Phase {
	case phaseMaintenance, phaseOwed, phaseReboot:
	default:
		return lifecycle.Continue(), nil
	}
	reason := fmt.Sprintf("BIOS upgrade to %s (BIOSVersion %s)", p.rec.Version, p.Obj.Name)
	held, err := holdMaintenance(ctx, p.c, p.Obj, &p.Obj.Spec.ServerMaintenanceRef, p.maint, p.server,
		"biosversion-"+p.Obj.Name, r.Options.MaintenanceNamespace, p.Obj.Spec.ServerMaintenancePolicy, reason)
	switch {
	case err != nil:
		return lifecycle.Result{}, err
	case held.wrote != "":
		if held.created {
			r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "MaintenanceRequested", "Upgrade", "ServerMaintenance %s/%s requested for server %s",
				p.Obj.Spec.ServerMaintenanceRef.Namespace, p.Obj.Spec.ServerMaintenanceRef.Name, p.server.Name)
			return lifecycle.Done(), nil // Owns brings the next pass
		}
		return lifecycle.Wrote(held.wrote), nil
	case held.conflict != "":
		p.conflict = held.conflict
		return lifecycle.RequeueAfter(r.Options.RetryAfter, "maintenance conflict"), nil
	case !held.held:
		p.waiting = held.waiting
		return lifecycle.Done(), nil // the server's entering it brings the next pass
	}
	return lifecycle.Continue(), nil
}

// connect reaches the server's box, proven to be it, and reads its system.
func (r *BIOSVersionReconciler) connect(p *versionPass) error {
	if p.sys != nil {
		return nil
	}
	conn, sysID, err := metal.ServerBMC(p.bctx, p.c, r.Options.Pool, p.server)
	if err != nil {
		return err
	}
	sys, err := conn.System(p.bctx, sysID)
	if err != nil {
		return err
	}
	p.conn, p.sysID, p.sys = conn, sysID, sys
	return nil
}

// bmcFailed reports a BMC that failed and looks again later; nothing waits on it.
func (r *BIOSVersionReconciler) bmcFailed(p *versionPass, err error) (lifecycle.Result, error) {
	p.problem, p.reason = err, systemv1alpha1.ReasonBMCUnavailable
	after := r.Options.RetryAfter
	if at, ok := bmc.RetryAt(err); ok && time.Until(at) > after {
		after = time.Until(at)
	}
	return lifecycle.RequeueAfter(after, "BMC failed"), nil
}

// failAttempt counts a failed attempt of the step: the step is owed again within the retry
// policy, else the upgrade failed.
func (r *BIOSVersionReconciler) failAttempt(ctx context.Context, p *versionPass, why string) (lifecycle.Result, error) {
	next := p.rec
	next.Failed++
	next.At = r.Now().Unix()
	next.Message = why
	if next.Failed >= maxAttempts(p.Obj.Spec.RetryPolicy) {
		next.Phase = phaseFailed
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonFlashFailed, "Upgrade", "BIOS %s on server %s failed (attempt %d): %s", p.rec.Version, p.server.Name, p.rec.Attempt, why)
	} else {
		next.Phase, next.Attempt, next.Rerequested = phaseOwed, p.rec.Attempt+1, 0
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonFlashRetry, "Upgrade", "BIOS %s on server %s: attempt %d failed (%s); trying again", p.rec.Version, p.server.Name, p.rec.Attempt, why)
	}
	upgradesFinished(kindBIOS, next)
	return r.record(ctx, p, next)
}

// report rebuilds status from the record and what the pass saw.
func (r *BIOSVersionReconciler) report(p *versionPass) {
	v := p.Obj
	st := v.Status.DeepCopy()
	st.ObservedGeneration = v.Generation
	st.FailedAttempts = p.rec.Failed
	switch {
	case p.sys != nil:
		st.CurrentVersion = p.sys.BiosVersion
	case p.rec.Phase == phaseCompleted:
		st.CurrentVersion = p.rec.Version // read back when it completed
	}
	st.Step = ""
	if p.hasRec && !p.rec.terminal() {
		st.Step = p.rec.Version
		if p.rec.Attempt > 1 {
			st.Step = fmt.Sprintf("%s (attempt %d)", p.rec.Version, p.rec.Attempt)
		}
	}
	switch {
	case p.task != nil:
		st.UpgradeTask = &systemv1alpha1.TaskStatus{URI: p.task.URI, State: p.task.State, Status: p.task.Status, PercentageComplete: int32(p.task.PercentComplete)}
	case p.rec.Task != "" && (st.UpgradeTask == nil || st.UpgradeTask.URI != p.rec.Task):
		st.UpgradeTask = &systemv1alpha1.TaskStatus{URI: p.rec.Task}
	}
	st.State = stateOf(p.hasRec, p.rec)
	upgraded := func(status metav1.ConditionStatus, reason, msg string) {
		lifecycle.SetCondition(&st.Conditions, v.Generation, systemv1alpha1.ConditionUpgraded, status, reason, msg)
	}
	switch {
	case p.problem != nil:
		upgraded(metav1.ConditionFalse, p.reason, p.problem.Error())
	case p.conflict != "":
		upgraded(metav1.ConditionFalse, systemv1alpha1.ReasonMaintenanceConflict, p.conflict)
	case !p.hasRec:
		upgraded(metav1.ConditionFalse, "Pending", "not looked at yet")
	case p.rec.Phase == phaseCompleted && p.rec.Message != "":
		upgraded(metav1.ConditionTrue, systemv1alpha1.ReasonUpToDate, fmt.Sprintf("server runs BIOS %s", p.rec.For))
	case p.rec.Phase == phaseCompleted:
		upgraded(metav1.ConditionTrue, systemv1alpha1.ReasonUpgraded, fmt.Sprintf("upgraded to BIOS %s", p.rec.For))
	case p.rec.Phase == phaseFailed:
		upgraded(metav1.ConditionFalse, systemv1alpha1.ReasonFlashFailed, fmt.Sprintf("BIOS %s: %s (after %d failed attempt(s)); change the spec to try again", p.rec.Version, p.rec.Message, p.rec.Failed))
	case p.waiting != "" || p.rec.Phase == phaseMaintenance:
		msg := p.waiting
		if msg == "" {
			msg = "waiting for the server's maintenance"
		}
		upgraded(metav1.ConditionFalse, systemv1alpha1.ReasonAwaitingMaintenance, msg)
	case p.rec.Phase == phaseReboot:
		upgraded(metav1.ConditionFalse, systemv1alpha1.ReasonRebooting, fmt.Sprintf("BIOS %s staged; server %s restarting", p.rec.Version, v.Spec.ServerRef.Name))
	case p.rec.Phase == phaseVerify:
		upgraded(metav1.ConditionFalse, systemv1alpha1.ReasonVerifying, fmt.Sprintf("reading the version back (want %s)", p.rec.Version))
	default:
		upgraded(metav1.ConditionFalse, systemv1alpha1.ReasonFlashing, fmt.Sprintf("flashing BIOS %s (attempt %d)", p.rec.Version, p.rec.Attempt))
	}
	v.Status = *st // the Reconciler writes it when it changed and the pass wrote nothing else
}

// stateOf maps the record to the reference's states.
func stateOf(has bool, rec record) systemv1alpha1.VersionState {
	switch {
	case !has, rec.Phase == phaseMaintenance:
		return systemv1alpha1.VersionStatePending
	case rec.Phase == phaseCompleted:
		return systemv1alpha1.VersionStateCompleted
	case rec.Phase == phaseFailed:
		return systemv1alpha1.VersionStateFailed
	}
	return systemv1alpha1.VersionStateInProgress
}

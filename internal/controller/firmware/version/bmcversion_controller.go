package version

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	baseboardv1alpha1 "github.com/metalhub/metalhub/api/baseboard/v1alpha1"
	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/firmware/flash"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	"github.com/metalhub/metalhub/internal/controller/firmware/work"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/shard"
)

// +kubebuilder:rbac:groups=baseboard.metal.ironcore.dev,resources=bmcversions,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=baseboard.metal.ironcore.dev,resources=bmcversions/status,verbs=get;update;patch

const kindBMC = "BMCVersion"

// BMCVersionReconciler upgrades a BMC's own firmware, as BIOSVersionReconciler a BIOS, with two
// differences: the BMC restarts by itself once its task completes (it answers nothing for a
// while: each pass that cannot reach it looks again later, nothing waits on it), so the version
// is read back from its Manager without a restart asked; and its hosts keep running unless
// serverMaintenancePolicy asks for every server of the BMC to be in maintenance first.
type BMCVersionReconciler struct {
	Client client.Client
	work.Actor
	issued flash.IssuedUpdates
}

// SetupWithManager registers the reconciler.
func (r *BMCVersionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	rec := lifecycle.NewReconciler(r.Client, func() *baseboardv1alpha1.BMCVersion { return &baseboardv1alpha1.BMCVersion{} }, r.handle)
	b := work.NewController(mgr, "bmcversion", &baseboardv1alpha1.BMCVersion{},
		func(v *baseboardv1alpha1.BMCVersion) bool { return v.Status.State == "" }, r.Options.Concurrency).
		// Its BMC reporting the reset asked of it.
		Watches(&metalv1alpha1.BMC{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.ofBMC(ctx, o.GetName())
		}), builder.WithPredicates(lifecycle.Predicate())).
		// Its servers entering maintenance.
		Watches(&metalv1alpha1.Server{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			if ref := o.(*metalv1alpha1.Server).Spec.BMCRef; ref != nil {
				return r.ofBMC(ctx, ref.Name)
			}
			return nil
		}), builder.WithPredicates(lifecycle.Predicate()))
	return shard.Gate(r.Options.Shards, mgr.GetCache(), b, rec, func() client.ObjectList { return &baseboardv1alpha1.BMCVersionList{} },
		func(_ context.Context, v *baseboardv1alpha1.BMCVersion) string {
			return work.BMCRefKey(v, v.Spec.BMCRef)
		}).Complete(rec)
}

// ofBMC are the BMCVersions of the BMC named name.
func (r *BMCVersionReconciler) ofBMC(ctx context.Context, name string) []reconcile.Request {
	list := &baseboardv1alpha1.BMCVersionList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if ref := list.Items[i].Spec.BMCRef; ref != nil && ref.Name == name {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

type bmcVersionPass struct {
	*lifecycle.Pass[*baseboardv1alpha1.BMCVersion]
	*work.Work
	bmcObj  *metalv1alpha1.BMC
	servers []metalv1alpha1.Server
	maints  map[string]*maintenancev1alpha1.ServerMaintenance // by name
	mgr     *bmc.ManagerInfo
	task    *bmc.TaskStatus
}

func (r *BMCVersionReconciler) template(v *baseboardv1alpha1.BMCVersion) *systemv1alpha1.BIOSVersionTemplate {
	t := v.Spec.BMCVersionTemplate
	return &systemv1alpha1.BIOSVersionTemplate{Version: t.Version, Image: t.Image, UpdatePolicy: t.UpdatePolicy, UpgradePath: t.UpgradePath}
}

func (r *BMCVersionReconciler) handle(ctx context.Context, lp *lifecycle.Pass[*baseboardv1alpha1.BMCVersion]) (lifecycle.Result, error) {
	bctx, cancel := context.WithTimeout(ctx, r.Options.RequestTimeout)
	defer cancel()
	v := lp.Obj
	var none *metalv1alpha1.ObjectReference
	w := &work.Work{Self: v, C: lp.Client(), BMCContext: bctx, MaintRef: &none}
	p := &bmcVersionPass{Pass: lp, Work: w, maints: map[string]*maintenancev1alpha1.ServerMaintenance{}}
	w.Reach = func(w *work.Work) error {
		conn, err := bmcaccess.ProvenBMC(w.BMCContext, w.C, r.Options.Pool, p.bmcObj)
		if err != nil {
			return err
		}
		m, err := conn.Manager(w.BMCContext)
		if err != nil {
			return err
		}
		w.Conn, p.mgr = conn, m
		return nil
	}
	res, err := lifecycle.Steps(ctx, p,
		lifecycle.EnsureFinalizer[*bmcVersionPass](work.Finalizer),
		r.read,
		func(ctx context.Context, p *bmcVersionPass) (lifecycle.Result, error) {
			return r.Leave(ctx, p.Work, work.MaintList(p.maints)...)
		},
		r.restart,
		r.finish,
		r.begin,
		r.maintain,
		r.issue,
		func(ctx context.Context, p *bmcVersionPass) (lifecycle.Result, error) {
			return flash.SettleIssue(ctx, &r.Actor, p.Work, r.flasher(ctx, p))
		},
		func(ctx context.Context, p *bmcVersionPass) (lifecycle.Result, error) {
			t, res, err := flash.Follow(ctx, &r.Actor, p.Work, r.flasher(ctx, p))
			if t != nil {
				p.task = t
			}
			return res, err
		},
		r.reset,
		r.verify,
	)
	r.report(p)
	if p.Retried() && err == nil && !res.IsWrote() {
		return lifecycle.RequeueAfter(r.Options.RetryAfter, p.Reason), nil
	}
	return res, err
}

func (r *BMCVersionReconciler) flasher(ctx context.Context, p *bmcVersionPass) flash.Flasher {
	c, b := r.Client, p.bmcObj
	return flash.Flasher{Kind: kindBMC, Issued: &r.issued, Template: r.template(p.Obj),
		Current:   func() string { return p.mgr.FirmwareVersion },
		AfterTask: record.PhaseVerify,
		Prove: func(ctx context.Context) error {
			_, err := bmcaccess.ProvenBMC(ctx, c, r.Options.Pool, b)
			return err
		},
		FailAttempt: func(why string) (lifecycle.Result, error) {
			return r.failAttempt(ctx, p, why)
		}}
}

// read reads the BMC, its servers and the maintenances named.
func (r *BMCVersionReconciler) read(ctx context.Context, p *bmcVersionPass) (lifecycle.Result, error) {
	t, res, err := r.ReadBMC(ctx, p.Work, p.Obj.Spec.BMCRef, p.Obj.Spec.ServerMaintenanceRefs)
	if t != nil {
		p.bmcObj, p.servers, p.maints = t.BMC, t.Servers, t.Maints
	}
	return res, err
}

func (r *BMCVersionReconciler) restart(ctx context.Context, p *bmcVersionPass) (lifecycle.Result, error) {
	return r.StartOver(ctx, p.Work, p.Obj.Spec.Version, record.PhaseCompleted, record.PhaseFailed, record.PhaseMaintenance, record.PhaseOwed)
}

// finish lets go of the maintenances metalhub created once the upgrade ended.
func (r *BMCVersionReconciler) finish(ctx context.Context, p *bmcVersionPass) (lifecycle.Result, error) {
	if !p.HasRec || !p.Rec.Terminal() {
		return lifecycle.Continue(), nil
	}
	return work.ReleaseAll(ctx, p.C, p.Obj, p.maints)
}

func (r *BMCVersionReconciler) begin(ctx context.Context, p *bmcVersionPass) (lifecycle.Result, error) {
	if p.HasRec {
		return lifecycle.Continue(), nil
	}
	if err := r.Connect(p.Work); err != nil {
		return r.BMCFailed(p.Work, err)
	}
	cur := p.mgr.FirmwareVersion
	steps := record.Remaining(r.template(p.Obj), cur)
	now := r.Clock().Unix()
	if len(steps) == 0 {
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, systemv1alpha1.ReasonUpToDate, "Upgrade", "%s already runs %s", p.Target(), cur)
		return r.Record(ctx, p.Work, record.Record{Phase: record.PhaseCompleted, For: p.Obj.Spec.Version, Version: cur, At: now, Message: "already at the version"})
	}
	ph := record.PhaseOwed
	if p.Obj.Spec.ServerMaintenancePolicy != "" {
		ph = record.PhaseMaintenance
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "UpgradeStarted", "Upgrade", "%s runs %q: %d step(s) to %q", p.Target(), cur, len(steps), p.Obj.Spec.Version)
	return r.Record(ctx, p.Work, record.Record{Phase: ph, For: p.Obj.Spec.Version, Version: steps[0].Version, Image: steps[0].Image.URI, Attempt: 1, At: now})
}

// maintain takes every server of the BMC into maintenance before the first flash when the
// policy asks for it.
func (r *BMCVersionReconciler) maintain(ctx context.Context, p *bmcVersionPass) (lifecycle.Result, error) {
	if p.Obj.Spec.ServerMaintenancePolicy == "" || (p.Rec.Phase != record.PhaseMaintenance && p.Rec.Phase != record.PhaseOwed) {
		return lifecycle.Continue(), nil
	}
	return r.HoldServers(ctx, p.Work, work.ServerHold{Servers: p.servers, Named: p.Obj.Spec.ServerMaintenanceRefs, Maints: p.maints,
		Prefix: "bmcversion-" + p.Obj.Name, Policy: p.Obj.Spec.ServerMaintenancePolicy,
		Reason: fmt.Sprintf("BMC firmware %s (BMCVersion %s)", p.Rec.Version, p.Obj.Name),
		SetRefs: func(o client.Object, refs []metalv1alpha1.ObjectReference) {
			o.(*baseboardv1alpha1.BMCVersion).Spec.ServerMaintenanceRefs = refs
		}})
}

func (r *BMCVersionReconciler) issue(ctx context.Context, p *bmcVersionPass) (lifecycle.Result, error) {
	if p.Rec.Phase != record.PhaseMaintenance && p.Rec.Phase != record.PhaseOwed {
		return lifecycle.Continue(), nil
	}
	if err := r.Connect(p.Work); err != nil {
		return r.BMCFailed(p.Work, err)
	}
	return flash.Issue(ctx, &r.Actor, p.Work, r.flasher(ctx, p))
}

// reset asks the BMC for the manager reset that activates a staged image, exactly once (by
// token, as a server's restart).
func (r *BMCVersionReconciler) reset(ctx context.Context, p *bmcVersionPass) (lifecycle.Result, error) {
	if p.Rec.Phase != record.PhaseReboot {
		return lifecycle.Continue(), nil
	}
	token := p.Rec.Token(string(p.Obj.UID))
	switch outcome, pending := work.OperationState(p.bmcObj.Annotations, token); {
	case outcome == intent.ResultDone || outcome == intent.ResultUncertain:
		next := p.Rec
		next.Phase, next.At = record.PhaseVerify, r.Clock().Unix()
		return r.Record(ctx, p.Work, next)
	case outcome != "":
		return r.failAttempt(ctx, p, "the BMC's reset was refused")
	case pending:
		return lifecycle.Done(), nil // the BMC's report brings the next pass
	}
	return r.AskOperation(ctx, p.Work, p.bmcObj, metalv1alpha1.OperationGracefulRestartBMC, token, "activate "+p.Rec.Version)
}

// verify reads the version the BMC reports once it is back from its restart: while it answers
// nothing, each pass looks again later.
func (r *BMCVersionReconciler) verify(ctx context.Context, p *bmcVersionPass) (lifecycle.Result, error) {
	if p.Rec.Phase != record.PhaseVerify {
		return lifecycle.Continue(), nil
	}
	late := r.Clock().Sub(p.Rec.AtTime()) >= r.Options.VerifyTimeout
	if err := r.Connect(p.Work); err != nil {
		if late {
			return r.failAttempt(ctx, p, fmt.Sprintf("the BMC has not answered since its update: %v", err))
		}
		return r.BMCFailed(p.Work, err)
	}
	got := p.mgr.FirmwareVersion
	if got != p.Rec.Version {
		// A BMC that answers with the old version a while after its task completed keeps the
		// image staged until its manager is reset (some do): asked for once, through the BMC's
		// operation annotation, which the BMC controller carries out exactly once.
		if r.Clock().Sub(p.Rec.AtTime()) >= r.Options.VerifyTimeout/4 && p.Rec.Rerequested < 1 {
			next := p.Rec
			next.Phase, next.At, next.Rerequested = record.PhaseReboot, r.Clock().Unix(), p.Rec.Rerequested+1
			r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "ResetNeeded", "Upgrade", "%s still reports %q: its manager is reset to activate %s", p.Target(), got, p.Rec.Version)
			return r.Record(ctx, p.Work, next)
		}
		if !late {
			return lifecycle.RequeueAfter(r.Options.Poll, "version not reported yet"), nil
		}
		return r.failAttempt(ctx, p, fmt.Sprintf("the BMC reports %q after its update and a reset, want %q", got, p.Rec.Version))
	}
	now := r.Clock().Unix()
	tmpl := r.template(p.Obj)
	if steps := record.Remaining(tmpl, got); len(steps) > 0 && !(got == tmpl.Version && p.Rec.For == tmpl.Version) {
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "StepUpgraded", "Upgrade", "%s runs %s; next %s", p.Target(), got, steps[0].Version)
		return r.Record(ctx, p.Work, record.Record{Phase: record.PhaseOwed, For: tmpl.Version, Version: steps[0].Version, Image: steps[0].Image.URI,
			Attempt: 1, Failed: p.Rec.Failed, At: now, Task: p.Rec.Task})
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, systemv1alpha1.ReasonUpgraded, "Upgrade", "%s runs %s", p.Target(), got)
	done := record.Record{Phase: record.PhaseCompleted, For: tmpl.Version, Version: got, Failed: p.Rec.Failed, At: now, Task: p.Rec.Task}
	flash.UpgradesFinished(kindBMC, done)
	return r.Record(ctx, p.Work, done)
}

func (r *BMCVersionReconciler) failAttempt(ctx context.Context, p *bmcVersionPass, why string) (lifecycle.Result, error) {
	next := p.Rec
	next.Failed++
	next.Busy = 0
	next.At, next.Message = r.Clock().Unix(), why
	if next.Failed >= record.MaxAttempts(p.Obj.Spec.RetryPolicy) {
		next.Phase = record.PhaseFailed
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonFlashFailed, "Upgrade", "%s %s failed (attempt %d): %s", p.Target(), p.Rec.Version, p.Rec.Attempt, why)
	} else {
		next.Phase, next.Attempt = record.PhaseOwed, p.Rec.Attempt+1
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonFlashRetry, "Upgrade", "%s %s: attempt %d failed (%s); trying again", p.Target(), p.Rec.Version, p.Rec.Attempt, why)
	}
	flash.UpgradesFinished(kindBMC, next)
	return r.Record(ctx, p.Work, next)
}

func (r *BMCVersionReconciler) report(p *bmcVersionPass) {
	v := p.Obj
	var cur string
	if p.mgr != nil {
		cur = p.mgr.FirmwareVersion
	}
	v.Status = versionStatus(v.Status, v.Generation, p.Work, p.task, cur, p.Target())
}

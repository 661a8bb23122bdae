package settings

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
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	"github.com/metalhub/metalhub/internal/controller/firmware/secretvalue"
	"github.com/metalhub/metalhub/internal/controller/firmware/work"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/shard"
)

// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biossettings,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biossettings/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=bmcs,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch

// indexSettingsServer indexes BIOSSettings by the server they name.
const indexSettingsServer = "spec.serverRef.name"

// BIOSSettingsReconciler applies a server's BIOS settings flow: the steps in priority order,
// each that differs from what is in effect staged in the Bios settings object and installed by
// one restart (in the ServerMaintenance the object names, made as for BIOSVersion), then read
// back. A step already in effect needs neither maintenance nor restart. The record
// (record.Annotation) holds the step and its phase; status is rebuilt from it.
//
//	(none) → the server must run spec.version; the first step not in effect → maintenance, or
//	         all in effect → completed
//	maintenance/owed → in maintenance: the step's differing attributes staged → reboot
//	reboot → the Server's operation annotation with a token → verify
//	verify → in effect: the next step not in effect → owed, or completed
type BIOSSettingsReconciler struct {
	Client client.Client
	work.Actor
}

// SetupWithManager registers the reconciler.
func (r *BIOSSettingsReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &systemv1alpha1.BIOSSettings{}, indexSettingsServer, func(obj client.Object) []string {
		if ref := obj.(*systemv1alpha1.BIOSSettings).Spec.ServerRef; ref != nil && ref.Name != "" {
			return []string{ref.Name}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing BIOSSettings by server: %w", err)
	}
	rec := lifecycle.NewReconciler(r.Client, func() *systemv1alpha1.BIOSSettings { return &systemv1alpha1.BIOSSettings{} }, r.handle)
	b := work.NewController(mgr, "biossettings", &systemv1alpha1.BIOSSettings{},
		func(s *systemv1alpha1.BIOSSettings) bool { return s.Status.State == "" }, r.Options.Concurrency).
		Watches(&metalv1alpha1.Server{}, handler.EnqueueRequestsFromMapFunc(work.ServerRequests(r.Client,
			func() client.ObjectList { return &systemv1alpha1.BIOSSettingsList{} }, indexSettingsServer)),
			builder.WithPredicates(lifecycle.Predicate()))
	return shard.Gate(r.Options.Shards, mgr.GetCache(), b, rec, func() client.ObjectList { return &systemv1alpha1.BIOSSettingsList{} },
		func(ctx context.Context, v *systemv1alpha1.BIOSSettings) string {
			return work.ServerRefKey(ctx, r.Client, v, v.Spec.ServerRef)
		}).Complete(rec)
}

// settingsPass is what one pass over a BIOSSettings knows.
type settingsPass struct {
	*lifecycle.Pass[*systemv1alpha1.BIOSSettings]
	*work.Work
	flow []step // resolved, in order (begin, stage, verify)
}

func (r *BIOSSettingsReconciler) handle(ctx context.Context, lp *lifecycle.Pass[*systemv1alpha1.BIOSSettings]) (lifecycle.Result, error) {
	s := lp.Obj
	w, cancel := r.NewServerWork(ctx, s, lp.Client(), s.Spec.ServerRef, &s.Spec.ServerMaintenanceRef, s.Spec.ServerMaintenancePolicy)
	defer cancel()
	p := &settingsPass{Pass: lp, Work: w}
	res, err := lifecycle.Steps(ctx, p, append(work.OpenServerPass[*settingsPass](&r.Actor),
		r.restart,
		r.finish,
		r.begin,
		r.maintain,
		r.stage,
		r.reboot,
		r.verify,
	)...)
	r.report(p)
	if p.Retried() && err == nil && !res.IsWrote() {
		return lifecycle.RequeueAfter(r.Options.RetryAfter, p.Reason), nil
	}
	return res, err
}

// restart drops a record made for another spec, unless a restart is owed (what was staged is
// installed first; verify then reads against the new spec).
func (r *BIOSSettingsReconciler) restart(ctx context.Context, p *settingsPass) (lifecycle.Result, error) {
	return r.StartOver(ctx, p.Work, specHash(&p.Obj.Spec.BIOSSettingsTemplate), record.PhaseCompleted, record.PhaseFailed, record.PhaseMaintenance, record.PhaseOwed)
}

func (r *BIOSSettingsReconciler) finish(ctx context.Context, p *settingsPass) (lifecycle.Result, error) {
	if !p.HasRec || !p.Rec.Terminal() {
		return lifecycle.Continue(), nil
	}
	return work.ReleaseMaintenance(ctx, p.Client(), p.Obj, p.Maint)
}

// prepare reaches the box, checks it runs the version the settings are for, resolves the flow
// and reads the BIOS attributes in effect; ok false: the pass ends with res.
func (r *BIOSSettingsReconciler) prepare(ctx context.Context, p *settingsPass) (attrs map[string]any, res lifecycle.Result, err error, ok bool) {
	if err := r.Connect(p.Work); err != nil {
		res, err = r.BMCFailed(p.Work, err)
		return nil, res, err, false
	}
	if v := p.Obj.Spec.Version; p.Sys.BiosVersion != v {
		p.Problem, p.Reason = fmt.Errorf("the settings are for BIOS %q; server %s runs %q", v, p.Server.Name, p.Sys.BiosVersion), systemv1alpha1.ReasonVersionMismatch
		return nil, lifecycle.RequeueAfter(r.Options.RetryAfter, "BIOS version"), nil, false
	}
	flow, ferr := resolveFlow(ctx, p.Client(), p.Obj, &p.Obj.Spec.BIOSSettingsTemplate, r.Options.EffectiveSecretNamespace())
	if ferr != nil {
		if reason, _ := lifecycle.ReasonOf(ferr); reason == systemv1alpha1.ReasonSecretRefNotAllowed {
			res, err = r.RefuseSecretRef(p.Work, ferr)
			return nil, res, err, false
		}
		p.Problem, p.Reason = ferr, systemv1alpha1.ReasonVariableNotFound
		return nil, lifecycle.RequeueAfter(r.Options.RetryAfter, "variables"), nil, false
	}
	p.flow = flow
	bios, berr := p.Conn.Bios(p.BMCContext, p.SysID)
	if berr != nil {
		res, err = r.BMCFailed(p.Work, berr)
		return nil, res, err, false
	}
	return bios.Attributes, lifecycle.Result{}, nil, true
}

// advance records where the flow stands from step on: the next step not in effect is owed
// (phase given), or the flow is completed. verified: step from was set and restarted.
func (r *BIOSSettingsReconciler) advance(ctx context.Context, p *settingsPass, attrs map[string]any, from int, verified bool, ph record.Phase) (lifecycle.Result, error) {
	now := r.Clock().Unix()
	i, applied, err := flowProgress(p.flow, attrs, from, verified, p.Rec.Applied, now)
	if err != nil {
		done := record.Record{Phase: record.PhaseFailed, For: specHash(&p.Obj.Spec.BIOSSettingsTemplate), Version: p.flow[i].Name, Failed: p.Rec.Failed, At: now, Applied: applied, Message: err.Error()}
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonInvalidSettings, "Settings", "step %s: %v", p.flow[i].Name, err)
		return r.Record(ctx, p.Work, done)
	}
	if i == len(p.flow) {
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, systemv1alpha1.ReasonSettingsApplied, "Settings", "every step in effect on server %s", p.Server.Name)
		return r.Record(ctx, p.Work, record.Record{Phase: record.PhaseCompleted, For: specHash(&p.Obj.Spec.BIOSSettingsTemplate), Failed: p.Rec.Failed, At: now, Applied: applied})
	}
	attempt := int32(1)
	if p.HasRec && p.Rec.Version == p.flow[i].Name && ph == record.PhaseOwed {
		attempt = p.Rec.Attempt
	}
	return r.Record(ctx, p.Work, record.Record{Phase: ph, For: specHash(&p.Obj.Spec.BIOSSettingsTemplate), Version: p.flow[i].Name, Attempt: attempt, Failed: p.Rec.Failed, At: now, Applied: applied})
}

// begin finds the first step not in effect.
func (r *BIOSSettingsReconciler) begin(ctx context.Context, p *settingsPass) (lifecycle.Result, error) {
	if p.HasRec {
		return lifecycle.Continue(), nil
	}
	attrs, res, err, ok := r.prepare(ctx, p)
	if !ok {
		return res, err
	}
	return r.advance(ctx, p, attrs, 0, false, record.PhaseMaintenance)
}

func (r *BIOSSettingsReconciler) maintain(ctx context.Context, p *settingsPass) (lifecycle.Result, error) {
	switch p.Rec.Phase {
	case record.PhaseMaintenance, record.PhaseOwed, record.PhaseReboot:
		return r.Actor.Maintain(ctx, p.Work, "biossettings-"+p.Obj.Name, fmt.Sprintf("BIOS settings step %s (BIOSSettings %s)", p.Rec.Version, p.Obj.Name))
	}
	return lifecycle.Continue(), nil
}

// stage sends the step's differing attributes to the Bios settings object. Sending them again
// is harmless (the same values staged), so a crash before the record only repeats the PATCH.
func (r *BIOSSettingsReconciler) stage(ctx context.Context, p *settingsPass) (lifecycle.Result, error) {
	if p.Rec.Phase != record.PhaseMaintenance && p.Rec.Phase != record.PhaseOwed {
		return lifecycle.Continue(), nil
	}
	attrs, res, err, ok := r.prepare(ctx, p)
	if !ok {
		return res, err
	}
	i := stepIndex(p.Rec.Version, p.flow)
	diff, derr := differing(p.flow[i].Settings, attrs, false)
	if derr != nil || len(diff) == 0 {
		// In effect by now, or not applicable: decided as from the start of the step.
		return r.advance(ctx, p, attrs, i, false, record.PhaseOwed)
	}
	if err := secretvalue.RedactBMC(p.Conn.SetBiosAttributes(p.BMCContext, p.SysID, diff.Send()), diff); err != nil {
		if work.Refused(err) {
			return r.failAttempt(ctx, p, fmt.Sprintf("the BMC refused the settings: %v", err))
		}
		return r.BMCFailed(p.Work, err)
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "SettingsStaged", "Settings", "step %s: %d attribute(s) staged on server %s", p.Rec.Version, len(diff), p.Server.Name)
	next := p.Rec
	next.Phase, next.At, next.Rerequested = record.PhaseReboot, r.Clock().Unix(), 0
	if after, err := p.Conn.Bios(p.BMCContext, p.SysID); err == nil {
		// A write-only attribute (unverified) never shows as applied at once: it gets its restart.
		if d, err := differing(p.flow[i].Settings, after.Attributes, false); err == nil && len(d) == 0 {
			// Applied at once (ApplyTime Immediate): no restart.
			next.Phase = record.PhaseVerify
		}
	}
	return r.Record(ctx, p.Work, next)
}

func (r *BIOSSettingsReconciler) reboot(ctx context.Context, p *settingsPass) (lifecycle.Result, error) {
	if p.Rec.Phase != record.PhaseReboot {
		return lifecycle.Continue(), nil
	}
	return r.Actor.Reboot(ctx, p.Work, "apply BIOS settings step "+p.Rec.Version, func(why string) (lifecycle.Result, error) {
		return r.failAttempt(ctx, p, why)
	})
}

// verify reads the attributes back after the restart.
func (r *BIOSSettingsReconciler) verify(ctx context.Context, p *settingsPass) (lifecycle.Result, error) {
	if p.Rec.Phase != record.PhaseVerify {
		return lifecycle.Continue(), nil
	}
	attrs, res, err, ok := r.prepare(ctx, p)
	if !ok {
		return res, err
	}
	i := stepIndex(p.Rec.Version, p.flow)
	if diff, derr := differing(p.flow[i].Settings, attrs, true); derr == nil && len(diff) > 0 {
		res, err, again, late := r.RebootAgain(ctx, p.Work, fmt.Sprintf("step %s is not in effect", p.Rec.Version))
		switch {
		case again:
			return res, err
		case !late:
			return lifecycle.RequeueAfter(r.Options.Poll, "settings not in effect yet"), nil
		}
		// diff prints what was asked, a Secret's value as the Secret's name; what the BIOS
		// reads back is not shown (it would be the other half of the Secret's value).
		return r.failAttempt(ctx, p, fmt.Sprintf("step %s: %v did not read back as asked after the restart", p.Rec.Version, diff))
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "StepApplied", "Settings", "step %s in effect on server %s", p.Rec.Version, p.Server.Name)
	return r.advance(ctx, p, attrs, i, true, record.PhaseOwed)
}

// failAttempt counts a failed attempt of the step: owed again within the retry policy, else
// the settings failed.
func (r *BIOSSettingsReconciler) failAttempt(ctx context.Context, p *settingsPass, why string) (lifecycle.Result, error) {
	next := p.Rec
	next.Failed++
	next.At, next.Message = r.Clock().Unix(), why
	if next.Failed >= record.MaxAttempts(p.Obj.Spec.RetryPolicy) {
		next.Phase = record.PhaseFailed
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonSettingsFailed, "Settings", "step %s on server %s failed: %s", p.Rec.Version, p.Server.Name, why)
	} else {
		next.Phase, next.Attempt, next.Rerequested = record.PhaseOwed, p.Rec.Attempt+1, 0
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, "SettingsRetry", "Settings", "step %s on server %s: attempt %d failed (%s); trying again", p.Rec.Version, p.Server.Name, p.Rec.Attempt, why)
	}
	return r.Record(ctx, p.Work, next)
}

// report rebuilds status from the record.
func (r *BIOSSettingsReconciler) report(p *settingsPass) {
	p.Obj.Status = settingsStatus(p.Obj.Status, p.Obj.Generation, p.Work, flowOrder(p.Obj.Spec.SettingsFlow))
}

// settingsStatus is a settings object's status, rebuilt from the record: the state, each step
// of flow (in order) and condition Applied.
func settingsStatus(prev systemv1alpha1.BIOSSettingsStatus, gen int64, w *work.Work, flow []systemv1alpha1.SettingsFlowItem) systemv1alpha1.BIOSSettingsStatus {
	st := prev.DeepCopy()
	st.ObservedGeneration = gen
	st.FailedAttempts = w.Rec.Failed
	switch {
	case !w.HasRec, w.Rec.Phase == record.PhaseMaintenance:
		st.State = systemv1alpha1.SettingsStatePending
	case w.Rec.Phase == record.PhaseCompleted:
		st.State = systemv1alpha1.SettingsStateApplied
	case w.Rec.Phase == record.PhaseFailed:
		st.State = systemv1alpha1.SettingsStateFailed
	default:
		st.State = systemv1alpha1.SettingsStateInProgress
	}
	st.FlowState, st.LastAppliedTime = nil, nil
	for _, step := range flow {
		fs := systemv1alpha1.FlowStatus{Name: step.Name, Priority: step.Priority, FlowState: systemv1alpha1.SettingsStatePending}
		if at, ok := w.Rec.Applied[step.Name]; ok && w.HasRec {
			t := metav1.NewTime(time.Unix(at, 0))
			fs.FlowState, fs.LastAppliedTime = systemv1alpha1.SettingsStateApplied, &t
			if st.LastAppliedTime == nil || st.LastAppliedTime.Before(&t) {
				st.LastAppliedTime = &t
			}
		} else if w.HasRec && w.Rec.Version == step.Name {
			switch w.Rec.Phase {
			case record.PhaseFailed:
				fs.FlowState = systemv1alpha1.SettingsStateFailed
			case record.PhaseOwed, record.PhaseReboot, record.PhaseVerify:
				fs.FlowState = systemv1alpha1.SettingsStateInProgress
			}
		}
		st.FlowState = append(st.FlowState, fs)
	}
	cond := func(status metav1.ConditionStatus, reason, msg string) {
		lifecycle.SetCondition(&st.Conditions, gen, systemv1alpha1.ConditionApplied, status, reason, msg)
	}
	switch {
	case w.Problem != nil:
		cond(metav1.ConditionFalse, w.Reason, w.Problem.Error())
	case w.Conflict != "":
		cond(metav1.ConditionFalse, systemv1alpha1.ReasonMaintenanceConflict, w.Conflict)
	case !w.HasRec:
		cond(metav1.ConditionFalse, "Pending", "not looked at yet")
	case w.Rec.Phase == record.PhaseCompleted:
		cond(metav1.ConditionTrue, systemv1alpha1.ReasonSettingsApplied, "every step is in effect")
	case w.Rec.Phase == record.PhaseFailed:
		cond(metav1.ConditionFalse, systemv1alpha1.ReasonSettingsFailed, fmt.Sprintf("step %s: %s; change the spec to try again", w.Rec.Version, w.Rec.Message))
	case w.Waiting != "" || w.Rec.Phase == record.PhaseMaintenance:
		msg := w.Waiting
		if msg == "" {
			msg = "waiting for the server's maintenance"
		}
		cond(metav1.ConditionFalse, systemv1alpha1.ReasonAwaitingMaintenance, msg)
	case w.Rec.Phase == record.PhaseReboot:
		cond(metav1.ConditionFalse, systemv1alpha1.ReasonRebooting, fmt.Sprintf("step %s staged; server restarting", w.Rec.Version))
	case w.AwaitingOwner():
		cond(metav1.ConditionFalse, systemv1alpha1.ReasonAwaitingOwnerReboot,
			fmt.Sprintf("step %s staged; server %s is settings-only: it takes effect at the owner's next restart, which metalhub waits for", w.Rec.Version, w.ServerName))
	case w.Rec.Phase == record.PhaseVerify:
		cond(metav1.ConditionFalse, systemv1alpha1.ReasonVerifying, fmt.Sprintf("reading step %s back", w.Rec.Version))
	default:
		cond(metav1.ConditionFalse, systemv1alpha1.ReasonStaging, fmt.Sprintf("staging step %s", w.Rec.Version))
	}
	return *st
}

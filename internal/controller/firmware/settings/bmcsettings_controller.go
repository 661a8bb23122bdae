package settings

import (
	"context"
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	baseboardv1alpha1 "github.com/metalhub/metalhub/api/baseboard/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	"github.com/metalhub/metalhub/internal/controller/firmware/secretvalue"
	"github.com/metalhub/metalhub/internal/controller/firmware/work"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/shard"
)

// +kubebuilder:rbac:groups=baseboard.metal.ironcore.dev,resources=bmcsettings,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=baseboard.metal.ironcore.dev,resources=bmcsettings/status,verbs=get;update;patch

// BMCSettingsReconciler applies a BMC's own attributes (its manager's Attributes resource) in
// flow steps: the BMC must run spec.version; spec.settings first, then settingsFlow by priority;
// each step's differing attributes are set (they apply at once) and read back. With
// serverMaintenancePolicy every server of the BMC is in maintenance first. The record
// (record.Annotation) holds the step; status is rebuilt from it.
type BMCSettingsReconciler struct {
	Client client.Client
	work.Actor
}

// SetupWithManager registers the reconciler.
func (r *BMCSettingsReconciler) SetupWithManager(mgr ctrl.Manager) error {
	rec := lifecycle.NewReconciler(r.Client, func() *baseboardv1alpha1.BMCSettings { return &baseboardv1alpha1.BMCSettings{} }, r.handle)
	b := work.NewController(mgr, "bmcsettings", &baseboardv1alpha1.BMCSettings{},
		func(s *baseboardv1alpha1.BMCSettings) bool { return s.Status.State == "" }, r.Options.Concurrency/2)
	return shard.Gate(r.Options.Shards, mgr.GetCache(), b, rec, func() client.ObjectList { return &baseboardv1alpha1.BMCSettingsList{} },
		func(_ context.Context, v *baseboardv1alpha1.BMCSettings) string {
			return work.BMCRefKey(v, v.Spec.BMCRef)
		}).Complete(rec)
}

type bmcSettingsPass struct {
	*lifecycle.Pass[*baseboardv1alpha1.BMCSettings]
	*work.Work
	bmc   *work.BMCWork
	flow  []step
	attrs map[string]any
	fw    string
}

// maintenanceRefs flattens the reference's nested refs.
func maintenanceRefs(items []baseboardv1alpha1.ServerMaintenanceRefItem) []metalv1alpha1.ObjectReference {
	var out []metalv1alpha1.ObjectReference
	for _, it := range items {
		if it.ServerMaintenanceRef != nil {
			out = append(out, *it.ServerMaintenanceRef)
		}
	}
	return out
}

// bmcFlow is the flow to apply: spec.settings as the first step, then settingsFlow.
func bmcFlow(t *baseboardv1alpha1.BMCSettingsTemplate) []systemv1alpha1.SettingsFlowItem {
	flow := flowOrder(t.SettingsFlow)
	if len(t.Settings) > 0 {
		flow = append([]systemv1alpha1.SettingsFlowItem{{Name: "settings", Priority: math.MinInt32, Settings: t.Settings}}, flow...)
	}
	return flow
}

func (r *BMCSettingsReconciler) handle(ctx context.Context, lp *lifecycle.Pass[*baseboardv1alpha1.BMCSettings]) (lifecycle.Result, error) {
	bctx, cancel := context.WithTimeout(ctx, r.Options.RequestTimeout)
	defer cancel()
	s := lp.Obj
	var none *metalv1alpha1.ObjectReference
	w := &work.Work{Self: s, C: lp.Client(), BMCContext: bctx, MaintRef: &none}
	p := &bmcSettingsPass{Pass: lp, Work: w}
	w.Reach = func(w *work.Work) error {
		conn, err := bmcaccess.ProvenBMC(w.BMCContext, w.C, r.Options.Pool, p.bmc.BMC)
		if err != nil {
			return err
		}
		m, err := conn.Manager(w.BMCContext)
		if err != nil {
			return err
		}
		attrs, err := conn.ManagerAttributes(w.BMCContext)
		if err != nil {
			return err
		}
		w.Conn, p.fw, p.attrs = conn, m.FirmwareVersion, attrs
		return nil
	}
	hash := flowHash(s.Spec.Version, bmcFlow(&s.Spec.BMCSettingsTemplate), s.Spec.Variables)
	res, err := lifecycle.Steps(ctx, p,
		lifecycle.EnsureFinalizer[*bmcSettingsPass](work.Finalizer),
		func(ctx context.Context, p *bmcSettingsPass) (lifecycle.Result, error) {
			t, res, err := r.ReadBMC(ctx, p.Work, p.Obj.Spec.BMCRef, maintenanceRefs(p.Obj.Spec.ServerMaintenanceRefs))
			p.bmc = t
			return res, err
		},
		func(ctx context.Context, p *bmcSettingsPass) (lifecycle.Result, error) {
			return r.Leave(ctx, p.Work, work.MaintList(p.bmc.Maints)...)
		},
		func(ctx context.Context, p *bmcSettingsPass) (lifecycle.Result, error) {
			return r.StartOver(ctx, p.Work, hash, record.PhaseCompleted, record.PhaseFailed, record.PhaseMaintenance, record.PhaseOwed, record.PhaseVerify)
		},
		func(ctx context.Context, p *bmcSettingsPass) (lifecycle.Result, error) {
			if !p.HasRec || !p.Rec.Terminal() {
				return lifecycle.Continue(), nil
			}
			return work.ReleaseAll(ctx, p.C, p.Obj, p.bmc.Maints)
		},
		func(ctx context.Context, p *bmcSettingsPass) (lifecycle.Result, error) { return r.begin(ctx, p, hash) },
		r.maintain,
		func(ctx context.Context, p *bmcSettingsPass) (lifecycle.Result, error) { return r.apply(ctx, p, hash) },
	)
	s.Status.BIOSSettingsStatus = settingsStatus(s.Status.BIOSSettingsStatus, s.Generation, p.Work, bmcFlow(&s.Spec.BMCSettingsTemplate))
	if p.Retried() && err == nil && !res.IsWrote() {
		return lifecycle.RequeueAfter(r.Options.RetryAfter, p.Reason), nil
	}
	return res, err
}

// prepare reaches the BMC, checks its version and resolves the flow; ok false ends the pass.
func (r *BMCSettingsReconciler) prepare(ctx context.Context, p *bmcSettingsPass) (lifecycle.Result, error, bool) {
	if err := r.Connect(p.Work); err != nil {
		res, err := r.BMCFailed(p.Work, err)
		return res, err, false
	}
	if v := p.Obj.Spec.Version; p.fw != v {
		p.Problem, p.Reason = fmt.Errorf("the settings are for BMC firmware %q; %s runs %q", v, p.Target(), p.fw), systemv1alpha1.ReasonVersionMismatch
		return lifecycle.RequeueAfter(r.Options.RetryAfter, "BMC version"), nil, false
	}
	flow, err := resolveSteps(ctx, p.C, p.Obj, bmcFlow(&p.Obj.Spec.BMCSettingsTemplate), p.Obj.Spec.Variables, r.Options.EffectiveSecretNamespace())
	if err != nil {
		if reason, _ := lifecycle.ReasonOf(err); reason == systemv1alpha1.ReasonSecretRefNotAllowed {
			res, err := r.RefuseSecretRef(p.Work, err)
			return res, err, false
		}
		p.Problem, p.Reason = err, systemv1alpha1.ReasonVariableNotFound
		return lifecycle.RequeueAfter(r.Options.RetryAfter, "variables"), nil, false
	}
	// bmcFlow already put spec.settings first; resolveSteps keeps that order (lowest priority).
	p.flow = flow
	return lifecycle.Result{}, nil, true
}

// advance records where the flow stands from step from on; verified: step from was set.
func (r *BMCSettingsReconciler) advance(ctx context.Context, p *bmcSettingsPass, hash string, from int, verified bool, ph record.Phase) (lifecycle.Result, error) {
	now := r.Clock().Unix()
	i, applied, err := flowProgress(p.flow, p.attrs, from, verified, p.Rec.Applied, now)
	switch {
	case err != nil:
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonInvalidSettings, "Settings", "step %s: %v", p.flow[i].Name, err)
		return r.Record(ctx, p.Work, record.Record{Phase: record.PhaseFailed, For: hash, Version: p.flow[i].Name, Failed: p.Rec.Failed, At: now, Applied: applied, Message: err.Error()})
	case i == len(p.flow):
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, systemv1alpha1.ReasonSettingsApplied, "Settings", "every step in effect on %s", p.Target())
		return r.Record(ctx, p.Work, record.Record{Phase: record.PhaseCompleted, For: hash, Failed: p.Rec.Failed, At: now, Applied: applied})
	}
	return r.Record(ctx, p.Work, record.Record{Phase: ph, For: hash, Version: p.flow[i].Name, Attempt: 1, Failed: p.Rec.Failed, At: now, Applied: applied})
}

func (r *BMCSettingsReconciler) begin(ctx context.Context, p *bmcSettingsPass, hash string) (lifecycle.Result, error) {
	if p.HasRec {
		return lifecycle.Continue(), nil
	}
	if res, err, ok := r.prepare(ctx, p); !ok {
		return res, err
	}
	ph := record.PhaseOwed
	if p.Obj.Spec.ServerMaintenancePolicy != "" {
		ph = record.PhaseMaintenance
	}
	return r.advance(ctx, p, hash, 0, false, ph)
}

func (r *BMCSettingsReconciler) maintain(ctx context.Context, p *bmcSettingsPass) (lifecycle.Result, error) {
	if p.Obj.Spec.ServerMaintenancePolicy == "" || (p.Rec.Phase != record.PhaseMaintenance && p.Rec.Phase != record.PhaseOwed) {
		return lifecycle.Continue(), nil
	}
	return r.HoldServers(ctx, p.Work, work.ServerHold{Servers: p.bmc.Servers, Named: maintenanceRefs(p.Obj.Spec.ServerMaintenanceRefs), Maints: p.bmc.Maints,
		Prefix: "bmcsettings-" + p.Obj.Name, Policy: p.Obj.Spec.ServerMaintenancePolicy,
		Reason: fmt.Sprintf("BMC settings step %s (BMCSettings %s)", p.Rec.Version, p.Obj.Name),
		SetRefs: func(o client.Object, refs []metalv1alpha1.ObjectReference) {
			items := make([]baseboardv1alpha1.ServerMaintenanceRefItem, len(refs))
			for i := range refs {
				items[i] = baseboardv1alpha1.ServerMaintenanceRefItem{ServerMaintenanceRef: &refs[i]}
			}
			o.(*baseboardv1alpha1.BMCSettings).Spec.ServerMaintenanceRefs = items
		}})
}

// apply sets the step's differing attributes and reads them back. Setting them again is
// harmless, so a crash before the record only repeats the PATCH.
func (r *BMCSettingsReconciler) apply(ctx context.Context, p *bmcSettingsPass, hash string) (lifecycle.Result, error) {
	switch p.Rec.Phase {
	case record.PhaseMaintenance, record.PhaseOwed, record.PhaseVerify:
	default:
		return lifecycle.Continue(), nil
	}
	if res, err, ok := r.prepare(ctx, p); !ok {
		return res, err
	}
	i := stepIndex(p.Rec.Version, p.flow)
	// In verify the step was set: a write-only attribute counts as in effect (see differing).
	verified := p.Rec.Phase == record.PhaseVerify
	diff, derr := differing(p.flow[i].Settings, p.attrs, verified)
	if derr != nil || len(diff) == 0 {
		return r.advance(ctx, p, hash, i, verified, record.PhaseOwed)
	}
	if p.Rec.Phase == record.PhaseVerify {
		if r.Clock().Sub(p.Rec.AtTime()) < r.Options.VerifyTimeout {
			return lifecycle.RequeueAfter(r.Options.Poll, "settings not in effect yet"), nil
		}
		return r.failAttempt(ctx, p, fmt.Sprintf("step %s: %v did not read back as asked", p.Rec.Version, diff))
	}
	if err := secretvalue.RedactBMC(p.Conn.SetManagerAttributes(p.BMCContext, diff.Send()), diff); err != nil {
		if work.Refused(err) {
			return r.failAttempt(ctx, p, fmt.Sprintf("the BMC refused the settings: %v", err))
		}
		return r.BMCFailed(p.Work, err)
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "SettingsSet", "Settings", "step %s: %d attribute(s) set on %s", p.Rec.Version, len(diff), p.Target())
	if after, err := p.Conn.ManagerAttributes(p.BMCContext); err == nil {
		p.attrs = after
		if d, err := differing(p.flow[i].Settings, after, true); err == nil && len(d) == 0 {
			return r.advance(ctx, p, hash, i, true, record.PhaseOwed)
		}
	}
	next := p.Rec
	next.Phase, next.At = record.PhaseVerify, r.Clock().Unix()
	return r.Record(ctx, p.Work, next)
}

func (r *BMCSettingsReconciler) failAttempt(ctx context.Context, p *bmcSettingsPass, why string) (lifecycle.Result, error) {
	next := p.Rec
	next.Failed++
	next.At, next.Message = r.Clock().Unix(), why
	if next.Failed >= record.MaxAttempts(p.Obj.Spec.RetryPolicy) {
		next.Phase = record.PhaseFailed
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonSettingsFailed, "Settings", "step %s on %s failed: %s", p.Rec.Version, p.Target(), why)
	} else {
		next.Phase, next.Attempt = record.PhaseOwed, p.Rec.Attempt+1
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, "SettingsRetry", "Settings", "step %s on %s: attempt %d failed (%s); trying again", p.Rec.Version, p.Target(), p.Rec.Attempt, why)
	}
	return r.Record(ctx, p.Work, next)
}

package server

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/health"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// healthStep reads the server's hardware log when due (every --hardware-log-poll-interval, or
// at once when the BMC's event said something happened) and records critical events that are
// news: the fault record, the cursor and (by policy) the taint, in one write. An event only
// asks for the read: what is recorded always comes from the log of the proven machine, so a
// forged event cannot fault a server. A log that cannot be read does not hold the pass up.
func (r *Reconciler) healthStep(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	interval := r.Options.HardwareLogPoll
	if interval <= 0 || r.health == nil || !p.Obj.DeletionTimestamp.IsZero() || p.conn == nil || !healthState(p.state) {
		return lifecycle.Continue(), nil
	}
	if res, err := r.faultMaintenance(ctx, p); err != nil || !res.IsContinue() {
		return res, err
	}
	now := r.Now()
	hp := r.health.Get(p.Obj.UID)
	if since := now.Sub(hp.At); since < interval && (!hp.Rung || since < health.MinReadGap) {
		wait := interval - since
		if hp.Rung {
			wait = health.MinReadGap - since
		}
		r.lookAgainIn(p, wait)
		return lifecycle.Continue(), nil
	}
	failed := func(err error) (lifecycle.Result, error) {
		// Unsupported, or failing: looked at again next interval; the pass goes on.
		r.health.Polled(p.Obj.UID, now, "")
		r.lookAgainIn(p, interval)
		if bmc.ReasonOf(err) != bmc.ReasonUnsupported {
			ctrl.LoggerFrom(ctx).Info("reading the hardware log failed", "error", err.Error())
		}
		return lifecycle.Continue(), nil
	}
	recorded := p.Obj.Annotations[health.HardwareLogCursorAnnotation]
	if recorded == "" {
		// First read (a server discovered before, or adopted): what is in the log already is
		// history. The cursor is written once, even for an empty log ("-"), so a restart does
		// not take news for history.
		id, err := p.conn.LogCursor(p.bctx, p.sysID)
		if err != nil {
			return failed(err)
		}
		r.health.Polled(p.Obj.UID, now, id)
		r.lookAgainIn(p, interval)
		return lifecycle.Wrote("hardware log read"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
			lifecycle.SetAnnotation(s, health.HardwareLogCursorAnnotation, cmp.Or(id, "-"))
		})
	}
	after := cmp.Or(hp.Cursor, recorded)
	entries, err := p.conn.LogEntries(p.bctx, p.sysID, after)
	if err != nil {
		return failed(err)
	}
	newest := after
	if len(entries) > 0 {
		newest = entries[len(entries)-1].ID
	}
	r.health.Polled(p.Obj.UID, now, newest)
	r.lookAgainIn(p, interval)
	faults, err := health.ParseFaults(p.Obj.Annotations[metalv1alpha1.HardwareFaultAnnotation])
	if err != nil {
		faults = nil // unreadable: the new events make a new record
	}
	news := health.News(entries, faults)
	if len(news) == 0 {
		return lifecycle.Continue(), nil
	}
	for _, e := range news {
		faults = append(faults, health.Fault{Entry: e.ID, Created: e.Created, Sensor: e.SensorType, Message: cmp.Or(e.Message, e.MessageID)})
		health.CriticalEvents.WithLabelValues(cmp.Or(e.SensorType, "unknown")).Inc()
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, metalv1alpha1.ReasonCriticalEvent, "Health",
			"the BMC logged a critical event: %s (log entry %s)", strings.TrimPrefix(e.SensorType+": "+cmp.Or(e.Message, e.MessageID), ": "), e.ID)
	}
	if len(faults) > health.MaxFaults {
		faults = faults[len(faults)-health.MaxFaults:]
	}
	b, err := json.Marshal(faults)
	if err != nil {
		return lifecycle.Result{}, err
	}
	policy := r.Options.HardwareFaultPolicy
	return lifecycle.Wrote("critical hardware event"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		lifecycle.SetAnnotation(s, metalv1alpha1.HardwareFaultAnnotation, string(b))
		lifecycle.SetAnnotation(s, health.HardwareLogCursorAnnotation, newest)
		if policy == health.FaultPolicyTaint || policy == health.FaultPolicyMaintenance {
			health.SetFaultTaint(s)
		}
	})
}

// healthStates are the states whose servers' logs are read: in service or waiting for it.
// Discovery reboots the box into a probe (log noise of our own making), a parked server is left
// alone, and one in Error has a BMC that fails.
func healthState(s metalv1alpha1.ServerState) bool {
	switch s {
	case metalv1alpha1.ServerStateAvailable, metalv1alpha1.ServerStateReserved, metalv1alpha1.ServerStateReleased, metalv1alpha1.ServerStateMaintenance:
		return true
	}
	return false
}

// logCursor is the newest entry of the server's log now, to record as the cursor with the move
// to Available (the one write that ends discovery): what discovery left in the log is history.
// "" when health reading is off or the log cannot be read (the first read then records it).
func (r *Reconciler) logCursor(bctx context.Context, p *serverPass) string {
	if r.Options.HardwareLogPoll <= 0 || r.health == nil || p.conn == nil {
		return ""
	}
	id, err := p.conn.LogCursor(bctx, p.sysID)
	if err != nil {
		return ""
	}
	r.health.Polled(p.Obj.UID, r.Now(), id)
	return cmp.Or(id, "-")
}

func (r *Reconciler) lookAgainIn(p *serverPass, d time.Duration) {
	if d > 0 && (p.lookAgain == 0 || d < p.lookAgain) {
		p.lookAgain = d
	}
}

// faultMaintenance opens, under the TaintAndMaintenance policy, a ServerMaintenance for a faulty
// server no claim holds, once per fault: created under a name of its own (a retry after a crash
// finds it), then recorded on the Server. The taint was written with the fault, before: no claim
// can bind the server in between, and one bound before is seen here and gets only the taint.
// The maintenance asks for owner approval, so a claim that still got there is asked first.
func (r *Reconciler) faultMaintenance(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	s := p.Obj
	if r.Options.HardwareFaultPolicy != health.FaultPolicyMaintenance || s.Annotations[metalv1alpha1.HardwareFaultAnnotation] == "" ||
		s.Annotations[health.HardwareFaultMaintenanceAnnotation] != "" || s.Spec.ServerClaimRef != nil || s.Spec.ServerMaintenanceRef != nil ||
		p.state != metalv1alpha1.ServerStateAvailable {
		return lifecycle.Continue(), nil
	}
	ns := cmp.Or(r.Options.HardwareFaultMaintenanceNamespace, r.Options.DiscoveryNamespace)
	msg := health.FaultMessage(s.Annotations[metalv1alpha1.HardwareFaultAnnotation])
	m := &metalv1alpha1.ServerMaintenance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hardware-fault-" + s.Name,
			Labels:      map[string]string{metalv1alpha1.HardwareFaultTaintKey: "true"},
			Annotations: map[string]string{metalv1alpha1.MaintenanceReasonAnnotation: truncate(msg, 1000)}},
		Spec: metalv1alpha1.ServerMaintenanceSpec{
			ServerRef:   &corev1.LocalObjectReference{Name: s.Name},
			Policy:      metalv1alpha1.ServerMaintenancePolicyOwnerApproval,
			ServerPower: metalv1alpha1.PowerOff,
		},
	}
	if err := p.c.Create(ctx, m); err != nil && !apierrors.IsAlreadyExists(err) {
		return lifecycle.Result{}, fmt.Errorf("opening the maintenance for a hardware fault: %w", err)
	}
	r.Recorder.Eventf(s, m, corev1.EventTypeNormal, metalv1alpha1.ReasonFaultMaintenance, "Health",
		"maintenance %s/%s opened for the hardware fault", ns, m.Name)
	return lifecycle.Wrote("fault maintenance opened"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		lifecycle.SetAnnotation(s, health.HardwareFaultMaintenanceAnnotation, ns+"/"+m.Name)
	})
}

// clearHardwareFault ends a fault after the repair: the record, the policy's taint and its
// maintenance marker go (the maintenance itself is the user's to finish).
func (r *Reconciler) clearHardwareFault(ctx context.Context, p *serverPass, clearOp func(*metalv1alpha1.Server)) (lifecycle.Result, error) {
	if f := p.Obj.Annotations[metalv1alpha1.HardwareFaultAnnotation]; f != "" {
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, metalv1alpha1.ReasonFaultCleared, "Operation", "hardware fault cleared: %s", truncate(health.FaultMessage(f), 900))
	}
	return lifecycle.Wrote("hardware fault cleared"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		clearOp(s)
		lifecycle.RemoveAnnotation(s, metalv1alpha1.HardwareFaultAnnotation)
		lifecycle.RemoveAnnotation(s, health.HardwareFaultMaintenanceAnnotation)
		s.Spec.Taints = slices.DeleteFunc(s.Spec.Taints, func(t metalv1alpha1.Taint) bool { return t.Key == metalv1alpha1.HardwareFaultTaintKey })
		if len(s.Spec.Taints) == 0 {
			s.Spec.Taints = nil
		}
	})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

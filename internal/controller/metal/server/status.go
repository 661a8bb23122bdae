package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/health"
	"github.com/metalhub/metalhub/internal/controller/metal/inventorywalk"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/discovery"
	"github.com/metalhub/metalhub/internal/inventory"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// observe rebuilds status from the durable state and the BMC: the state mirror, power, the
// Ready condition and, when missing (new server, wiped status), the Redfish inventory. It runs
// after the pass's step, which did not write the Server; a status write brings no event, and
// the step's own result already says when to look again. State and power never wait for the
// inventory: a walk that fails or outlasts the pass (a real BMC with many DIMMs and drives)
// goes on in the background, and a later pass adds it; the returned delay asks for that pass.
func (r *Reconciler) observe(bctx, ctx context.Context, p *serverPass) (time.Duration, error) {
	s := p.Obj
	if p.state == metalv1alpha1.ServerStateInitial && s.Status.State == "" && p.bootProblem == nil && p.settingsOnly == "" {
		// A new server leaves Initial within a pass or two: its first status write waits for
		// Discovery and carries the inventory then, one write instead of two. One whose boot
		// cannot be prepared says why at once.
		return 0, nil
	}
	st := s.Status.DeepCopy()
	serverstate.Mirror(st, s.Generation, p.state)
	st.PowerState = metalv1alpha1.PowerState(p.sys.PowerState)
	if led := p.sys.IndicatorLED; led != "" {
		st.IndicatorLED = metalv1alpha1.IndicatorLED(led)
	}
	if len(p.sys.BootOrder) > 0 {
		st.BootOrder = p.sys.BootOrder
	}
	if p.settingsOnly != "" {
		lifecycle.SetCondition(&st.Conditions, s.Generation, metalv1alpha1.ConditionReady, metav1.ConditionTrue, metalv1alpha1.ReasonSettingsOnly,
			"BMC reachable; settings-only (marked on "+p.settingsOnly+"): its power and boot belong to their owner, and no claim binds it")
	} else {
		lifecycle.SetCondition(&st.Conditions, s.Generation, metalv1alpha1.ConditionReady, metav1.ConditionTrue, metalv1alpha1.ReasonConnected, "BMC reachable")
	}
	r.reportBoot(p, st)
	// connect proved the machine: whatever mismatch was reported is over.
	apimeta.RemoveStatusCondition(&st.Conditions, metalv1alpha1.ConditionIdentityMismatch)
	if st.SerialNumber != "" && p.sys.SerialNumber != "" && !strings.EqualFold(st.SerialNumber, p.sys.SerialNumber) {
		// Another board with the accepted UUID (AcceptSystemUUIDAnnotation): its inventory is
		// read anew, not carried over from the old one.
		clearInventory(st)
	}
	if d := s.Annotations[metalv1alpha1.InventoryDriftAnnotation]; d != "" {
		lifecycle.SetCondition(&st.Conditions, s.Generation, metalv1alpha1.ConditionInventoryDrift, metav1.ConditionTrue, metalv1alpha1.ReasonHardwareMissing, d)
	} else {
		apimeta.RemoveStatusCondition(&st.Conditions, metalv1alpha1.ConditionInventoryDrift)
	}
	if f := s.Annotations[metalv1alpha1.HardwareFaultAnnotation]; f != "" {
		lifecycle.SetCondition(&st.Conditions, s.Generation, metalv1alpha1.ConditionHardwareFault, metav1.ConditionTrue, metalv1alpha1.ReasonCriticalEvent, health.FaultMessage(f))
	} else {
		apimeta.RemoveStatusCondition(&st.Conditions, metalv1alpha1.ConditionHardwareFault)
	}
	cleanedCondition(s, p.state, st)
	if err := r.restoreInventory(ctx, s, st); err != nil {
		return 0, err
	}
	var more time.Duration
	if st.Manufacturer == "" || len(st.Processors) == 0 {
		inv, err := r.inventories.Wait(bctx, s.UID, func(ictx context.Context) (*bmc.Inventory, error) {
			return p.conn.Inventory(ictx, p.sysID)
		})
		switch {
		case inv != nil:
			inventorywalk.Apply(st, inv)
		case err != nil:
			ctrl.LoggerFrom(ctx).Info("reading inventory failed; state and power are reported without it", "error", err.Error())
			more = r.Options.RetryAfter
		default:
			more = r.Options.PowerPoll // still walking
		}
	}
	if equality.Semantic.DeepEqual(*st, s.Status) {
		return more, nil
	}
	if rec, ok := parsePowerRecord(s.Annotations[serverstate.PowerAnnotation]); ok && r.inFlight(p, rec.target) &&
		!reached(p.sys.PowerState, rec.target) && onlyStateAndPower(*st, s.Status) {
		// Our power action is on its way: report state and power once the box gets there (or
		// the action times out), one write instead of one per step. The handler waits for it.
		return more, nil
	}
	s.Status = *st // the Reconciler writes it
	return more, nil
}

// cleanedCondition rebuilds the Cleaned condition from the cleaning bookkeeping: failed, in
// progress, or the last verified cleaning; none on a server never cleaned.
func cleanedCondition(s *metalv1alpha1.Server, state metalv1alpha1.ServerState, st *metalv1alpha1.ServerStatus) {
	a := s.Annotations
	switch {
	case a[serverstate.CleaningFailedAnnotation] != "":
		lifecycle.SetCondition(&st.Conditions, s.Generation, metalv1alpha1.ConditionCleaned, metav1.ConditionFalse, metalv1alpha1.ReasonCleaningFailed, a[serverstate.CleaningFailedAnnotation])
	case state == metalv1alpha1.ServerStateCleaning:
		msg := "preparing the cleaning round, policy " + a[serverstate.CleaningAnnotation]
		if rd, ok := parseCleaningRound(a[serverstate.CleaningRoundAnnotation]); ok && isBMCRound(rd) {
			msg = fmt.Sprintf("the BMC erasing since %s, round %s, policy %s", rd.at.UTC().Format(time.RFC3339), rd.id, a[serverstate.CleaningAnnotation])
		} else if ok {
			msg = fmt.Sprintf("cleaning agent booted at %s, round %s, policy %s", rd.at.UTC().Format(time.RFC3339), rd.id, a[serverstate.CleaningAnnotation])
		}
		lifecycle.SetCondition(&st.Conditions, s.Generation, metalv1alpha1.ConditionCleaned, metav1.ConditionFalse, metalv1alpha1.ReasonCleaningInProgress, msg)
	case a[serverstate.LastCleaningAnnotation] != "":
		lifecycle.SetCondition(&st.Conditions, s.Generation, metalv1alpha1.ConditionCleaned, metav1.ConditionTrue, metalv1alpha1.ReasonCleaningVerified, a[serverstate.LastCleaningAnnotation])
	default:
		apimeta.RemoveStatusCondition(&st.Conditions, metalv1alpha1.ConditionCleaned)
	}
}

// clearInventory forgets the hardware fields Redfish fills in, so the next read fills them anew.
func clearInventory(st *metalv1alpha1.ServerStatus) {
	st.Manufacturer, st.Model, st.SKU, st.SerialNumber, st.BIOSVersion = "", "", "", "", ""
	st.Processors, st.NetworkInterfaces, st.Storages, st.TotalSystemMemory = nil, nil, nil, nil
}

// onlyStateAndPower reports whether two statuses differ in nothing but the state mirror and
// the power state.
func onlyStateAndPower(a, b metalv1alpha1.ServerStatus) bool {
	a.State, a.PowerState = b.State, b.PowerState
	return equality.Semantic.DeepEqual(a, b)
}

// mirror reports only the state mirror (for states that make no BMC calls).
func (r *Reconciler) mirror(p *serverPass) (lifecycle.Result, error) {
	if p.Obj.Status.State != p.state {
		serverstate.Mirror(&p.Obj.Status, p.Obj.Generation, p.state)
	}
	return lifecycle.Done(), nil
}

// restoreInventory fills a wiped status's discovery fields (the probe's GPUs, NIC drivers, LLDP
// neighbours: what Redfish cannot say) from the server's inventory record. It reads the record
// only for a status without processors on a server whose discovery reported: once per wipe.
func (r *Reconciler) restoreInventory(ctx context.Context, s *metalv1alpha1.Server, st *metalv1alpha1.ServerStatus) error {
	if len(st.Processors) > 0 || s.Annotations[discovery.ReportedAnnotation] == "" {
		return nil
	}
	var rd client.Reader = r.Client
	if r.APIReader != nil {
		rd = r.APIReader
	}
	cm := &corev1.ConfigMap{}
	if err := rd.Get(ctx, client.ObjectKey{Namespace: r.Options.DiscoveryNamespace, Name: inventory.ObjectName(s.Name)}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading the inventory record: %w", err)
	}
	rec, err := inventory.Decode(cm)
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("inventory record unreadable; the BMC's inventory stands in", "error", err.Error())
		return nil
	}
	rec.Current.Restore(st)
	return nil
}

package server

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

func (r *Reconciler) maintenanceObj(ctx context.Context, p *serverPass) (*metalv1alpha1.ServerMaintenance, error) {
	ref := p.Obj.Spec.ServerMaintenanceRef
	if ref == nil {
		return nil, nil
	}
	m := &metalv1alpha1.ServerMaintenance{}
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, m); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading maintenance %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return m, nil
}

// maintenance moves a server into Maintenance when a maintenance ref appears, remembering the
// state to return to.
func (r *Reconciler) maintenance(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	if p.Obj.Spec.ServerMaintenanceRef == nil || p.state == metalv1alpha1.ServerStateMaintenance {
		return lifecycle.Continue(), nil
	}
	prev, ref := p.state, p.Obj.Spec.ServerMaintenanceRef
	adopted := false
	if prev == metalv1alpha1.ServerStateError {
		// Back to where the Error would have gone, not into Error again. An Error metalhub
		// found (none recorded) is the reference's, and so is this Maintenance: as adopted.
		prev = metalv1alpha1.ServerState(p.Obj.Annotations[serverstate.PreviousStateAnnotation])
		adopted = prev == ""
	}
	return r.transition(ctx, p, metalv1alpha1.ServerStateMaintenance, "maintenance "+ref.Namespace+"/"+ref.Name, func(s *metalv1alpha1.Server) {
		if prev == "" {
			lifecycle.RemoveAnnotation(s, serverstate.PreviousStateAnnotation)
		} else {
			lifecycle.SetAnnotation(s, serverstate.PreviousStateAnnotation, string(prev))
		}
		if adopted && s.Annotations[serverstate.MaintenanceBootAnnotation] == "" {
			lifecycle.SetAnnotation(s, serverstate.MaintenanceBootAnnotation, maintenanceBootAdopted)
		}
		// The maintenance boots its own configuration: a cleaning it interrupts boots its
		// round again afterwards.
		lifecycle.RemoveAnnotation(s, serverstate.CleaningRoundAnnotation)
		lifecycle.RemoveAnnotation(s, serverstate.CleaningTasksAnnotation)
	})
}

// maintenanceBootAdopted is the maintenance boot record of a server found in Maintenance that
// metalhub did not put there (metal-operator did, or the bookkeeping was lost): whether the box
// runs the maintenance's boot configuration can then only be judged from what is observed.
const maintenanceBootAdopted = "adopted"

// maintenanceBootRecord is what MaintenanceBootAnnotation holds once the server was booted into
// m's boot configuration: "<namespace>/<name>/<uid>".
func maintenanceBootRecord(m *metalv1alpha1.ServerMaintenance) string {
	return m.Namespace + "/" + m.Name + "/" + string(m.UID)
}

// maintenanceBooted is the one rule for "the server already runs the boot configuration of
// maintenance m", from its record (MaintenanceBootAnnotation) and what is observed: the box is
// On, the configuration is Ready.
//
//   - A record of ours names the maintenance by namespace, name and UID, and counts when
//     namespace and name are m's and the UID is m's or the one m was copied from by "metalhub
//     move" (MovedFromAnnotation): a move gives every copy a new UID, and the box did not
//     reboot. A maintenance deleted and created again under the same name has a UID of its own
//     and no such mark, so it is booted into. A bare UID (records before namespace and name
//     were kept) counts for m's UID only.
//   - maintenanceBootAdopted: booted when the box is On and the configuration is Ready. That is
//     all metal-operator does: its ServerMaintenance controller reports InMaintenance first,
//     then creates the configuration from the template and, once that is Ready, sets the
//     server's spec.power to the maintenance's serverPower, which only powers an Off box on; a
//     box that runs is never restarted. An On box with a Ready configuration has had all of
//     that; restarting it would be a reset nobody asked for. An Off one is booted into it.
//   - No record: metalhub entered Maintenance itself and has not booted the box yet.
func maintenanceBooted(record string, m *metalv1alpha1.ServerMaintenance, on, configReady bool) bool {
	switch record {
	case "":
		return false
	case maintenanceBootAdopted:
		return on && configReady
	}
	ns, rest, ok := strings.Cut(record, "/")
	if !ok {
		return m.UID != "" && record == string(m.UID)
	}
	name, uid, ok := strings.Cut(rest, "/")
	if !ok || ns != m.Namespace || name != m.Name || uid == "" {
		return false
	}
	return uid == string(m.UID) || uid == m.Annotations[lifecycle.MovedFromAnnotation]
}

// inMaintenance boots the maintenance's boot configuration once it is Ready (a one-time PXE
// override, then power on, or a restart of a running box through an operation intent so it
// happens exactly once) unless the box runs it already (maintenanceBooted), applies the
// maintenance's power otherwise, and returns to the previous state when the maintenance ref is
// removed.
func (r *Reconciler) inMaintenance(bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	s := p.Obj
	if s.Spec.ServerMaintenanceRef == nil {
		prev := previousState(s)
		if s.Spec.ServerClaimRef != nil && prev != metalv1alpha1.ServerStateReleased {
			prev = metalv1alpha1.ServerStateReserved
		}
		return r.transition(ctx, p, prev, "maintenance ended", func(s *metalv1alpha1.Server) {
			lifecycle.RemoveAnnotation(s, serverstate.PreviousStateAnnotation)
			lifecycle.RemoveAnnotation(s, serverstate.MaintenanceBootAnnotation)
		})
	}
	if p.settingsOnly != "" {
		// In maintenance is all the settings and firmware flows need of it: their restarts
		// are the owner's, and so are the maintenance's power and boot configuration.
		return lifecycle.Done(), nil
	}
	m, err := r.maintenanceObj(ctx, p)
	if err != nil || m == nil {
		return lifecycle.Done(), err
	}
	ref := s.Spec.MaintenanceBootConfigurationRef
	if ref == nil || ref.Name == "" || m.Spec.ServerPower == metalv1alpha1.PowerOff {
		if m.Spec.ServerPower != "" {
			if res, err := r.converge(ctx, p, m.Spec.ServerPower, true); err != nil || !res.IsContinue() {
				return res, err
			}
		}
		return lifecycle.Done(), nil
	}
	ready, why, sbc, err := r.bootConfigurationReady(ctx, p, ref.Namespace, ref.Name)
	if err != nil {
		return lifecycle.Result{}, err
	}
	record := s.Annotations[serverstate.MaintenanceBootAnnotation]
	if maintenanceBooted(record, m, p.sys.PowerState == bmc.PowerStateOn, ready) {
		if want := maintenanceBootRecord(m); record != want {
			// Ours from now on (an adopted boot, a moved copy's UID): a later power-off or
			// another move is judged by the record alone.
			return lifecycle.Wrote("maintenance boot recorded"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
				lifecycle.SetAnnotation(s, serverstate.MaintenanceBootAnnotation, want)
			})
		}
		// Booted into it: keep it on.
		if res, err := r.converge(ctx, p, metalv1alpha1.PowerOn, true); err != nil || !res.IsContinue() {
			return res, err
		}
		return lifecycle.Done(), nil
	}
	if !ready {
		// The boot provider's Ready (watched) brings the next pass.
		return lifecycle.RequeueAfter(r.Options.RetryAfter, why), nil
	}
	switch p.sys.PowerState {
	case bmc.PowerStatePoweringOn, bmc.PowerStatePoweringOff:
		return lifecycle.RequeueAfter(r.Options.PowerPoll, "power in transition"), nil
	}
	// Observable and idempotent: a lost write after it finds it prepared and goes on.
	req := bootRequest{what: fmt.Sprintf("maintenance %s/%s", m.Namespace, m.Name)}
	if sbc != nil {
		req.method, req.uri, req.regarding = sbc.Spec.BootMethod, sbc.Spec.BootURI, sbc
	}
	if want, media, err := r.prepareBoot(bctx, p, req); err != nil || media {
		if err != nil {
			return lifecycle.Result{}, err
		}
		return r.writeMediaRecord(ctx, p, want)
	}
	booted := func(s *metalv1alpha1.Server) {
		lifecycle.SetAnnotation(s, serverstate.MaintenanceBootAnnotation, maintenanceBootRecord(m))
	}
	if p.sys.PowerState == bmc.PowerStateOn {
		return r.issueOperation(bctx, ctx, p, intent.Intent{Op: metalv1alpha1.OperationPowerCycleServer, Phase: intent.Owed, At: r.Now()}, booted)
	}
	issued, _, err := r.powerAction(bctx, p, metalv1alpha1.PowerOn, false)
	if err != nil {
		return lifecycle.Result{}, err
	}
	return lifecycle.Wrote("maintenance boot"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		booted(s)
		if issued {
			lifecycle.SetAnnotation(s, serverstate.PowerAnnotation, powerRecord{target: metalv1alpha1.PowerOn, at: r.Now()}.String())
		}
	})
}

package metal

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/discovery"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// roundSecret returns the discovery Secret of a server, if any, read past the cache: a Secret
// created by the previous pass and not cached yet would start a second round whose token the
// first one's ignition does not carry, and a deleted one still cached would skip the power-off
// that makes the next PXE boot happen.
func (r *ServerReconciler) roundSecret(ctx context.Context, p *pass) (*corev1.Secret, error) {
	sec := &corev1.Secret{}
	var rd client.Reader = p.c
	if r.APIReader != nil {
		rd = r.APIReader
	}
	err := rd.Get(ctx, client.ObjectKey{Namespace: r.Options.DiscoveryNamespace, Name: discovery.ObjectName(p.Obj.Name)}, sec)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading discovery secret: %w", err)
	}
	return sec, nil
}

// ensureRound makes sure the server's discovery round has its Secret (token, ignition) and
// ServerBootConfiguration, creating a new round when there is no Secret. Both are owned by the
// Server, so they go with it. After a crash between the two creates, the next pass completes the
// pair for the same round.
func (r *ServerReconciler) ensureRound(ctx context.Context, p *pass, sec *corev1.Secret) (*corev1.Secret, error) {
	s := p.Obj
	name := discovery.ObjectName(s.Name)
	if sec == nil {
		round, token, err := discovery.NewRound()
		if err != nil {
			return nil, err
		}
		labels := map[string]string{discovery.ServerLabel: s.Name, discovery.RoundLabel: round}
		if uuid := strings.ToLower(s.Spec.SystemUUID); len(validation.IsValidLabelValue(uuid)) == 0 {
			labels[discovery.SystemUUIDLabel] = uuid
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: r.Options.DiscoveryNamespace, Name: name, Labels: labels},
			Data:       map[string][]byte{discovery.TokenKey: []byte(token)},
		}
		if r.Options.Ignition != nil {
			ign, err := r.Options.Ignition(s, token)
			if err != nil {
				return nil, fmt.Errorf("rendering discovery ignition: %w", err)
			}
			sec.Data[discovery.IgnitionKey] = ign
		}
		if err := controllerutil.SetOwnerReference(p.Obj, sec, p.c.Scheme()); err != nil {
			return nil, err
		}
		if err := p.c.Create(ctx, sec); apierrors.IsAlreadyExists(err) {
			// Created by a pass the live read above did not see finish: that round is the one.
			if sec, err = r.roundSecret(ctx, p); err != nil {
				return nil, err
			} else if sec == nil {
				return nil, fmt.Errorf("discovery secret %s/%s exists and is gone again", r.Options.DiscoveryNamespace, name)
			}
		} else if err != nil {
			return nil, fmt.Errorf("creating discovery secret: %w", err)
		}
	}
	sbc := &metalv1alpha1.ServerBootConfiguration{}
	err := p.c.Get(ctx, client.ObjectKey{Namespace: r.Options.DiscoveryNamespace, Name: name}, sbc)
	if apierrors.IsNotFound(err) {
		sbc = &metalv1alpha1.ServerBootConfiguration{
			ObjectMeta: metav1.ObjectMeta{Namespace: r.Options.DiscoveryNamespace, Name: name, Labels: sec.Labels},
			Spec: metalv1alpha1.ServerBootConfigurationSpec{
				ServerRef:         corev1.LocalObjectReference{Name: s.Name},
				Image:             r.Options.DiscoveryImage,
				IgnitionSecretRef: &corev1.LocalObjectReference{Name: name},
			},
		}
		err = r.createOwned(ctx, p, sbc)
	}
	if err != nil {
		return nil, fmt.Errorf("discovery boot configuration: %w", err)
	}
	return sec, nil
}

func (r *ServerReconciler) createOwned(ctx context.Context, p *pass, o client.Object) error {
	if err := controllerutil.SetOwnerReference(p.Obj, o, p.c.Scheme()); err != nil {
		return err
	}
	if err := p.c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating discovery %T: %w", o, err)
	}
	return nil
}

// deleteRound removes a server's discovery objects.
func (r *ServerReconciler) deleteRound(ctx context.Context, p *pass) error {
	name := discovery.ObjectName(p.Obj.Name)
	for _, o := range []client.Object{
		&metalv1alpha1.ServerBootConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: r.Options.DiscoveryNamespace, Name: name}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.Options.DiscoveryNamespace, Name: name}},
	} {
		if err := p.c.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting discovery %T: %w", o, err)
		}
	}
	return nil
}

func (r *ServerReconciler) discoveryRef() *metalv1alpha1.ObjectReference {
	return &metalv1alpha1.ObjectReference{Namespace: r.Options.DiscoveryNamespace}
}

func pxeSet(b bmc.BootOverride) bool {
	// Read-back lies on some BMCs (Continuous after Once): any enabled PXE override counts.
	return b.Target == string(bmc.BootPxe) && b.Enabled != "" && b.Enabled != "Disabled"
}

// initial prepares discovery: power off, a new round's objects, a one-time PXE override and
// power on — then records all of it with the move to Discovery in one write. After a crash
// anywhere in between, what the BMC already did is observed, not done again.
func (r *ServerReconciler) initial(bctx, ctx context.Context, p *pass) (lifecycle.Result, error) {
	sec, err := r.roundSecret(ctx, p)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if sec == nil {
		// A new round starts from a powered-off box so the PXE boot really happens.
		if res, err := r.converge(ctx, p, metalv1alpha1.PowerOff, false); err != nil || !res.IsContinue() {
			return res, err
		}
	}
	if sec, err = r.ensureRound(ctx, p, sec); err != nil {
		return lifecycle.Result{}, err
	}
	round := sec.Labels[discovery.RoundLabel]
	rec := p.Obj.Annotations[PowerAnnotation]
	switch p.sys.PowerState {
	case bmc.PowerStateOn, bmc.PowerStatePoweringOn:
		// Already booting: we did it before a restart. Do not boot it twice.
	case bmc.PowerStatePoweringOff:
		return lifecycle.RequeueAfter(r.Options.PowerPoll, "powering off"), nil
	default:
		// The box PXE-boots what the boot provider serves for this round: before its boot
		// configuration is Ready (the boot-operator preparing the image, say) it would boot
		// nothing and only time out. The provider's Ready (watched) brings the next pass. The
		// built-in provider is Ready by construction (the image is set, the ignition Secret was
		// just created), so with it only an Error holds the boot back: waiting for its Ready
		// put its status write in every server's path and cost a 1000-server fleet 10 s.
		ready, why, sbc, err := r.bootConfigurationReady(ctx, p, r.Options.DiscoveryNamespace, discovery.ObjectName(p.Obj.Name))
		if err != nil {
			return lifecycle.Result{}, err
		}
		failed := sbc != nil && sbc.Status.State == metalv1alpha1.ServerBootConfigurationStateError
		if !ready && (r.Options.Claims.ExternalBootProvider || failed) {
			if failed {
				r.Recorder.Eventf(p.Obj, sbc, corev1.EventTypeWarning, "DiscoveryBootNotReady", "Discover",
					"discovery boot configuration %s/%s is in Error; see its conditions", sbc.Namespace, sbc.Name)
			}
			return lifecycle.RequeueAfter(r.Options.RetryAfter, why), nil
		}
		if !pxeSet(p.sys.Boot) {
			if err := p.conn.SetBootOnce(bctx, p.sysID, bmc.BootPxe); err != nil {
				return lifecycle.Result{}, fmt.Errorf("setting one-time PXE boot: %w", err)
			}
			r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "BootOnce", "SetBootOnce", "one-time PXE boot set for discovery round %s", round)
		}
		issued, _, err := r.powerAction(bctx, p, metalv1alpha1.PowerOn, false)
		if err != nil {
			return lifecycle.Result{}, err
		}
		if issued {
			rec = powerRecord{target: metalv1alpha1.PowerOn, at: r.Now()}.String()
		}
	}
	ref := r.discoveryRef()
	ref.Name = discovery.ObjectName(p.Obj.Name)
	return r.transition(ctx, p, metalv1alpha1.ServerStateDiscovery, "booting the discovery image, round "+round, func(s *metalv1alpha1.Server) {
		lifecycle.SetAnnotation(s, discovery.RoundAnnotation, round)
		lifecycle.SetAnnotation(s, BootOnceAnnotation, round)
		lifecycle.SetAnnotation(s, DiscoveryStartedAnnotation, r.Now().UTC().Format(time.RFC3339))
		if rec != "" {
			lifecycle.SetAnnotation(s, PowerAnnotation, rec)
		}
		lifecycle.RemoveAnnotation(s, discovery.ReportedAnnotation)
		s.Spec.BootConfigurationRef = ref
	})
}

// discovery waits for the probe's report of this round, keeping the box on; a report moves the
// server to Available (powered off in the same pass), a timeout back to Initial.
func (r *ServerReconciler) discovery(bctx, ctx context.Context, p *pass) (lifecycle.Result, error) {
	s := p.Obj
	if discovery.Fresh(s) {
		issued, _, err := r.powerAction(bctx, p, metalv1alpha1.PowerOff, false)
		if err != nil {
			return lifecycle.Result{}, err
		}
		return r.transition(ctx, p, metalv1alpha1.ServerStateAvailable, "hardware report received", func(s *metalv1alpha1.Server) {
			if issued {
				lifecycle.SetAnnotation(s, PowerAnnotation, powerRecord{target: metalv1alpha1.PowerOff, at: r.Now()}.String())
			}
			clearDiscovery(s, r.Options.DiscoveryNamespace)
		})
	}
	started, err := time.Parse(time.RFC3339, s.Annotations[DiscoveryStartedAnnotation])
	if err != nil {
		started = r.Now() // unknown start (restored object): the timeout runs from now on
		return lifecycle.Wrote("discovery start"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
			lifecycle.SetAnnotation(s, DiscoveryStartedAnnotation, started.UTC().Format(time.RFC3339))
		})
	}
	left := r.Options.DiscoveryTimeout - r.Now().Sub(started)
	if left <= 0 {
		if err := r.deleteRound(ctx, p); err != nil {
			return lifecycle.Result{}, err
		}
		return r.transition(ctx, p, metalv1alpha1.ServerStateInitial, "no hardware report within "+r.Options.DiscoveryTimeout.String(), func(s *metalv1alpha1.Server) {
			clearDiscovery(s, r.Options.DiscoveryNamespace)
			lifecycle.RemoveAnnotation(s, discovery.RoundAnnotation)
		})
	}
	if res, err := r.converge(ctx, p, metalv1alpha1.PowerOn, false); err != nil || !res.IsContinue() {
		return res, err
	}
	return lifecycle.RequeueAfter(min(left, r.Options.ServerResync), "waiting for the hardware report"), nil
}

// clearDiscovery removes a finished round's bookkeeping (the round id stays for the record).
func clearDiscovery(s *metalv1alpha1.Server, ns string) {
	lifecycle.RemoveAnnotation(s, BootOnceAnnotation)
	lifecycle.RemoveAnnotation(s, DiscoveryStartedAnnotation)
	if ref := s.Spec.BootConfigurationRef; ref != nil && ref.Namespace == ns && ref.Name == discovery.ObjectName(s.Name) {
		s.Spec.BootConfigurationRef = nil
	}
}

// available keeps an unclaimed server off and clean, and hands it to a claim.
func (r *ServerReconciler) available(bctx, ctx context.Context, p *pass) (lifecycle.Result, error) {
	if p.Obj.Spec.ServerClaimRef != nil {
		return r.reserve(bctx, ctx, p)
	}
	if sec, err := r.roundSecret(ctx, p); err != nil {
		return lifecycle.Result{}, err
	} else if sec != nil {
		if err := r.deleteRound(ctx, p); err != nil {
			return lifecycle.Result{}, err
		}
	}
	if res, err := r.converge(ctx, p, metalv1alpha1.PowerOff, false); err != nil || !res.IsContinue() {
		return res, err
	}
	return lifecycle.Done(), nil
}

// reserve moves a claimed server to Reserved and, when the claim wants it on, powers it on and
// records the action in the same write (as Initial does with its boot): a claim costs the
// server one lifecycle write, not two. After a crash between the action and the write, the next
// pass sees the box on or powering on and does not act again. A BMC refusing the action does not
// hold the transition back: Reserved retries the power and reports the failure.
func (r *ServerReconciler) reserve(bctx, ctx context.Context, p *pass) (lifecycle.Result, error) {
	ref := p.Obj.Spec.ServerClaimRef
	claim, err := r.claim(ctx, p)
	if err != nil {
		return lifecycle.Result{}, err
	}
	rec := ""
	ready, _, err := r.bootReady(ctx, p)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if ready && claim != nil && claim.DeletionTimestamp.IsZero() && claim.Spec.Power == metalv1alpha1.PowerOn {
		issued, _, err := r.powerAction(bctx, p, metalv1alpha1.PowerOn, true)
		if err != nil {
			ctrl.LoggerFrom(ctx).Info("power on for the claim failed; Reserved retries it", "error", err.Error())
		}
		if issued {
			rec = powerRecord{target: metalv1alpha1.PowerOn, at: r.Now()}.String()
		}
	}
	return r.transition(ctx, p, metalv1alpha1.ServerStateReserved, "claimed by "+ref.Namespace+"/"+ref.Name, func(s *metalv1alpha1.Server) {
		if rec != "" {
			lifecycle.SetAnnotation(s, PowerAnnotation, rec)
		}
	})
}

// reserved follows the claim's power. When the claim is gone the box is powered off, and only
// once the BMC confirms it off does the server go back to Available (Recycle) or Released (Retain).
func (r *ServerReconciler) reserved(bctx, ctx context.Context, p *pass) (lifecycle.Result, error) {
	s := p.Obj
	claim, err := r.claim(ctx, p)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if claim != nil && claim.DeletionTimestamp.IsZero() {
		if claim.Spec.Power == metalv1alpha1.PowerOn && !reached(p.sys.PowerState, metalv1alpha1.PowerOn) {
			if ready, why, err := r.bootReady(ctx, p); err != nil || !ready {
				// The boot provider's Ready (watched) brings the next pass.
				return lifecycle.RequeueAfter(r.Options.RetryAfter, why), err
			}
		}
		if res, err := r.converge(ctx, p, claim.Spec.Power, true); err != nil || !res.IsContinue() {
			return res, err
		}
		return lifecycle.Done(), nil
	}
	if res, err := r.converge(ctx, p, metalv1alpha1.PowerOff, true); err != nil || !res.IsContinue() {
		return res, err
	}
	if s.Spec.ReclaimPolicy == metalv1alpha1.ReclaimPolicyRetain {
		return r.transition(ctx, p, metalv1alpha1.ServerStateReleased, "claim gone, power off confirmed, reclaim policy Retain", nil)
	}
	return r.transition(ctx, p, metalv1alpha1.ServerStateAvailable, "claim gone, power off confirmed", func(s *metalv1alpha1.Server) {
		s.Spec.ServerClaimRef = nil
		s.Spec.BootConfigurationRef = nil
	})
}

// bootReady reports whether the boot configuration the server names (if any) is Ready: a box
// powered on for its claim before its boot provider serves the image boots whatever is on its
// disk. The reason says what it waits for.
func (r *ServerReconciler) bootReady(ctx context.Context, p *pass) (bool, string, error) {
	ref := p.Obj.Spec.BootConfigurationRef
	if ref == nil || ref.Name == "" {
		return true, "", nil
	}
	ready, why, _, err := r.bootConfigurationReady(ctx, p, ref.Namespace, ref.Name)
	return ready, why, err
}

// bootConfigurationReady reports whether a boot configuration is Ready; when not, why, and the
// object (nil when it does not exist).
func (r *ServerReconciler) bootConfigurationReady(ctx context.Context, p *pass, ns, name string) (bool, string, *metalv1alpha1.ServerBootConfiguration, error) {
	sbc := &metalv1alpha1.ServerBootConfiguration{}
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sbc); err != nil {
		if apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("waiting for boot configuration %s/%s to exist", ns, name), nil, nil
		}
		return false, "", nil, fmt.Errorf("reading boot configuration %s/%s: %w", ns, name, err)
	}
	if sbc.Status.State == metalv1alpha1.ServerBootConfigurationStateReady {
		return true, "", sbc, nil
	}
	return false, fmt.Sprintf("waiting for boot configuration %s/%s to be Ready (%s)", ns, name,
		cmp.Or(string(sbc.Status.State), string(metalv1alpha1.ServerBootConfigurationStatePending))), sbc, nil
}

func (r *ServerReconciler) claim(ctx context.Context, p *pass) (*metalv1alpha1.ServerClaim, error) {
	ref := p.Obj.Spec.ServerClaimRef
	if ref == nil {
		return nil, nil
	}
	c := &metalv1alpha1.ServerClaim{}
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading claim %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return c, nil
}

func (r *ServerReconciler) maintenanceObj(ctx context.Context, p *pass) (*metalv1alpha1.ServerMaintenance, error) {
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

// released waits, powered off, for its claim ref to be removed by hand.
func (r *ServerReconciler) released(bctx, ctx context.Context, p *pass) (lifecycle.Result, error) {
	if p.Obj.Spec.ServerClaimRef == nil {
		return r.transition(ctx, p, metalv1alpha1.ServerStateAvailable, "claim ref removed", nil)
	}
	if res, err := r.converge(ctx, p, metalv1alpha1.PowerOff, true); err != nil || !res.IsContinue() {
		return res, err
	}
	return lifecycle.Done(), nil
}

// maintenance moves a server into Maintenance when a maintenance ref appears, remembering the
// state to return to.
func (r *ServerReconciler) maintenance(ctx context.Context, p *pass) (lifecycle.Result, error) {
	if p.Obj.Spec.ServerMaintenanceRef == nil || p.state == metalv1alpha1.ServerStateMaintenance {
		return lifecycle.Continue(), nil
	}
	prev, ref := p.state, p.Obj.Spec.ServerMaintenanceRef
	return r.transition(ctx, p, metalv1alpha1.ServerStateMaintenance, "maintenance "+ref.Namespace+"/"+ref.Name, func(s *metalv1alpha1.Server) {
		lifecycle.SetAnnotation(s, PreviousStateAnnotation, string(prev))
	})
}

// inMaintenance boots the maintenance's boot configuration once it is Ready (a one-time PXE
// override, then power on, or a restart of a running box through an operation intent so it
// happens exactly once), applies the maintenance's power otherwise, and returns to the previous
// state when the maintenance ref is removed.
func (r *ServerReconciler) inMaintenance(bctx, ctx context.Context, p *pass) (lifecycle.Result, error) {
	s := p.Obj
	if s.Spec.ServerMaintenanceRef == nil {
		prev := previousState(s)
		if s.Spec.ServerClaimRef != nil && prev != metalv1alpha1.ServerStateReleased {
			prev = metalv1alpha1.ServerStateReserved
		}
		return r.transition(ctx, p, prev, "maintenance ended", func(s *metalv1alpha1.Server) {
			lifecycle.RemoveAnnotation(s, PreviousStateAnnotation)
			lifecycle.RemoveAnnotation(s, MaintenanceBootAnnotation)
		})
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
	if s.Annotations[MaintenanceBootAnnotation] == string(m.UID) {
		// Booted into it: keep it on.
		if res, err := r.converge(ctx, p, metalv1alpha1.PowerOn, true); err != nil || !res.IsContinue() {
			return res, err
		}
		return lifecycle.Done(), nil
	}
	ready, why, _, err := r.bootConfigurationReady(ctx, p, ref.Namespace, ref.Name)
	if err != nil || !ready {
		// The boot provider's Ready (watched) brings the next pass.
		return lifecycle.RequeueAfter(r.Options.RetryAfter, why), err
	}
	switch p.sys.PowerState {
	case bmc.PowerStatePoweringOn, bmc.PowerStatePoweringOff:
		return lifecycle.RequeueAfter(r.Options.PowerPoll, "power in transition"), nil
	}
	if !pxeSet(p.sys.Boot) {
		// Observable and idempotent: a lost write after it finds it set and goes on.
		if err := p.conn.SetBootOnce(bctx, p.sysID, bmc.BootPxe); err != nil {
			return lifecycle.Result{}, fmt.Errorf("setting one-time PXE boot for maintenance: %w", err)
		}
		r.Recorder.Eventf(s, m, corev1.EventTypeNormal, "BootOnce", "SetBootOnce", "one-time PXE boot set for maintenance %s/%s", m.Namespace, m.Name)
	}
	booted := func(s *metalv1alpha1.Server) { lifecycle.SetAnnotation(s, MaintenanceBootAnnotation, string(m.UID)) }
	if p.sys.PowerState == bmc.PowerStateOn {
		return r.issueOperation(bctx, ctx, p, opIntent{op: metalv1alpha1.OperationPowerCycleServer, phase: intentOwed, at: r.Now()}, booted)
	}
	issued, _, err := r.powerAction(bctx, p, metalv1alpha1.PowerOn, false)
	if err != nil {
		return lifecycle.Result{}, err
	}
	return lifecycle.Wrote("maintenance boot"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		booted(s)
		if issued {
			lifecycle.SetAnnotation(s, PowerAnnotation, powerRecord{target: metalv1alpha1.PowerOn, at: r.Now()}.String())
		}
	})
}

// parked leaves the box alone (no BMC calls at all) until it is unparked, which returns it to the
// state it was parked in: a claimed box stays claimed and is not powered off or rediscovered.
func (r *ServerReconciler) parked(ctx context.Context, p *pass) (lifecycle.Result, error) {
	switch p.Obj.Annotations[metalv1alpha1.OperationAnnotation] {
	case metalv1alpha1.OperationUnpark:
	case metalv1alpha1.OperationPark:
		// Parked already: the request is done.
		return lifecycle.Wrote("park again"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
			lifecycle.RemoveAnnotation(s, metalv1alpha1.OperationAnnotation)
		})
	default:
		return r.mirror(p)
	}
	to := unparkedState(p.Obj)
	return r.transition(ctx, p, to, "unparked", func(s *metalv1alpha1.Server) {
		lifecycle.RemoveAnnotation(s, metalv1alpha1.OperationAnnotation)
		lifecycle.RemoveAnnotation(s, metalv1alpha1.ParkedAnnotation)
		lifecycle.RemoveAnnotation(s, PreviousStateAnnotation)
	})
}

// unparkedState is where an unparked server goes: what its refs say first (a claim keeps it
// Reserved, or Released under Retain; a maintenance ref is entered from there by the next
// pass), else the state saved at park. Only a server that was not past discovery, or whose saved
// state is lost, starts over.
func unparkedState(s *metalv1alpha1.Server) metalv1alpha1.ServerState {
	prev := metalv1alpha1.ServerState(s.Annotations[PreviousStateAnnotation])
	if s.Spec.ServerClaimRef != nil {
		if prev == metalv1alpha1.ServerStateReleased {
			return metalv1alpha1.ServerStateReleased
		}
		return metalv1alpha1.ServerStateReserved
	}
	switch prev {
	case metalv1alpha1.ServerStateAvailable, metalv1alpha1.ServerStateReleased:
		return metalv1alpha1.ServerStateAvailable
	case metalv1alpha1.ServerStateReserved:
		// The claim went while parked: Reserved powers it off and hands it back.
		return metalv1alpha1.ServerStateReserved
	case metalv1alpha1.ServerStateMaintenance:
		if s.Spec.ServerMaintenanceRef != nil {
			return metalv1alpha1.ServerStateMaintenance
		}
	}
	return metalv1alpha1.ServerStateInitial
}

// mirror reports only the state mirror (for states that make no BMC calls).
func (r *ServerReconciler) mirror(p *pass) (lifecycle.Result, error) {
	if p.Obj.Status.State != p.state {
		mirrorState(&p.Obj.Status, p.Obj.Generation, p.state)
	}
	return lifecycle.Done(), nil
}

// blockDeletion holds a deleted server while a claim or maintenance holds it (read from durable
// bookkeeping and refs, never from status), and reports why. It needs no BMC.
func (r *ServerReconciler) blockDeletion(ctx context.Context, p *pass) (lifecycle.Result, error) {
	s := p.Obj
	if s.DeletionTimestamp.IsZero() {
		return lifecycle.Continue(), nil
	}
	if !controllerutil.ContainsFinalizer(s, ServerFinalizer) {
		return lifecycle.Done(), nil
	}
	held, why, err := r.held(ctx, p)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if !held {
		return lifecycle.Continue(), nil
	}
	st := s.Status.DeepCopy()
	mirrorState(st, s.Generation, p.state)
	lifecycle.SetCondition(&st.Conditions, s.Generation, metalv1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, "Held", why)
	if !equality.Semantic.DeepEqual(*st, s.Status) {
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, "DeletionBlocked", "Delete", "%s", why)
		s.Status = *st // the Reconciler writes it
	}
	return lifecycle.RequeueAfter(r.Options.RetryAfter, "deletion blocked"), nil
}

// finalize powers off a deleted server that nothing holds any more (blockDeletion ran first) and
// lets it go.
func (r *ServerReconciler) finalize(bctx, ctx context.Context, p *pass) (lifecycle.Result, error) {
	if p.state != metalv1alpha1.ServerStateParked {
		if res, err := r.converge(ctx, p, metalv1alpha1.PowerOff, false); err != nil || !res.IsContinue() {
			return res, err
		}
	}
	return r.release(ctx, p)
}

// held reports whether a claim or maintenance still holds the server.
func (r *ServerReconciler) held(ctx context.Context, p *pass) (bool, string, error) {
	if p.state == metalv1alpha1.ServerStateReserved || p.Obj.Spec.ServerClaimRef != nil {
		if c, err := r.claim(ctx, p); err != nil || c != nil {
			if c != nil {
				return true, fmt.Sprintf("claimed by %s/%s: delete the claim first", c.Namespace, c.Name), nil
			}
			return false, "", err
		}
	}
	if p.state == metalv1alpha1.ServerStateMaintenance || p.Obj.Spec.ServerMaintenanceRef != nil {
		if m, err := r.maintenanceObj(ctx, p); err != nil || m != nil {
			if m != nil {
				return true, fmt.Sprintf("in maintenance %s/%s: delete the maintenance first", m.Namespace, m.Name), nil
			}
			if err != nil {
				return false, "", err
			}
		}
		if p.Obj.Spec.ServerMaintenanceRef == nil && p.state == metalv1alpha1.ServerStateMaintenance {
			return false, "", nil
		}
	}
	return false, "", nil
}

// release removes the server's discovery objects and its finalizer.
func (r *ServerReconciler) release(ctx context.Context, p *pass) (lifecycle.Result, error) {
	if !controllerutil.ContainsFinalizer(p.Obj, ServerFinalizer) {
		return lifecycle.Done(), nil
	}
	if err := r.deleteRound(ctx, p); err != nil {
		return lifecycle.Result{}, err
	}
	r.failures.Delete(p.Obj.Name)
	r.inventories.forget(p.Obj.UID)
	return lifecycle.Wrote("finalizer removed"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		controllerutil.RemoveFinalizer(s, ServerFinalizer)
	})
}

package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/controller/metal/health"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/discovery"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// roundSecret returns the discovery Secret of a server, if any, read past the cache: a Secret
// created by the previous pass and not cached yet would start a second round whose token the
// first one's ignition does not carry, and a deleted one still cached would skip the power-off
// that makes the next PXE boot happen.
func (r *Reconciler) roundSecret(ctx context.Context, p *serverPass) (*corev1.Secret, error) {
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
// pair for the same round. A cleaning round (cleaning not "") is the same pair with the
// cleaning purpose on the Secret and the policy in its ignition.
func (r *Reconciler) ensureRound(ctx context.Context, p *serverPass, sec *corev1.Secret, cleaning metalv1alpha1.CleaningPolicy) (*corev1.Secret, error) {
	s := p.Obj
	name := discovery.ObjectName(s.Name)
	if sec == nil {
		round, token, err := discovery.NewRound()
		if err != nil {
			return nil, err
		}
		labels := map[string]string{discovery.ServerLabel: s.Name, discovery.RoundLabel: round}
		if cleaning != "" {
			labels[discovery.PurposeLabel] = discovery.PurposeCleaning
			labels[discovery.CleaningPolicyLabel] = string(cleaning)
		}
		if uuid := strings.ToLower(s.Spec.SystemUUID); len(validation.IsValidLabelValue(uuid)) == 0 {
			labels[discovery.SystemUUIDLabel] = uuid
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: r.Options.DiscoveryNamespace, Name: name, Labels: labels},
			Data:       map[string][]byte{discovery.TokenKey: []byte(token)},
		}
		if r.Options.Ignition != nil {
			ign, err := r.Options.Ignition(s, token, cleaning)
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
				BootMethod:        r.Options.DiscoveryBootMethod,
				BootURI:           r.Options.DiscoveryBootURI,
			},
		}
		err = r.createOwned(ctx, p, sbc)
	}
	if err != nil {
		return nil, fmt.Errorf("discovery boot configuration: %w", err)
	}
	return sec, nil
}

func (r *Reconciler) createOwned(ctx context.Context, p *serverPass, o client.Object) error {
	if err := controllerutil.SetOwnerReference(p.Obj, o, p.c.Scheme()); err != nil {
		return err
	}
	if err := p.c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating discovery %T: %w", o, err)
	}
	return nil
}

// deleteRound removes a server's discovery objects, the boot configuration first: once it is
// gone, Available (deleteLeftRound) takes the round for gone.
func (r *Reconciler) deleteRound(ctx context.Context, p *serverPass) error {
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

// deleteLeftRound removes a round's objects an Available server still has: a cleaning's, which
// ends with the move to Available, or a discovery's whose move was written by an older
// version. The boot configuration, cached and deleted before the Secret, says whether there is
// one, so the pass reads nothing past the cache; one deleted a moment ago and still cached costs
// two deletes that find nothing.
func (r *Reconciler) deleteLeftRound(ctx context.Context, p *serverPass) error {
	sbc := &metalv1alpha1.ServerBootConfiguration{}
	err := p.c.Get(ctx, client.ObjectKey{Namespace: r.Options.DiscoveryNamespace, Name: discovery.ObjectName(p.Obj.Name)}, sbc)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the round's boot configuration: %w", err)
	}
	return r.deleteRound(ctx, p)
}

func (r *Reconciler) discoveryRef() *metalv1alpha1.ObjectReference {
	return &metalv1alpha1.ObjectReference{Namespace: r.Options.DiscoveryNamespace}
}

// initial prepares discovery: power off, a new round's objects, a one-time PXE override and
// power on — then records all of it with the move to Discovery in one write. After a crash
// anywhere in between, what the BMC already did is observed, not done again.
func (r *Reconciler) initial(bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
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
	if sec != nil && sec.Labels[discovery.PurposeLabel] != "" {
		// A cleaning round's leftover: its ignition erases disks. Gone first, then a round of
		// discovery's own.
		return lifecycle.RequeueAfter(r.Options.PowerPoll, "removing a cleaning round"), r.deleteRound(ctx, p)
	}
	if sec, err = r.ensureRound(ctx, p, sec, ""); err != nil {
		return lifecycle.Result{}, err
	}
	round := sec.Labels[discovery.RoundLabel]
	rec, end, err := r.bootRound(bctx, ctx, p, "discovery round "+round)
	if err != nil || end != nil {
		return deref(end), err
	}
	ref := r.discoveryRef()
	ref.Name = discovery.ObjectName(p.Obj.Name)
	return r.transition(ctx, p, metalv1alpha1.ServerStateDiscovery, "booting the discovery image, round "+round, func(s *metalv1alpha1.Server) {
		lifecycle.SetAnnotation(s, discovery.RoundAnnotation, round)
		lifecycle.SetAnnotation(s, serverstate.BootOnceAnnotation, round)
		lifecycle.SetAnnotation(s, serverstate.DiscoveryStartedAnnotation, r.Now().UTC().Format(time.RFC3339))
		if rec != "" {
			lifecycle.SetAnnotation(s, serverstate.PowerAnnotation, rec)
		}
		lifecycle.RemoveAnnotation(s, discovery.ReportedAnnotation)
		s.Spec.BootConfigurationRef = ref
	})
}

// discovery waits for the probe's report of this round, keeping the box on; a report moves the
// server to Available (powered off in the same pass), a timeout back to Initial.
func (r *Reconciler) discovery(bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	s := p.Obj
	if discovery.Fresh(s) {
		issued, _, err := r.powerAction(bctx, p, metalv1alpha1.PowerOff, false)
		if err != nil {
			return lifecycle.Result{}, err
		}
		cursor := ""
		if p.Obj.Annotations[health.HardwareLogCursorAnnotation] == "" {
			cursor = r.logCursor(bctx, p)
		}
		to, why, policy := metalv1alpha1.ServerStateAvailable, "hardware report received", metalv1alpha1.CleaningPolicyNone
		if r.Options.CleanDiscovered && s.Annotations[serverstate.LastCleaningAnnotation] == "" {
			if policy = r.releasePolicy(s); policy != metalv1alpha1.CleaningPolicyNone {
				to, why = metalv1alpha1.ServerStateCleaning, why+", never cleaned: cleaning policy "+string(policy)
			}
		}
		// The machine may be owed a cleaning by an earlier Server of it: it goes to Cleaning
		// in the same write that ends discovery, so no claim sees it Available first.
		owed, err := r.owedCleaning(ctx, s)
		if err != nil {
			return lifecycle.Result{}, err
		}
		if owed != nil {
			policy = cleaning.Wider(policy, owed.Policy)
			to, why = metalv1alpha1.ServerStateCleaning, "hardware report received, "+owed.String()
			r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, metalv1alpha1.ReasonCleaningOwed, "Clean", "%s", owed.String())
		}
		if to == metalv1alpha1.ServerStateAvailable {
			// The round is over: its objects go in this pass, so the first pass in Available
			// has nothing left to write but the status, and reads nothing past the cache.
			// After a crash before the write below, the next pass finds the report fresh and
			// deletes again (gone is fine).
			if err := r.deleteRound(ctx, p); err != nil {
				return lifecycle.Result{}, err
			}
		}
		return r.transition(ctx, p, to, why, func(s *metalv1alpha1.Server) {
			if to == metalv1alpha1.ServerStateCleaning {
				lifecycle.SetAnnotation(s, serverstate.CleaningAnnotation, string(policy))
			}
			if owed != nil {
				lifecycle.SetAnnotation(s, serverstate.CleaningOwedAnnotation, owed.SystemUUID)
			}
			if issued {
				lifecycle.SetAnnotation(s, serverstate.PowerAnnotation, powerRecord{target: metalv1alpha1.PowerOff, at: r.Now()}.String())
			}
			if cursor != "" {
				lifecycle.SetAnnotation(s, health.HardwareLogCursorAnnotation, cursor)
			}
			clearDiscovery(s, r.Options.DiscoveryNamespace)
		})
	}
	if s.Annotations[discovery.RoundAnnotation] == "" {
		return r.discoveryNotOurs(ctx, p)
	}
	started, err := time.Parse(time.RFC3339, s.Annotations[serverstate.DiscoveryStartedAnnotation])
	if err != nil {
		started = r.Now() // unknown start (restored object): the timeout runs from now on
		return lifecycle.Wrote("discovery start"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
			lifecycle.SetAnnotation(s, serverstate.DiscoveryStartedAnnotation, started.UTC().Format(time.RFC3339))
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
// discoveryNotOurs handles a server in Discovery without a round of ours: one the reference
// operator was discovering when it was switched off (its probe reports to a registry that is
// gone). It is not powered, booted or timed out: it is discovered again, from Initial, only once
// it is Off and no claim holds it, so that a box someone is still using is never rebooted by the
// switch.
func (r *Reconciler) discoveryNotOurs(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	s := p.Obj
	if p.sys.PowerState == bmc.PowerStateOff && s.Spec.ServerClaimRef == nil {
		return r.transition(ctx, p, metalv1alpha1.ServerStateInitial, "discovery left by another operator, server Off and unclaimed: discovering again", func(s *metalv1alpha1.Server) {
			clearDiscovery(s, r.Options.DiscoveryNamespace)
		})
	}
	return lifecycle.RequeueAfter(r.Options.ServerResync, "in Discovery without a round of ours: discovered again once Off and unclaimed"), nil
}

func clearDiscovery(s *metalv1alpha1.Server, ns string) {
	lifecycle.RemoveAnnotation(s, serverstate.BootOnceAnnotation)
	lifecycle.RemoveAnnotation(s, serverstate.DiscoveryStartedAnnotation)
	if ref := s.Spec.BootConfigurationRef; ref != nil && ref.Namespace == ns && ref.Name == discovery.ObjectName(s.Name) {
		s.Spec.BootConfigurationRef = nil
	}
}

// bootRound boots the server's round (discovery or cleaning: the same image and boot
// configuration) once: a one-time boot of the round's configuration and a power-on, unless the
// box is already booting (done before a restart). It returns the power record of what it
// issued for the caller's write, or end, set when the pass ends here (waiting for the boot
// configuration or a power-off, or a medium recorded).
func (r *Reconciler) bootRound(bctx, ctx context.Context, p *serverPass, what string) (rec string, end *lifecycle.Result, err error) {
	rec = p.Obj.Annotations[serverstate.PowerAnnotation]
	switch p.sys.PowerState {
	case bmc.PowerStateOn, bmc.PowerStatePoweringOn:
		// Already booting: we did it before a restart. Do not boot it twice.
	case bmc.PowerStatePoweringOff:
		return "", ptr.To(lifecycle.RequeueAfter(r.Options.PowerPoll, "powering off")), nil
	default:
		// The box PXE-boots what the boot provider serves for this round: before its boot
		// configuration is Ready (the boot-operator preparing the image, say) it would boot
		// nothing and only time out. The provider's Ready (watched) brings the next pass. The
		// built-in provider is Ready by construction (the image is set, the ignition Secret was
		// just created), so with it only an Error holds the boot back: waiting for its Ready
		// would put its status write in every server's path.
		ready, why, sbc, err := r.bootConfigurationReady(ctx, p, r.Options.DiscoveryNamespace, discovery.ObjectName(p.Obj.Name))
		if err != nil {
			return "", nil, err
		}
		failed := sbc != nil && sbc.Status.State == metalv1alpha1.ServerBootConfigurationStateError
		if !ready && (r.Options.ExternalBootProvider || failed) {
			if failed {
				r.Recorder.Eventf(p.Obj, sbc, corev1.EventTypeWarning, "DiscoveryBootNotReady", "Discover",
					"discovery boot configuration %s/%s is in Error; see its conditions", sbc.Namespace, sbc.Name)
			}
			return "", ptr.To(lifecycle.RequeueAfter(r.Options.RetryAfter, why)), nil
		}
		req := bootRequest{method: r.Options.DiscoveryBootMethod, uri: r.Options.DiscoveryBootURI, what: what}
		if want, media, err := r.prepareBoot(bctx, p, req); err != nil || media {
			if err != nil {
				return "", nil, err
			}
			res, err := r.writeMediaRecord(ctx, p, want)
			return "", &res, err
		}
		issued, _, err := r.powerAction(bctx, p, metalv1alpha1.PowerOn, false)
		if err != nil {
			return "", nil, err
		}
		if issued {
			rec = powerRecord{target: metalv1alpha1.PowerOn, at: r.Now()}.String()
		}
	}
	return rec, nil, nil
}

func deref(r *lifecycle.Result) lifecycle.Result {
	if r == nil {
		return lifecycle.Result{}
	}
	return *r
}

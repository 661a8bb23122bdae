package bmccontroller

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// RotationForAnnotation on a BMCSecret names the BMC whose rotate-credentials wrote its pending
// password: only that BMC ever sends it or commits it.
const RotationForAnnotation = "lifecycle.metalhub.io/rotation-for"

// rotation carries out the rotate-credentials operation: a new password for the account the
// BMC object logs in with, set on the BMC through AccountService and then in its BMCSecret.
//
// The new password is written aside in the BMCSecret (pendingPassword) before anything is sent,
// and becomes the password only once a login with it succeeded. This step runs before the pass
// connects, because from the moment the BMC takes the new password until the BMCSecret has it,
// the old one no longer opens the BMC: a pass that finds the old one refused and the new one
// accepted (a crash after the request) commits it without sending anything. Setting it is left to
// rotationSet, after the pass proved the BMC is this one. Each step is one write and ends the pass.
func (r *Reconciler) rotation(ctx context.Context, p *bmcPass) (lifecycle.Result, error) {
	b := p.Obj
	asked := b.Annotations[metalv1alpha1.OperationAnnotation] == metalv1alpha1.OperationRotateCredentials
	sec, pending, isPending, err := r.rotationSecret(ctx, p, asked)
	if err != nil || sec == nil {
		return lifecycle.Continue(), err
	}
	switch {
	case !asked && !isPending:
		return lifecycle.Continue(), nil
	case asked && !isPending:
		if sec.Immutable != nil && *sec.Immutable {
			r.Recorder.Eventf(b, sec, corev1.EventTypeWarning, metalv1alpha1.ReasonRotationImmutable, "Operation",
				"rotate-credentials: BMCSecret %s is immutable; nothing changed", sec.Name)
			return lifecycle.Wrote("rotation refused"), lifecycle.PatchMetadata(ctx, p.Client(), b, func(o client.Object) {
				lifecycle.RemoveAnnotation(o, metalv1alpha1.OperationAnnotation)
			})
		}
		if others, err := r.sharingSecret(ctx, p, sec.Name); err != nil {
			return lifecycle.Result{}, err
		} else if len(others) > 0 {
			r.Recorder.Eventf(b, sec, corev1.EventTypeWarning, metalv1alpha1.ReasonRotationShared, "Operation",
				"rotate-credentials: BMCSecret %s is shared with %s; nothing changed. A rotation changes the Secret of every BMC that names it: give this BMC its own BMCSecret (a copy, named in spec.bmcSecretRef) and ask again",
				sec.Name, strings.Join(others, ", "))
			return lifecycle.Wrote("rotation refused"), lifecycle.PatchMetadata(ctx, p.Client(), b, func(o client.Object) {
				lifecycle.RemoveAnnotation(o, metalv1alpha1.OperationAnnotation)
			})
		}
		pw, err := bmcaccess.NewPassword()
		if err != nil {
			return lifecycle.Result{}, err
		}
		sec.SetValue(metalv1alpha1.BMCSecretPendingPasswordKey, pw)
		lifecycle.SetAnnotation(sec, RotationForAnnotation, b.Name)
		if err := p.Client().Update(ctx, sec); err != nil {
			return lifecycle.Result{}, fmt.Errorf("writing the new BMC password aside in BMCSecret %s: %w", sec.Name, err)
		}
		r.Recorder.Eventf(b, sec, corev1.EventTypeNormal, metalv1alpha1.ReasonRotating, "Operation", "rotate-credentials: new password written aside in BMCSecret %s", sec.Name)
		return lifecycle.Wrote("new password written aside"), nil
	case asked:
		if mine, err := r.rotationIsMine(ctx, p, sec); err != nil {
			return lifecycle.Result{}, err
		} else if !mine {
			r.Recorder.Eventf(b, sec, corev1.EventTypeWarning, metalv1alpha1.ReasonRotationShared, "Operation",
				"rotate-credentials: BMCSecret %s is shared and already has a rotation under way for another BMC; nothing changed", sec.Name)
		}
		return lifecycle.Wrote("rotation under way"), lifecycle.PatchMetadata(ctx, p.Client(), b, func(o client.Object) {
			lifecycle.RemoveAnnotation(o, metalv1alpha1.OperationAnnotation)
		})
	}
	if mine, err := r.rotationIsMine(ctx, p, sec); err != nil || !mine {
		return lifecycle.Continue(), err
	}
	oldEP, err := bmcaccess.Endpoint(ctx, p.Client(), b)
	if err != nil {
		return lifecycle.Continue(), nil // the connect step reports it
	}
	if err := r.Pool.CheckCredentials(p.bctx, oldEP); bmc.ReasonOf(err) != bmc.ReasonAuthenticationFailed {
		return lifecycle.Continue(), nil // the old password still opens it (or the BMC is down): connect
	}
	newEP := oldEP
	newEP.Password = pending
	if err := r.Pool.CheckCredentials(p.bctx, newEP); err != nil {
		r.Recorder.Eventf(b, sec, corev1.EventTypeWarning, metalv1alpha1.ReasonRotationFailed, "Operation",
			"rotate-credentials: neither the old nor the new password opens the BMC: %v", err)
		return lifecycle.Result{}, fmt.Errorf("rotate-credentials: the old password is refused and the new one: %w", err)
	}
	return r.commitRotation(ctx, p, sec, pending)
}

// rotationSet sets a pending password on the BMC, in a pass that connected with the old one and
// proved the BMC is this one (its systems are its Servers' machines): an address that now
// reaches another BMC, which may well take the same factory credentials, gets nothing.
func (r *Reconciler) rotationSet(ctx context.Context, p *bmcPass) (lifecycle.Result, error) {
	sec, pending, isPending, err := r.rotationSecret(ctx, p, false)
	if err != nil || sec == nil || !isPending {
		return lifecycle.Continue(), err
	}
	b := p.Obj
	if mine, err := r.rotationIsMine(ctx, p, sec); err != nil || !mine {
		return lifecycle.Continue(), err
	}
	// The password is sent only while this BMC alone names the Secret: one registered on it since
	// the rotation was asked would lose the password the commit overwrites.
	if others, err := r.sharingSecret(ctx, p, sec.Name); err != nil {
		return lifecycle.Result{}, err
	} else if len(others) > 0 {
		sec.DeleteValue(metalv1alpha1.BMCSecretPendingPasswordKey)
		lifecycle.RemoveAnnotation(sec, RotationForAnnotation)
		if err := p.Client().Update(ctx, sec); err != nil {
			return lifecycle.Result{}, fmt.Errorf("rotate-credentials: withdrawing the pending password of BMCSecret %s: %w", sec.Name, err)
		}
		r.Recorder.Eventf(b, sec, corev1.EventTypeWarning, metalv1alpha1.ReasonRotationShared, "Operation",
			"rotate-credentials: withdrawn before anything was sent: BMCSecret %s is now shared with %s; give this BMC its own BMCSecret and ask again",
			sec.Name, strings.Join(others, ", "))
		return lifecycle.Wrote("rotation withdrawn"), nil
	}
	if err := bmcaccess.Prove(ctx, p.Client(), b, p.systems); err != nil {
		r.Recorder.Eventf(b, sec, corev1.EventTypeWarning, metalv1alpha1.ReasonRotationFailed, "Operation", "rotate-credentials: not sent: %v", err)
		return lifecycle.Result{}, fmt.Errorf("rotate-credentials: %w", err)
	}
	if err := p.conn.SetAccount(p.bctx, p.ep.Username, pending, ""); err != nil {
		r.Recorder.Eventf(b, sec, corev1.EventTypeWarning, metalv1alpha1.ReasonRotationFailed, "Operation", "rotate-credentials: the BMC did not take the new password: %v", err)
		return lifecycle.Result{}, fmt.Errorf("rotate-credentials: %w", err)
	}
	newEP := p.ep
	newEP.Password = pending
	if err := r.Pool.CheckCredentials(p.bctx, newEP); err != nil {
		r.Recorder.Eventf(b, sec, corev1.EventTypeWarning, metalv1alpha1.ReasonRotationFailed, "Operation", "rotate-credentials: the new password does not open the BMC yet: %v", err)
		return lifecycle.Result{}, fmt.Errorf("rotate-credentials: proving the new password: %w", err)
	}
	return r.commitRotation(ctx, p, sec, pending)
}

// rotationSecret reads the BMC's BMCSecret and its pending password; nil when there is nothing
// to read (the connect step reports a missing one), an error only when a rotation is asked.
func (r *Reconciler) rotationSecret(ctx context.Context, p *bmcPass, asked bool) (*metalv1alpha1.BMCSecret, string, bool, error) {
	name := p.Obj.Spec.BMCSecretRef.Name
	if name == "" {
		return nil, "", false, nil
	}
	sec := &metalv1alpha1.BMCSecret{}
	if err := p.Client().Get(ctx, client.ObjectKey{Name: name}, sec); err != nil {
		if asked {
			return nil, "", false, fmt.Errorf("reading BMCSecret %q for rotate-credentials: %w", name, err)
		}
		return nil, "", false, nil
	}
	pending, ok := sec.Value(metalv1alpha1.BMCSecretPendingPasswordKey)
	return sec, pending, ok, nil
}

// rotationIsMine tells whether the Secret's pending password is this BMC's rotation: the one
// its annotation names, or, for a rotation written before the annotation existed, the only BMC
// that names the Secret.
func (r *Reconciler) rotationIsMine(ctx context.Context, p *bmcPass, sec *metalv1alpha1.BMCSecret) (bool, error) {
	if owner, ok := sec.Annotations[RotationForAnnotation]; ok {
		return owner == p.Obj.Name, nil
	}
	others, err := r.sharingSecret(ctx, p, sec.Name)
	return err == nil && len(others) == 0, err
}

// sharingSecret lists the other BMCs that name the BMCSecret.
func (r *Reconciler) sharingSecret(ctx context.Context, p *bmcPass, secret string) ([]string, error) {
	list := &metalv1alpha1.BMCList{}
	if err := p.Client().List(ctx, list, client.MatchingFields{index.BMCSecret: secret}); err != nil {
		return nil, fmt.Errorf("listing the BMCs of BMCSecret %s: %w", secret, err)
	}
	var out []string
	for _, o := range list.Items {
		if o.Name != p.Obj.Name {
			out = append(out, o.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (r *Reconciler) commitRotation(ctx context.Context, p *bmcPass, sec *metalv1alpha1.BMCSecret, pending string) (lifecycle.Result, error) {
	sec.SetValue(metalv1alpha1.BMCSecretPasswordKey, pending)
	sec.DeleteValue(metalv1alpha1.BMCSecretPendingPasswordKey)
	lifecycle.RemoveAnnotation(sec, RotationForAnnotation)
	if err := p.Client().Update(ctx, sec); err != nil {
		return lifecycle.Result{}, fmt.Errorf("rotate-credentials: committing the new password to BMCSecret %s: %w", sec.Name, err)
	}
	r.Recorder.Eventf(p.Obj, sec, corev1.EventTypeNormal, metalv1alpha1.ReasonRotated, "Operation", "rotate-credentials: the BMC and BMCSecret %s have the new password", sec.Name)
	return lifecycle.Wrote("credentials rotated"), nil
}

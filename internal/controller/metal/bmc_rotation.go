package metal

import (
	"context"
	"crypto/rand"
	"fmt"
	"math/big"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// Event reasons of a credentials rotation.
const (
	reasonRotating          = "RotatingCredentials"
	reasonRotated           = "CredentialsRotated"
	reasonRotationFailed    = "CredentialsRotationFailed"
	reasonRotationImmutable = "CredentialsRotationRefused"
)

// rotation carries out the rotate-credentials operation: a new password for the account the
// BMC object logs in with, set on the BMC through AccountService and then in its BMCSecret. It
// runs before the pass connects, because from the moment the BMC takes the new password until
// the BMCSecret has it, the old one no longer opens the BMC.
//
// The new password is written aside in the BMCSecret (pendingPassword) before anything is sent,
// and becomes the password only once a login with it succeeded. A pass that finds it pending
// sets it with the old password (a crash before the request: the old one still works) or, when
// the old one is refused, takes the BMC to have it already (a crash after): either way it is
// proven by a login before the old one is given up. Each step is one write and ends the pass.
func (r *BMCReconciler) rotation(ctx context.Context, p *bmcPass) (lifecycle.Result, error) {
	b := p.Obj
	asked := b.Annotations[metalv1alpha1.OperationAnnotation] == metalv1alpha1.OperationRotateCredentials
	name := b.Spec.BMCSecretRef.Name
	if !asked && name == "" {
		return lifecycle.Continue(), nil
	}
	sec := &metalv1alpha1.BMCSecret{}
	if err := p.Client().Get(ctx, client.ObjectKey{Name: name}, sec); err != nil {
		if asked {
			return lifecycle.Result{}, fmt.Errorf("reading BMCSecret %q for rotate-credentials: %w", name, err)
		}
		return lifecycle.Continue(), nil // the connect step reports it
	}
	pending, isPending := sec.Value(metalv1alpha1.BMCSecretPendingPasswordKey)
	switch {
	case !asked && !isPending:
		return lifecycle.Continue(), nil
	case asked && !isPending:
		if sec.Immutable != nil && *sec.Immutable {
			r.Recorder.Eventf(b, sec, corev1.EventTypeWarning, reasonRotationImmutable, "Operation",
				"rotate-credentials: BMCSecret %s is immutable; nothing changed", name)
			return lifecycle.Wrote("rotation refused"), lifecycle.PatchMetadata(ctx, p.Client(), b, func(o client.Object) {
				lifecycle.RemoveAnnotation(o, metalv1alpha1.OperationAnnotation)
			})
		}
		pw, err := newPassword()
		if err != nil {
			return lifecycle.Result{}, err
		}
		sec.SetValue(metalv1alpha1.BMCSecretPendingPasswordKey, pw)
		if err := p.Client().Update(ctx, sec); err != nil {
			return lifecycle.Result{}, fmt.Errorf("writing the new BMC password aside in BMCSecret %s: %w", name, err)
		}
		r.Recorder.Eventf(b, sec, corev1.EventTypeNormal, reasonRotating, "Operation", "rotate-credentials: new password written aside in BMCSecret %s", name)
		return lifecycle.Wrote("new password written aside"), nil
	case asked:
		return lifecycle.Wrote("rotation under way"), lifecycle.PatchMetadata(ctx, p.Client(), b, func(o client.Object) {
			lifecycle.RemoveAnnotation(o, metalv1alpha1.OperationAnnotation)
		})
	}
	oldEP, err := bmcEndpoint(ctx, p.Client(), b)
	if err != nil {
		return lifecycle.Result{}, err
	}
	newEP := oldEP
	newEP.Password = pending
	conn, err := r.Pool.Get(oldEP)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if err := conn.SetAccount(p.bctx, oldEP.Username, pending, ""); err != nil && bmc.ReasonOf(err) != bmc.ReasonAuthenticationFailed {
		r.Recorder.Eventf(b, sec, corev1.EventTypeWarning, reasonRotationFailed, "Operation", "rotate-credentials: the BMC did not take the new password: %v", err)
		return lifecycle.Result{}, fmt.Errorf("rotate-credentials: %w", err)
	}
	if err := r.Pool.CheckCredentials(p.bctx, newEP); err != nil {
		r.Recorder.Eventf(b, sec, corev1.EventTypeWarning, reasonRotationFailed, "Operation", "rotate-credentials: the new password does not open the BMC yet: %v", err)
		return lifecycle.Result{}, fmt.Errorf("rotate-credentials: proving the new password: %w", err)
	}
	sec.SetValue(metalv1alpha1.BMCSecretPasswordKey, pending)
	sec.DeleteValue(metalv1alpha1.BMCSecretPendingPasswordKey)
	if err := p.Client().Update(ctx, sec); err != nil {
		return lifecycle.Result{}, fmt.Errorf("rotate-credentials: committing the new password to BMCSecret %s: %w", name, err)
	}
	r.Recorder.Eventf(b, sec, corev1.EventTypeNormal, reasonRotated, "Operation", "rotate-credentials: the BMC and BMCSecret %s have the new password", name)
	return lifecycle.Wrote("credentials rotated"), nil
}

// newPassword is 16 random characters with a lower and an upper case letter, a digit and a
// symbol, which the password policies of common BMCs accept (iDRAC allows 20 at most).
func newPassword() (string, error) {
	classes := []string{"abcdefghijkmnopqrstuvwxyz", "ABCDEFGHJKLMNPQRSTUVWXYZ", "23456789", "-_."}
	all := classes[0] + classes[1] + classes[2] + classes[3]
	pick := func(set string) (byte, error) {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(set))))
		if err != nil {
			return 0, fmt.Errorf("generating a password: %w", err)
		}
		return set[n.Int64()], nil
	}
	out := make([]byte, 16)
	for i := range out {
		set := all
		if i < len(classes) {
			set = classes[i]
		}
		c, err := pick(set)
		if err != nil {
			return "", err
		}
		out[i] = c
	}
	// Shuffle so the classes are not always in front.
	for i := len(out) - 1; i > 0; i-- {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(i+1)))
		if err != nil {
			return "", fmt.Errorf("generating a password: %w", err)
		}
		j := n.Int64()
		out[i], out[j] = out[j], out[i]
	}
	return string(out), nil
}

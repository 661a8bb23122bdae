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
// BMC object logs in with, set on the BMC through AccountService and then in its BMCSecret.
//
// The new password is written aside in the BMCSecret (pendingPassword) before anything is sent,
// and becomes the password only once a login with it succeeded. This step runs before the pass
// connects, because from the moment the BMC takes the new password until the BMCSecret has it,
// the old one no longer opens the BMC: a pass that finds the old one refused and the new one
// accepted (a crash after the request) commits it without sending anything. Setting it is left to
// rotationSet, after the pass proved the BMC is this one. Each step is one write and ends the pass.
func (r *BMCReconciler) rotation(ctx context.Context, p *bmcPass) (lifecycle.Result, error) {
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
			r.Recorder.Eventf(b, sec, corev1.EventTypeWarning, reasonRotationImmutable, "Operation",
				"rotate-credentials: BMCSecret %s is immutable; nothing changed", sec.Name)
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
			return lifecycle.Result{}, fmt.Errorf("writing the new BMC password aside in BMCSecret %s: %w", sec.Name, err)
		}
		r.Recorder.Eventf(b, sec, corev1.EventTypeNormal, reasonRotating, "Operation", "rotate-credentials: new password written aside in BMCSecret %s", sec.Name)
		return lifecycle.Wrote("new password written aside"), nil
	case asked:
		return lifecycle.Wrote("rotation under way"), lifecycle.PatchMetadata(ctx, p.Client(), b, func(o client.Object) {
			lifecycle.RemoveAnnotation(o, metalv1alpha1.OperationAnnotation)
		})
	}
	oldEP, err := bmcEndpoint(ctx, p.Client(), b)
	if err != nil {
		return lifecycle.Continue(), nil // the connect step reports it
	}
	if err := r.Pool.CheckCredentials(p.bctx, oldEP); bmc.ReasonOf(err) != bmc.ReasonAuthenticationFailed {
		return lifecycle.Continue(), nil // the old password still opens it (or the BMC is down): connect
	}
	newEP := oldEP
	newEP.Password = pending
	if err := r.Pool.CheckCredentials(p.bctx, newEP); err != nil {
		r.Recorder.Eventf(b, sec, corev1.EventTypeWarning, reasonRotationFailed, "Operation",
			"rotate-credentials: neither the old nor the new password opens the BMC: %v", err)
		return lifecycle.Result{}, fmt.Errorf("rotate-credentials: the old password is refused and the new one: %w", err)
	}
	return r.commitRotation(ctx, p, sec, pending)
}

// rotationSet sets a pending password on the BMC, in a pass that connected with the old one and
// proved the BMC is this one (its systems are its Servers' machines): an address that now
// reaches another BMC, which may well take the same factory credentials, gets nothing.
func (r *BMCReconciler) rotationSet(ctx context.Context, p *bmcPass) (lifecycle.Result, error) {
	sec, pending, isPending, err := r.rotationSecret(ctx, p, false)
	if err != nil || sec == nil || !isPending {
		return lifecycle.Continue(), err
	}
	b := p.Obj
	if err := proveBMC(ctx, p.Client(), b, p.systems); err != nil {
		r.Recorder.Eventf(b, sec, corev1.EventTypeWarning, reasonRotationFailed, "Operation", "rotate-credentials: not sent: %v", err)
		return lifecycle.Result{}, fmt.Errorf("rotate-credentials: %w", err)
	}
	if err := p.conn.SetAccount(p.bctx, p.ep.Username, pending, ""); err != nil {
		r.Recorder.Eventf(b, sec, corev1.EventTypeWarning, reasonRotationFailed, "Operation", "rotate-credentials: the BMC did not take the new password: %v", err)
		return lifecycle.Result{}, fmt.Errorf("rotate-credentials: %w", err)
	}
	newEP := p.ep
	newEP.Password = pending
	if err := r.Pool.CheckCredentials(p.bctx, newEP); err != nil {
		r.Recorder.Eventf(b, sec, corev1.EventTypeWarning, reasonRotationFailed, "Operation", "rotate-credentials: the new password does not open the BMC yet: %v", err)
		return lifecycle.Result{}, fmt.Errorf("rotate-credentials: proving the new password: %w", err)
	}
	return r.commitRotation(ctx, p, sec, pending)
}

// rotationSecret reads the BMC's BMCSecret and its pending password; nil when there is nothing
// to read (the connect step reports a missing one), an error only when a rotation is asked.
func (r *BMCReconciler) rotationSecret(ctx context.Context, p *bmcPass, asked bool) (*metalv1alpha1.BMCSecret, string, bool, error) {
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

func (r *BMCReconciler) commitRotation(ctx context.Context, p *bmcPass, sec *metalv1alpha1.BMCSecret, pending string) (lifecycle.Result, error) {
	sec.SetValue(metalv1alpha1.BMCSecretPasswordKey, pending)
	sec.DeleteValue(metalv1alpha1.BMCSecretPendingPasswordKey)
	if err := p.Client().Update(ctx, sec); err != nil {
		return lifecycle.Result{}, fmt.Errorf("rotate-credentials: committing the new password to BMCSecret %s: %w", sec.Name, err)
	}
	r.Recorder.Eventf(p.Obj, sec, corev1.EventTypeNormal, reasonRotated, "Operation", "rotate-credentials: the BMC and BMCSecret %s have the new password", sec.Name)
	return lifecycle.Wrote("credentials rotated"), nil
}

// proveBMC checks, before an account is changed on a BMC, that the BMC answering at its address
// is this one: one of the systems it reports is the machine of one of its Servers. A BMC with no
// Servers yet proves nothing, and gets nothing.
func proveBMC(ctx context.Context, c client.Reader, b *metalv1alpha1.BMC, systems []bmc.SystemSummary) error {
	own := &metalv1alpha1.ServerList{}
	if err := c.List(ctx, own, client.MatchingFields{indexServerBMC: b.Name}); err != nil {
		return fmt.Errorf("listing the Servers of BMC %s: %w", b.Name, err)
	}
	if len(own.Items) == 0 || len(systems) == 0 {
		return lifecycle.Reasonf(metalv1alpha1.ReasonIdentityMismatch, "BMC %s has no Servers (or reports no systems) yet: what answers at its address is not proven to be it", b.Name)
	}
	return sameMachines(own.Items, systems)
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

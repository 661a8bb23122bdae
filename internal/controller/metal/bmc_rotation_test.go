package metal

import (
	"fmt"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

func bmcSecret(t *testing.T, name string) *metalv1alpha1.BMCSecret {
	t.Helper()
	sec := &metalv1alpha1.BMCSecret{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, sec); err != nil {
		t.Fatal(err)
	}
	return sec
}

// A rotation cut off after the BMC took the new password (a SIGKILL between the request and
// the BMCSecret's write): the old password no longer opens the BMC, the new one is written
// aside, and the next pass proves it and commits it. Access is never lost.
func TestRotationCutOffAfterTheBMCTookThePassword(t *testing.T) {
	b := takeBMC(t)
	name := registerBMC(t, b, "rotcut")
	waitState(t, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	const next = "Next-pass.2026"
	user, _ := b.Credentials()
	eventually(t, 5*time.Second, "pending password written", func() (bool, string) {
		sec := bmcSecret(t, "rotcut")
		sec.SetValue(metalv1alpha1.BMCSecretPendingPasswordKey, next)
		err := env.Client.Update(ctx(), sec)
		return err == nil, fmt.Sprint(err)
	})
	b.SetCredentials(user, next) // what the lost pass had sent
	eventually(t, 20*time.Second, "the new password committed", func() (bool, string) {
		sec := bmcSecret(t, "rotcut")
		pass, _ := sec.Value(metalv1alpha1.BMCSecretPasswordKey)
		_, pending := sec.Value(metalv1alpha1.BMCSecretPendingPasswordKey)
		return pass == next && !pending, fmt.Sprintf("password committed %v, pending %v", pass == next, pending)
	})
	if _, onBMC := b.Credentials(); onBMC != next {
		t.Fatal("the BMC's password changed again")
	}
	waitEvent(t, "rotcut", reasonRotated)
}

// Nothing is sent for a rotation whose BMCSecret is immutable: a Warning says why.
func TestRotationOfAnImmutableSecretIsRefused(t *testing.T) {
	b := takeBMC(t)
	name := registerBMC(t, b, "rotimm")
	waitState(t, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	yes := true
	eventually(t, 5*time.Second, "secret made immutable", func() (bool, string) {
		sec := bmcSecret(t, "rotimm")
		sec.Immutable = &yes
		err := env.Client.Update(ctx(), sec)
		return err == nil, fmt.Sprint(err)
	})
	_, before := b.Credentials()
	start := time.Now()
	annotateBMC(t, "rotimm", metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationRotateCredentials)
	waitBMCOperationDone(t, "rotimm", 10*time.Second)
	waitEvent(t, "rotimm", reasonRotationImmutable)
	if _, after := b.Credentials(); after != before {
		t.Fatal("the BMC's password changed")
	}
	if recs := since(records(b), start); len(recs) != 0 {
		t.Fatalf("BMC actions %v", bootActions(recs))
	}
}

// A rotation asked while the BMC's address reaches another BMC that takes the same factory
// credentials: the new password is written aside, and nothing is sent to the stranger; once the
// address is the BMC's again, the rotation completes there.
func TestRotationNeverReachesAnotherBMC(t *testing.T) {
	own, stranger := bmcAtAStrangersAddress(t, "rotaddr")
	user, pass := own.Credentials()
	start := time.Now()
	own.AnswerAs(stranger)
	t.Cleanup(func() { own.AnswerAs(nil) })
	annotateBMC(t, "rotaddr", metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationRotateCredentials)
	waitBMCOperationDone(t, "rotaddr", 10*time.Second)
	eventually(t, 15*time.Second, "the BMC reports the other machine", func() (bool, string) {
		c := apimeta.FindStatusCondition(getBMC(t, "rotaddr").Status.Conditions, metalv1alpha1.ConditionReady)
		return c != nil && c.Reason == metalv1alpha1.ReasonIdentityMismatch, fmt.Sprint(c)
	})
	if _, p := stranger.Credentials(); p != pass {
		t.Fatal("the other BMC's password was changed")
	}
	if got := accountActions(stranger, start); len(got) != 0 {
		t.Fatalf("sent to the other BMC: %v", got)
	}
	if _, pending := bmcSecret(t, "rotaddr").Value(metalv1alpha1.BMCSecretPendingPasswordKey); !pending {
		t.Fatal("the rotation was dropped instead of held")
	}
	own.AnswerAs(nil)
	waitEvent(t, "rotaddr", reasonRotated)
	if _, p := own.Credentials(); p == pass {
		t.Fatal("the BMC's own password was not rotated")
	}
	if got := fmt.Sprint(accountActions(own, start)); got != "[AccountPassword:"+user+"]" {
		t.Fatalf("account actions on the BMC: %s", got)
	}
}

// bmcAtAStrangersAddress registers a BMC, waits for its Server, and gives it a stranger: another
// BMC that takes the same credentials, ready to answer at its address (own.AnswerAs(stranger)).
func bmcAtAStrangersAddress(t *testing.T, name string) (own, stranger *redfish.BMC) {
	t.Helper()
	own, stranger = takeBMC(t), takeBMC(t)
	server := registerBMC(t, own, name)
	waitState(t, server, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	stranger.SetCredentials(own.Credentials())
	return own, stranger
}

package metal

import (
	"fmt"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccontroller"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
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
	t.Parallel()
	b := fleet.Take(t)
	name := fleet.RegisterBMC(t, b, "rotcut")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	const next = "Next-pass.2026"
	user, _ := b.Credentials()
	testenv.Eventually(t, 5*time.Second, "pending password written", func() (bool, string) {
		sec := bmcSecret(t, "rotcut")
		sec.SetValue(metalv1alpha1.BMCSecretPendingPasswordKey, next)
		err := env.Client.Update(ctx(), sec)
		return err == nil, fmt.Sprint(err)
	})
	b.SetCredentials(user, next) // what the lost pass had sent
	testenv.Eventually(t, 20*time.Second, "the new password committed", func() (bool, string) {
		sec := bmcSecret(t, "rotcut")
		pass, _ := sec.Value(metalv1alpha1.BMCSecretPasswordKey)
		_, pending := sec.Value(metalv1alpha1.BMCSecretPendingPasswordKey)
		return pass == next && !pending, fmt.Sprintf("password committed %v, pending %v", pass == next, pending)
	})
	if _, onBMC := b.Credentials(); onBMC != next {
		t.Fatal("the BMC's password changed again")
	}
	waitEvent(t, "rotcut", metalv1alpha1.ReasonRotated)
}

// Nothing is sent for a rotation whose BMCSecret is immutable: a Warning says why.
func TestRotationOfAnImmutableSecretIsRefused(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	name := fleet.RegisterBMC(t, b, "rotimm")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	yes := true
	testenv.Eventually(t, 5*time.Second, "secret made immutable", func() (bool, string) {
		sec := bmcSecret(t, "rotimm")
		sec.Immutable = &yes
		err := env.Client.Update(ctx(), sec)
		return err == nil, fmt.Sprint(err)
	})
	_, before := b.Credentials()
	start := time.Now()
	annotateBMC(t, "rotimm", metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationRotateCredentials)
	waitBMCOperationDone(t, "rotimm", 10*time.Second)
	waitEvent(t, "rotimm", metalv1alpha1.ReasonRotationImmutable)
	if _, after := b.Credentials(); after != before {
		t.Fatal("the BMC's password changed")
	}
	if recs := suite.Since(fleet.BoxActions(b), start); len(recs) != 0 {
		t.Fatalf("BMC actions %v", bootActions(recs))
	}
}

// A rotation asked while the BMC's address reaches another BMC that takes the same factory
// credentials: the new password is written aside, and nothing is sent to the stranger; once the
// address is the BMC's again, the rotation completes there.
func TestRotationNeverReachesAnotherBMC(t *testing.T) {
	t.Parallel()
	own, stranger := bmcAtAStrangersAddress(t, "rotaddr")
	user, pass := own.Credentials()
	start := time.Now()
	own.AnswerAs(stranger)
	t.Cleanup(func() { own.AnswerAs(nil) })
	annotateBMC(t, "rotaddr", metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationRotateCredentials)
	waitBMCOperationDone(t, "rotaddr", 10*time.Second)
	testenv.Eventually(t, 15*time.Second, "the BMC reports the other machine", func() (bool, string) {
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
	waitEvent(t, "rotaddr", metalv1alpha1.ReasonRotated)
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
	own, stranger = fleet.Take(t), fleet.Take(t)
	server := fleet.RegisterBMC(t, own, name)
	suite.WaitServerState(t, env, server, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	stranger.SetCredentials(own.Credentials())
	return own, stranger
}

// twoBMCsOnOneSecret registers two BMCs that log in with one BMCSecret (a fleet's factory
// password): the second's BMC object names the first's Secret.
func twoBMCsOnOneSecret(t *testing.T, name string) (first, second *redfish.BMC) {
	t.Helper()
	first, second = fleet.Take(t), fleet.Take(t)
	second.SetCredentials(first.Credentials())
	s1 := fleet.RegisterBMC(t, first, name)
	obj := suite.BMCObject(second, name+"-b")
	obj.Spec.BMCSecretRef.Name = name
	if err := env.Client.Create(ctx(), obj); err != nil {
		t.Fatal(err)
	}
	suite.WaitServerState(t, env, s1, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	suite.WaitServerState(t, env, bmccontroller.ServerName(name+"-b", second.SystemIDs()[0]), metalv1alpha1.ServerStateAvailable, 30*time.Second)
	return first, second
}

func waitConnected(t *testing.T, name string) {
	t.Helper()
	testenv.Eventually(t, 15*time.Second, name+" connected", func() (bool, string) {
		c := apimeta.FindStatusCondition(getBMC(t, name).Status.Conditions, metalv1alpha1.ConditionReady)
		return c != nil && c.Status == "True", fmt.Sprint(c)
	})
}

// A rotation is of a BMCSecret, not of one BMC: asked on one of two BMCs that share their
// Secret, it is refused with a message saying how to split the Secret, and neither BMC's
// account is touched; both stay connected with the Secret as it was.
func TestRotationOfASharedSecretIsRefused(t *testing.T) {
	t.Parallel()
	first, second := twoBMCsOnOneSecret(t, "rotsh")
	_, pass := first.Credentials()
	start := time.Now()
	annotateBMC(t, "rotsh", metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationRotateCredentials)
	waitBMCOperationDone(t, "rotsh", 10*time.Second)
	waitEvent(t, "rotsh", metalv1alpha1.ReasonRotationShared)
	for _, b := range []*redfish.BMC{first, second} {
		if got := accountActions(b, start); len(got) != 0 {
			t.Fatalf("account actions sent: %v", got)
		}
		if _, p := b.Credentials(); p != pass {
			t.Fatal("a BMC's password changed")
		}
	}
	sec := bmcSecret(t, "rotsh")
	if p, _ := sec.Value(metalv1alpha1.BMCSecretPasswordKey); p != pass {
		t.Fatal("the shared Secret's password changed")
	}
	if _, pending := sec.Value(metalv1alpha1.BMCSecretPendingPasswordKey); pending {
		t.Fatal("a pending password was written into the shared Secret")
	}
	waitConnected(t, "rotsh")
	waitConnected(t, "rotsh-b")
}

// A pending password is the rotation of the BMC that asked for it: another BMC that names the
// same Secret (registered while the rotation was under way) never sends it, and keeps
// connecting with the password the Secret has.
func TestAPendingRotationIsOnlyItsOwnBMCs(t *testing.T) {
	t.Parallel()
	first, second := twoBMCsOnOneSecret(t, "rotown")
	_, pass := first.Credentials()
	start := time.Now()
	testenv.Eventually(t, 5*time.Second, "pending password written for the first BMC", func() (bool, string) {
		sec := bmcSecret(t, "rotown")
		sec.SetValue(metalv1alpha1.BMCSecretPendingPasswordKey, "Not-for-you.2026")
		lifecycle.SetAnnotation(sec, bmccontroller.RotationForAnnotation, "rotown")
		err := env.Client.Update(ctx(), sec)
		return err == nil, fmt.Sprint(err)
	})
	annotateBMC(t, "rotown-b", "test/poke", start.Format(time.RFC3339Nano)) // a pass of the other BMC
	waitConnected(t, "rotown-b")
	testenv.Eventually(t, 15*time.Second, "the rotation withdrawn, the Secret as it was", func() (bool, string) {
		sec := bmcSecret(t, "rotown")
		p, _ := sec.Value(metalv1alpha1.BMCSecretPasswordKey)
		_, pending := sec.Value(metalv1alpha1.BMCSecretPendingPasswordKey)
		return p == pass && !pending, fmt.Sprintf("password kept %v, pending %v", p == pass, pending)
	})
	if got := accountActions(second, start); len(got) != 0 {
		t.Fatalf("the other BMC was sent %v", got)
	}
	if got := accountActions(first, start); len(got) != 0 {
		t.Fatalf("the first BMC was sent %v although its Secret is shared", got)
	}
	waitConnected(t, "rotown")
}

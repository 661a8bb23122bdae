package metal

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

func accountActions(b *redfish.BMC, start time.Time) []string {
	var out []string
	for _, r := range since(records(b), start) {
		switch r.Action {
		case redfish.ActionAccountCreate, redfish.ActionAccountPassword, redfish.ActionAccountDelete:
			out = append(out, r.Action+":"+r.Account)
		}
	}
	return out
}

func hasAccount(b *redfish.BMC, user string) bool {
	for _, a := range b.Accounts() {
		if a.UserName == user && a.Enabled {
			return true
		}
	}
	return false
}

// A BMCUser's account exists on its BMC with its BMCSecret's password and its role; a changed
// password is set again, an unchanged BMCUser sends nothing more; a deleted BMCUser takes its
// account off the BMC.
func TestBMCUserKeepsItsAccount(t *testing.T) {
	b := takeBMC(t)
	registerBMC(t, b, "bmcuser")
	start := time.Now()
	sec := &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: "bmcuser-ops"},
		StringData: map[string]string{"username": "ops", "password": "First-pass1"}}
	if err := env.Client.Create(ctx(), sec); err != nil {
		t.Fatal(err)
	}
	u := &metalv1alpha1.BMCUser{ObjectMeta: metav1.ObjectMeta{Name: "ops"}, Spec: metalv1alpha1.BMCUserSpec{
		UserName: "ops", RoleID: "Operator", BMCRef: &corev1.LocalObjectReference{Name: "bmcuser"},
		BMCSecretRef: &corev1.LocalObjectReference{Name: "bmcuser-ops"}}}
	if err := env.Client.Create(ctx(), u); err != nil {
		t.Fatal(err)
	}
	ready := func() {
		t.Helper()
		eventually(t, 20*time.Second, "BMCUser Ready", func() (bool, string) {
			got := &metalv1alpha1.BMCUser{}
			if err := env.Client.Get(ctx(), client.ObjectKey{Name: "ops"}, got); err != nil {
				return false, err.Error()
			}
			c := apimeta.FindStatusCondition(got.Status.Conditions, metalv1alpha1.ConditionReady)
			if c == nil {
				return false, "no condition"
			}
			return c.Status == metav1.ConditionTrue && got.Annotations[AccountAppliedAnnotation] != "", c.Reason + ": " + c.Message
		})
	}
	ready()
	if !b.CanLogin("ops", "First-pass1") {
		t.Fatal("the account does not open the BMC with its BMCSecret's password")
	}
	// Another pass (a label) sends nothing.
	eventually(t, 5*time.Second, "label", func() (bool, string) {
		got := &metalv1alpha1.BMCUser{}
		_ = env.Client.Get(ctx(), client.ObjectKey{Name: "ops"}, got)
		got.Labels = map[string]string{"touched": "yes"}
		err := env.Client.Update(ctx(), got)
		return err == nil, fmt.Sprint(err)
	})
	ready()

	eventually(t, 5*time.Second, "new password", func() (bool, string) {
		s := bmcSecret(t, "bmcuser-ops")
		s.StringData["password"] = "Second-pass2"
		err := env.Client.Update(ctx(), s)
		return err == nil, fmt.Sprint(err)
	})
	eventually(t, 20*time.Second, "new password on the BMC", func() (bool, string) {
		return b.CanLogin("ops", "Second-pass2"), fmt.Sprint(accountActions(b, start))
	})
	if got := fmt.Sprint(accountActions(b, start)); got != "[AccountCreate:ops AccountPassword:ops]" {
		t.Errorf("account actions %s", got)
	}
	if err := env.Client.Delete(ctx(), u); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "BMCUser gone", func() (bool, string) {
		err := env.Client.Get(ctx(), client.ObjectKey{Name: "ops"}, &metalv1alpha1.BMCUser{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if hasAccount(b, "ops") {
		t.Error("the account outlived its BMCUser")
	}
	if user, _ := b.Credentials(); !hasAccount(b, user) {
		t.Error("the BMC's own account was touched")
	}
}

// A BMCUser without a BMCSecret gets a generated password in a BMCSecret of its own, rotated
// every rotationPeriod: written aside first, then set, then committed.
func TestBMCUserGeneratedAndRotatedPassword(t *testing.T) {
	b := takeBMC(t)
	registerBMC(t, b, "bmcrot")
	u := &metalv1alpha1.BMCUser{ObjectMeta: metav1.ObjectMeta{Name: "rot"}, Spec: metalv1alpha1.BMCUserSpec{
		UserName: "auto", RoleID: "ReadOnly", BMCRef: &corev1.LocalObjectReference{Name: "bmcrot"},
		RotationPeriod: &metav1.Duration{Duration: 2 * time.Second}}}
	if err := env.Client.Create(ctx(), u); err != nil {
		t.Fatal(err)
	}
	password := func() string {
		s := &metalv1alpha1.BMCSecret{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: "bmcuser-rot"}, s); err != nil {
			return ""
		}
		v, _ := s.Value(metalv1alpha1.BMCSecretPasswordKey)
		return v
	}
	var first string
	eventually(t, 20*time.Second, "generated password on the BMC", func() (bool, string) {
		first = password()
		return first != "" && b.CanLogin("auto", first), "password " + fmt.Sprint(first != "")
	})
	eventually(t, 20*time.Second, "password rotated", func() (bool, string) {
		p := password()
		return p != "" && p != first && b.CanLogin("auto", p), "same password"
	})
	if b.CanLogin("auto", first) {
		t.Error("the rotated-out password still opens the BMC")
	}
	waitEvent(t, "rot", reasonPasswordRotated)
	if err := env.Client.Delete(ctx(), u); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "account removed", func() (bool, string) { return !hasAccount(b, "auto"), "" })
}

// A BMCUser whose BMC's address reaches another BMC (same factory credentials) creates no
// account there: the condition says why, and the account goes on the BMC once it answers again.
func TestBMCUserNeverReachesAnotherBMC(t *testing.T) {
	own, stranger := bmcAtAStrangersAddress(t, "bmcuaddr")
	start := time.Now()
	own.AnswerAs(stranger)
	t.Cleanup(func() { own.AnswerAs(nil) })
	u := &metalv1alpha1.BMCUser{ObjectMeta: metav1.ObjectMeta{Name: "addr"}, Spec: metalv1alpha1.BMCUserSpec{
		UserName: "guest", BMCRef: &corev1.LocalObjectReference{Name: "bmcuaddr"}}}
	if err := env.Client.Create(ctx(), u); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "refused", func() (bool, string) {
		got := &metalv1alpha1.BMCUser{}
		_ = env.Client.Get(ctx(), client.ObjectKey{Name: "addr"}, got)
		c := apimeta.FindStatusCondition(got.Status.Conditions, metalv1alpha1.ConditionReady)
		return c != nil && c.Reason == metalv1alpha1.ReasonIdentityMismatch, fmt.Sprint(c)
	})
	if got := accountActions(stranger, start); len(got) != 0 || hasAccount(stranger, "guest") {
		t.Fatalf("sent to the other BMC: %v", got)
	}
	own.AnswerAs(nil)
	eventually(t, 30*time.Second, "account on its own BMC", func() (bool, string) { return hasAccount(own, "guest"), "" })
	if err := env.Client.Delete(ctx(), u); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "account removed", func() (bool, string) { return !hasAccount(own, "guest"), "" })
}

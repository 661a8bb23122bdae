package metal

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcuser"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

func accountActions(b *redfish.BMC, start time.Time) []string {
	var out []string
	for _, r := range suite.Since(fleet.BoxActions(b), start) {
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
	t.Parallel()
	b := fleet.Take(t)
	fleet.RegisterBMC(t, b, "bmcuser")
	start := time.Now()
	u := createBMCUser(t, "ops", "bmcuser", "bmcuser-ops", "First-pass1")
	ready := func() {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, "BMCUser Ready", func() (bool, string) { return bmcUserReady("ops") })
	}
	ready()
	if !b.CanLogin("ops", "First-pass1") {
		t.Fatal("the account does not open the BMC with its BMCSecret's password")
	}
	// Another pass (a label) sends nothing.
	testenv.Eventually(t, 5*time.Second, "label", func() (bool, string) {
		got := &metalv1alpha1.BMCUser{}
		_ = env.Client.Get(ctx(), client.ObjectKey{Name: "ops"}, got)
		got.Labels = map[string]string{"touched": "yes"}
		err := env.Client.Update(ctx(), got)
		return err == nil, fmt.Sprint(err)
	})
	ready()

	testenv.Eventually(t, 5*time.Second, "new password", func() (bool, string) {
		s := bmcSecret(t, "bmcuser-ops")
		s.StringData["password"] = "Second-pass2"
		err := env.Client.Update(ctx(), s)
		return err == nil, fmt.Sprint(err)
	})
	testenv.Eventually(t, 20*time.Second, "new password on the BMC", func() (bool, string) {
		return b.CanLogin("ops", "Second-pass2"), fmt.Sprint(accountActions(b, start))
	})
	if got := fmt.Sprint(accountActions(b, start)); got != "[AccountCreate:ops AccountPassword:ops]" {
		t.Errorf("account actions %s", got)
	}
	if err := env.Client.Delete(ctx(), u); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "BMCUser gone", func() (bool, string) {
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

// A BMCUser's pass makes several requests in turn: on a BMC that answers each in a quarter of
// the request timeout, but not a whole pass's within one, the account is still made (the pass
// timeout bounds the pass, as it does the BMC's and the Server's passes).
func TestBMCUserOnASlowBMC(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	fleet.RegisterBMC(t, b, "bmcuser-slow")
	b.SetFaults(redfish.Faults{Latency: redfish.Duration(testOpts.BMCRequestTimeout / 4)})
	t.Cleanup(func() { b.SetFaults(redfish.Faults{}) })
	createBMCUser(t, "slowops", "bmcuser-slow", "bmcuser-slow-ops", "Slow-pass1")
	testenv.Eventually(t, 4*testOpts.BMCPassTimeout, "the account on the slow BMC", func() (bool, string) {
		if ok, why := bmcUserReady("slowops"); !ok {
			return false, why
		}
		return b.CanLogin("slowops", "Slow-pass1"), "the account does not open the BMC"
	})
	deleteBMCUser(t, "slowops")
	if hasAccount(b, "slowops") {
		t.Error("the account outlived its BMCUser")
	}
}

// A BMCUser without a BMCSecret gets a generated password in a BMCSecret of its own, rotated
// every rotationPeriod: written aside first, then set, then committed.
// Serial: beside the parallel tests its rotation once did not come within the wait, for a
// reason not yet found.
func TestBMCUserGeneratedAndRotatedPassword(t *testing.T) {
	b := fleet.Take(t)
	fleet.RegisterBMC(t, b, "bmcrot")
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
	testenv.Eventually(t, 20*time.Second, "generated password on the BMC", func() (bool, string) {
		first = password()
		return first != "" && b.CanLogin("auto", first), "password " + fmt.Sprint(first != "")
	})
	testenv.Eventually(t, 20*time.Second, "password rotated", func() (bool, string) {
		p := password()
		return p != "" && p != first && b.CanLogin("auto", p), "same password"
	})
	if b.CanLogin("auto", first) {
		t.Error("the rotated-out password still opens the BMC")
	}
	waitEvent(t, "rot", metalv1alpha1.ReasonPasswordRotated)
	if err := env.Client.Delete(ctx(), u); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "account removed", func() (bool, string) { return !hasAccount(b, "auto"), "" })
}

// A BMCUser whose BMC's address reaches another BMC (same factory credentials) creates no
// account there: the condition says why, and the account goes on the BMC once it answers again.
func TestBMCUserNeverReachesAnotherBMC(t *testing.T) {
	t.Parallel()
	own, stranger := bmcAtAStrangersAddress(t, "bmcuaddr")
	start := time.Now()
	own.AnswerAs(stranger)
	t.Cleanup(func() { own.AnswerAs(nil) })
	u := &metalv1alpha1.BMCUser{ObjectMeta: metav1.ObjectMeta{Name: "addr"}, Spec: metalv1alpha1.BMCUserSpec{
		UserName: "guest", BMCRef: &corev1.LocalObjectReference{Name: "bmcuaddr"}}}
	if err := env.Client.Create(ctx(), u); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "refused", func() (bool, string) {
		got := &metalv1alpha1.BMCUser{}
		_ = env.Client.Get(ctx(), client.ObjectKey{Name: "addr"}, got)
		c := apimeta.FindStatusCondition(got.Status.Conditions, metalv1alpha1.ConditionReady)
		return c != nil && c.Reason == metalv1alpha1.ReasonIdentityMismatch, fmt.Sprint(c)
	})
	if got := accountActions(stranger, start); len(got) != 0 || hasAccount(stranger, "guest") {
		t.Fatalf("sent to the other BMC: %v", got)
	}
	own.AnswerAs(nil)
	testenv.Eventually(t, 30*time.Second, "account on its own BMC", func() (bool, string) { return hasAccount(own, "guest"), "" })
	if err := env.Client.Delete(ctx(), u); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "account removed", func() (bool, string) { return !hasAccount(own, "guest"), "" })
}

// present reports whether user has an account on b at all, enabled or not.
// createBMCUser creates BMCUser name for the account of that name on BMC bmcName, its password
// in a BMCSecret of its own (secret).
func createBMCUser(t *testing.T, name, bmcName, secret, password string) *metalv1alpha1.BMCUser {
	t.Helper()
	sec := &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: secret},
		StringData: map[string]string{"username": name, "password": password}}
	if err := env.Client.Create(ctx(), sec); err != nil {
		t.Fatal(err)
	}
	u := &metalv1alpha1.BMCUser{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: metalv1alpha1.BMCUserSpec{
		UserName: name, RoleID: "Operator", BMCRef: &corev1.LocalObjectReference{Name: bmcName},
		BMCSecretRef: &corev1.LocalObjectReference{Name: secret}}}
	if err := env.Client.Create(ctx(), u); err != nil {
		t.Fatal(err)
	}
	return u
}

// bmcUserReady reports whether BMCUser name is Ready with its account applied, and if not, why.
func bmcUserReady(name string) (bool, string) {
	got := &metalv1alpha1.BMCUser{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, got); err != nil {
		return false, err.Error()
	}
	c := apimeta.FindStatusCondition(got.Status.Conditions, metalv1alpha1.ConditionReady)
	if c == nil {
		return false, "no condition"
	}
	return c.Status == metav1.ConditionTrue && got.Annotations[bmcuser.AccountAppliedAnnotation] != "", c.Reason + ": " + c.Message
}

func present(b *redfish.BMC, user string) bool {
	for _, a := range b.Accounts() {
		if a.UserName == user {
			return true
		}
	}
	return false
}

// editBMCUser changes a BMCUser's spec, retrying on conflicts with the controller's writes.
func editBMCUser(t *testing.T, name string, edit func(*metalv1alpha1.BMCUserSpec)) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "edit BMCUser "+name, func() (bool, string) {
		u := &metalv1alpha1.BMCUser{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, u); err != nil {
			return false, err.Error()
		}
		edit(&u.Spec)
		err := env.Client.Update(ctx(), u)
		return err == nil, fmt.Sprint(err)
	})
}

func deleteBMCUser(t *testing.T, name string) {
	t.Helper()
	if err := env.Client.Delete(ctx(), &metalv1alpha1.BMCUser{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "BMCUser "+name+" gone", func() (bool, string) {
		err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, &metalv1alpha1.BMCUser{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// A renamed account goes from the BMC before the new name is created; the generated BMCSecret
// follows the new name, and deleting the BMCUser leaves neither.
func TestBMCUserRenameRemovesTheOldAccount(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	fleet.RegisterBMC(t, b, "bmcren")
	start := time.Now()
	u := &metalv1alpha1.BMCUser{ObjectMeta: metav1.ObjectMeta{Name: "ren"}, Spec: metalv1alpha1.BMCUserSpec{
		UserName: "old-name", BMCRef: &corev1.LocalObjectReference{Name: "bmcren"}}}
	if err := env.Client.Create(ctx(), u); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "old-name on the BMC", func() (bool, string) { return hasAccount(b, "old-name"), "" })
	editBMCUser(t, "ren", func(s *metalv1alpha1.BMCUserSpec) { s.UserName = "new-name" })
	testenv.Eventually(t, 30*time.Second, "renamed on the BMC", func() (bool, string) {
		return hasAccount(b, "new-name") && !present(b, "old-name"), fmt.Sprint(b.Accounts())
	})
	if got, want := fmt.Sprint(accountActions(b, start)), "[AccountCreate:old-name AccountDelete:old-name AccountCreate:new-name]"; got != want {
		t.Errorf("account actions %s, want %s", got, want)
	}
	testenv.Eventually(t, 10*time.Second, "generated BMCSecret names the new account", func() (bool, string) {
		s := bmcSecret(t, "bmcuser-ren")
		user, _ := s.Value(metalv1alpha1.BMCSecretUsernameKey)
		pw, _ := s.Value(metalv1alpha1.BMCSecretPasswordKey)
		return user == "new-name" && b.CanLogin(user, pw), "username " + user
	})
	deleteBMCUser(t, "ren")
	if present(b, "old-name") || present(b, "new-name") {
		t.Errorf("accounts outlived their BMCUser: %v", b.Accounts())
	}
}

// A BMCUser moved to another BMC takes its account off the old one first; deleting it then
// removes the account on the new one.
func TestBMCUserMovedRemovesTheAccountFromTheOldBMC(t *testing.T) {
	t.Parallel()
	from, to := fleet.Take(t), fleet.Take(t)
	fleet.RegisterBMC(t, from, "bmcmovefrom")
	fleet.RegisterBMC(t, to, "bmcmoveto")
	u := &metalv1alpha1.BMCUser{ObjectMeta: metav1.ObjectMeta{Name: "mover"}, Spec: metalv1alpha1.BMCUserSpec{
		UserName: "mover", BMCRef: &corev1.LocalObjectReference{Name: "bmcmovefrom"}}}
	if err := env.Client.Create(ctx(), u); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "account on the first BMC", func() (bool, string) { return hasAccount(from, "mover"), "" })
	editBMCUser(t, "mover", func(s *metalv1alpha1.BMCUserSpec) { s.BMCRef.Name = "bmcmoveto" })
	testenv.Eventually(t, 30*time.Second, "account moved", func() (bool, string) {
		return hasAccount(to, "mover") && !present(from, "mover"), fmt.Sprintf("from %v, to %v", from.Accounts(), to.Accounts())
	})
	deleteBMCUser(t, "mover")
	if present(to, "mover") || present(from, "mover") {
		t.Errorf("accounts outlived their BMCUser: %v %v", from.Accounts(), to.Accounts())
	}
}

// Deletion removes every account the BMCUser made, not only the one its spec names now: an
// account left on a BMC that cannot be proven (its address answers as another BMC) holds the
// deletion until it is removed, and the other BMC is never sent anything.
func TestBMCUserDeletionRemovesEveryAccountItMade(t *testing.T) {
	t.Parallel()
	own, stranger := bmcAtAStrangersAddress(t, "bmcdelown")
	other := fleet.Take(t)
	fleet.RegisterBMC(t, other, "bmcdelother")
	start := time.Now()
	u := &metalv1alpha1.BMCUser{ObjectMeta: metav1.ObjectMeta{Name: "leaver"}, Spec: metalv1alpha1.BMCUserSpec{
		UserName: "leaver", BMCRef: &corev1.LocalObjectReference{Name: "bmcdelown"}}}
	if err := env.Client.Create(ctx(), u); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "account on its BMC", func() (bool, string) { return hasAccount(own, "leaver"), "" })
	own.AnswerAs(stranger)
	t.Cleanup(func() { own.AnswerAs(nil) })
	editBMCUser(t, "leaver", func(s *metalv1alpha1.BMCUserSpec) { s.BMCRef.Name = "bmcdelother" })
	refused := func(what string) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, what, func() (bool, string) {
			got := &metalv1alpha1.BMCUser{}
			_ = env.Client.Get(ctx(), client.ObjectKey{Name: "leaver"}, got)
			c := apimeta.FindStatusCondition(got.Status.Conditions, metalv1alpha1.ConditionReady)
			return c != nil && c.ObservedGeneration == got.Generation && c.Reason == metalv1alpha1.ReasonIdentityMismatch &&
				strings.Contains(c.Message, "removing account leaver from BMC bmcdelown"), fmt.Sprint(c)
		})
	}
	refused("old account's removal refused")
	if present(other, "leaver") {
		t.Error("the new account was made before the old one was removed")
	}
	if err := env.Client.Delete(ctx(), u); err != nil {
		t.Fatal(err)
	}
	got := &metalv1alpha1.BMCUser{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Name: "leaver"}, got); err != nil || got.DeletionTimestamp.IsZero() {
		t.Fatalf("deleted BMCUser: %v", err)
	}
	refused("deletion held by the unremoved account")
	if err := env.Client.Get(ctx(), client.ObjectKey{Name: "leaver"}, got); err != nil {
		t.Fatalf("the BMCUser went with its account still on BMC bmcdelown: %v", err)
	}
	own.AnswerAs(nil)
	testenv.Eventually(t, 30*time.Second, "BMCUser gone", func() (bool, string) {
		err := env.Client.Get(ctx(), client.ObjectKey{Name: "leaver"}, &metalv1alpha1.BMCUser{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if present(own, "leaver") || present(other, "leaver") {
		t.Errorf("accounts outlived their BMCUser: %v %v", own.Accounts(), other.Accounts())
	}
	if got := accountActions(stranger, start); len(got) != 0 {
		t.Errorf("sent to the BMC answering at another's address: %v", got)
	}
}

// A password the BMC refuses is not repeated in the condition or an event, even when the BMC's
// message quotes it (as the Redfish base registry's PropertyValueFormatError does).
func TestBMCUserPasswordNeverReported(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	fleet.RegisterBMC(t, b, "bmcpwleak")
	const pw = "Xq7-pw" // shorter than the BMC's policy allows
	sec := &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: "bmcuser-leak"},
		StringData: map[string]string{"username": "leak", "password": pw}}
	if err := env.Client.Create(ctx(), sec); err != nil {
		t.Fatal(err)
	}
	u := &metalv1alpha1.BMCUser{ObjectMeta: metav1.ObjectMeta{Name: "leak"}, Spec: metalv1alpha1.BMCUserSpec{
		UserName: "leak", BMCRef: &corev1.LocalObjectReference{Name: "bmcpwleak"},
		BMCSecretRef: &corev1.LocalObjectReference{Name: "bmcuser-leak"}}}
	if err := env.Client.Create(ctx(), u); err != nil {
		t.Fatal(err)
	}
	var msg string
	testenv.Eventually(t, 30*time.Second, "refused by the BMC", func() (bool, string) {
		got := &metalv1alpha1.BMCUser{}
		_ = env.Client.Get(ctx(), client.ObjectKey{Name: "leak"}, got)
		c := apimeta.FindStatusCondition(got.Status.Conditions, metalv1alpha1.ConditionReady)
		if c == nil {
			return false, "no condition"
		}
		msg = c.Message
		return c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "set account leak"), c.Reason + ": " + c.Message
	})
	if strings.Contains(msg, pw) {
		t.Errorf("the condition repeats the password: %s", msg)
	}
	list := &eventsv1.EventList{}
	if err := env.Client.List(ctx(), list); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if strings.Contains(e.Note, pw) {
			t.Errorf("event %s/%s repeats the password", e.Regarding.Name, e.Reason)
		}
	}
	deleteBMCUser(t, "leak")
}

package firmware

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/testenv"
)

// secretVar is a variable read from key of Secret ns/name.
func secretVar(key, ns, name, secretKey string) systemv1alpha1.Variable {
	return systemv1alpha1.Variable{Key: key, ValueFrom: systemv1alpha1.VariableSource{
		SecretKeyRef: &systemv1alpha1.KeyRef{Namespace: ns, Name: name, Key: secretKey}}}
}

func settingsWith(name, server, version string, settings map[string]string, vars ...systemv1alpha1.Variable) *systemv1alpha1.BIOSSettings {
	return &systemv1alpha1.BIOSSettings{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: systemv1alpha1.BIOSSettingsSpec{ServerRef: &corev1.LocalObjectReference{Name: server},
			BIOSSettingsTemplate: systemv1alpha1.BIOSSettingsTemplate{Version: version,
				SettingsFlow: []systemv1alpha1.SettingsFlowItem{{Name: "step", Priority: 1, Settings: settings}},
				Variables:    vars}},
	}
}

func mustCreate(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(ctx(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// leaks says where value shows: the objects (all of them, annotations and status included),
// every Event in the cluster, the manager's log.
func leaks(t *testing.T, value string, objs ...client.Object) []string {
	t.Helper()
	var where []string
	for _, o := range objs {
		if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(o)
		if strings.Contains(string(b), value) {
			where = append(where, fmt.Sprintf("%T %s: %s", o, o.GetName(), b))
		}
	}
	events := &eventsv1.EventList{}
	if err := env.Client.List(ctx(), events); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if b, _ := json.Marshal(e); strings.Contains(string(b), value) {
			where = append(where, fmt.Sprintf("event %s of %s: %s", e.Reason, e.Regarding.Name, e.Note))
		}
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, value) {
			where = append(where, "log: "+line)
		}
	}
	return where
}

// Issue 41, finding 5: a BIOSSettings value read from a Secret is quoted nowhere — not when it
// is not a number where the BIOS wants one, not when it never reads back (a BIOS password): no
// annotation, status, event or log line holds it.
func TestSettingsSecretValueShownNowhere(t *testing.T) {
	const value = "Xq7-leak-canary-41f5"
	mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bios-leak-canary"},
		StringData: map[string]string{"numa": value, "password": value}})
	names, bmcs := availableServers(t, "bioss-secret", 2)
	nanSys, pwSys := bmcs[0].Systems()[0], bmcs[1].Systems()[0]
	pwSys.SetBiosWriteOnly("SetupPassword")

	// NumaNodesPerSocket is a number; the Secret's value is not.
	nan := settingsWith("bioss-secret-nan", names[0], nanSys.BIOSVersion(), map[string]string{"NumaNodesPerSocket": "$(numa)"},
		secretVar("numa", "default", "bios-leak-canary", "numa"))
	// A password never reads back as what was set.
	pw := settingsWith("bioss-secret-pw", names[1], pwSys.BIOSVersion(), map[string]string{"SetupPassword": "$(pw)", "ProcVirtualization": "Disabled"},
		secretVar("pw", "default", "bios-leak-canary", "password"))
	mustCreate(t, nan)
	mustCreate(t, pw)

	s := waitSettingsState(t, nan.Name, systemv1alpha1.SettingsStateFailed, 60*time.Second)
	if c := meta.FindStatusCondition(s.Status.Conditions, systemv1alpha1.ConditionApplied); c == nil || !strings.Contains(c.Message, "Secret default/bios-leak-canary") {
		t.Errorf("the failure does not say which Secret's value is wrong: %+v", c)
	}
	testenv.Eventually(t, 150*time.Second, "the password's settings ended", func() (bool, string) {
		got := &systemv1alpha1.BIOSSettings{}
		if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(pw), got); err != nil {
			return false, err.Error()
		}
		return got.Status.State == systemv1alpha1.SettingsStateApplied || got.Status.State == systemv1alpha1.SettingsStateFailed,
			fmt.Sprintf("%s %v", got.Status.State, got.Status.Conditions)
	})
	if where := leaks(t, value, nan, pw); len(where) > 0 {
		t.Errorf("the Secret's value shows in:\n%s", strings.Join(where, "\n"))
	}
	// The password was set, and counted as in effect although it reads back as nothing.
	s = waitSettingsState(t, pw.Name, systemv1alpha1.SettingsStateApplied, time.Second)
	if got := pwSys.BiosAttributes()["SetupPassword"]; got != value {
		t.Errorf("SetupPassword in effect is not the Secret's value")
	}
	if ev := eventsOf(pw.Name); strings.Contains(ev, "RebootAgain") {
		t.Errorf("the password's step was restarted for again: %s", ev)
	}
}

// Issue 41, finding 5: a secretKeyRef names a Secret outside the operator's firmware Secret
// namespace: the settings say so in their condition and an event, and nothing is read or sent.
func TestSettingsSecretRefOutsideNamespaceRefused(t *testing.T) {
	mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fw-elsewhere"}})
	mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fw-elsewhere", Name: "someone-elses"},
		StringData: map[string]string{"numa": "2"}})
	names, bmcs := availableServers(t, "bioss-secret-ns", 1)
	sys := bmcs[0].Systems()[0]
	s := settingsWith("bioss-secret-ns", names[0], sys.BIOSVersion(), map[string]string{"NumaNodesPerSocket": "$(numa)"},
		secretVar("numa", "fw-elsewhere", "someone-elses", "numa"))
	mustCreate(t, s)
	testenv.Eventually(t, 30*time.Second, "the settings refuse the Secret", func() (bool, string) {
		got := &systemv1alpha1.BIOSSettings{}
		if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(s), got); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(got.Status.Conditions, systemv1alpha1.ConditionApplied)
		return c != nil && c.Reason == systemv1alpha1.ReasonSecretRefNotAllowed && strings.Contains(c.Message, "fw-elsewhere"),
			fmt.Sprintf("%s %+v, record %s", got.Status.State, c, got.Annotations[record.Annotation])
	})
	testenv.Eventually(t, 10*time.Second, "a Warning event", func() (bool, string) {
		ev := eventsOf(s.Name)
		return strings.Contains(ev, systemv1alpha1.ReasonSecretRefNotAllowed), ev
	})
	for _, r := range fleet.RecordsOf(bmcs[0]) {
		if r.Action == redfish.ActionBiosSettings {
			t.Errorf("settings reached the BMC: %v", r.Settings)
		}
	}
}

// Issue 41, finding 5: an image's secretRef outside the operator's firmware Secret namespace is
// refused with a condition; no credentials and no update are sent.
func TestImageSecretRefOutsideNamespaceRefused(t *testing.T) {
	mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fw-elsewhere"}})
	mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fw-elsewhere", Name: "image-auth"},
		StringData: map[string]string{"username": "u", "password": "p"}})
	names, bmcs := availableServers(t, "biosv-secret-ns", 1)
	v := biosVersion("biosv-secret-ns", names[0], "9.9.9", "http://images.invalid/bios-9.9.9.bin")
	v.Spec.Image.SecretRef = &corev1.SecretReference{Namespace: "fw-elsewhere", Name: "image-auth"}
	mustCreate(t, v)
	testenv.Eventually(t, 60*time.Second, "the version refuses the Secret", func() (bool, string) {
		got := getVersion(v.Name)
		if got == nil {
			return false, "gone"
		}
		c := meta.FindStatusCondition(got.Status.Conditions, systemv1alpha1.ConditionUpgraded)
		return c != nil && c.Reason == systemv1alpha1.ReasonSecretRefNotAllowed && strings.Contains(c.Message, "fw-elsewhere"),
			fmt.Sprintf("%s %+v, record %s", got.Status.State, c, got.Annotations[record.Annotation])
	})
	if n := simpleUpdates(bmcs[0]); n != 0 {
		t.Errorf("%d SimpleUpdate(s) sent", n)
	}
}

package metal

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

func getBMC(t *testing.T, name string) *metalv1alpha1.BMC {
	t.Helper()
	b := &metalv1alpha1.BMC{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func annotateBMC(t *testing.T, name, key, value string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "annotate BMC "+name, func() (bool, string) {
		obj := &metalv1alpha1.BMC{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, obj); err != nil {
			return false, err.Error()
		}
		err := lifecycle.PatchMetadata(ctx(), env.Client, obj, func(o client.Object) {
			lifecycle.SetAnnotation(o, key, value)
		})
		return err == nil, fmt.Sprint(err)
	})
}

// waitBMCOperationDone waits until neither the operation annotation nor an intent is left.
func waitBMCOperationDone(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, "BMC operation done", func() (bool, string) {
		obj := getBMC(t, name)
		_, asked := obj.Annotations[metalv1alpha1.OperationAnnotation]
		_, pending := obj.Annotations[intent.Annotation]
		return !asked && !pending, fmt.Sprint(obj.Annotations)
	})
}

func managerResets(b *redfish.BMC, after time.Time) int {
	n := 0
	for _, r := range suite.Since(fleet.BoxActions(b), after) {
		if r.Action == redfish.ActionManagerReset {
			n++
		}
	}
	return n
}

// eventReasons lists the reasons of the events about one object, oldest first.
func eventReasons(t *testing.T, regarding string) []string {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := env.Client.List(ctx(), list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == regarding && strings.HasPrefix(e.Reason, "Operation") {
			out = append(out, e.Reason)
		}
	}
	return out
}

// graceful-restart-bmc asked while the BMC hangs (campaign seed 18) is not sent into the hang,
// where its outcome would be unknown and it would never be repeated: it stays owed while the
// BMC does not answer, and is carried out once, when it does.
func TestBMCResetAskedWhileBMCHangsIsIssuedOnceItAnswers(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	name := fleet.RegisterBMC(t, b, "bmchang")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	start := time.Now()
	b.SetFaults(redfish.Faults{Hang: true})
	annotateBMC(t, "bmchang", metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationGracefulRestartBMC)
	testenv.Eventually(t, 20*time.Second, "the hanging BMC reported not ready", func() (bool, string) {
		c := apimeta.FindStatusCondition(getBMC(t, "bmchang").Status.Conditions, metalv1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse, fmt.Sprint(c)
	})
	obj := getBMC(t, "bmchang")
	_, asked := obj.Annotations[metalv1alpha1.OperationAnnotation]
	i, pending := intent.Parse(obj.Annotations[intent.Annotation], func(op string) bool { return op == metalv1alpha1.OperationGracefulRestartBMC })
	if !asked && (!pending || i.Phase != intent.Owed) {
		t.Fatalf("while the BMC hangs the operation is neither asked nor owed: %v", obj.Annotations)
	}
	b.SetFaults(redfish.Faults{})
	waitBMCOperationDone(t, "bmchang", 30*time.Second)
	waitEvent(t, "bmchang", metalv1alpha1.ReasonOperation)
	if n := managerResets(b, start); n != 1 {
		t.Errorf("BMC resets after the hang healed: %d, want 1", n)
	}
	if got := eventReasons(t, "bmchang"); fmt.Sprint(got) != "[Operation]" {
		t.Errorf("operation events %v, want [Operation]", got)
	}
}

// A BMC reset left "issuing" by a manager that died (SIGKILL between the intent write and the
// reset's answer) is settled by the BMC's LastResetTime, compared with what it said before:
// moved, it was carried out and is not repeated; unchanged after the settle time, it never
// arrived and is issued once more; a BMC that reports none leaves it uncertain, not repeated.
func TestBMCResetLeftIssuingByACrashIsSettledByLastResetTime(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		reports     bool
		baseline    func(now time.Time) string // the LastResetTime before the issue; now is the BMC's
		wantResets  int
		wantReasons string
	}{
		{"reset never arrived", true, func(now time.Time) string { return now.UTC().Format(time.RFC3339) }, 1,
			"[OperationUncertain OperationFailed Operation]"},
		{"reset carried out", true, func(now time.Time) string { return now.Add(-time.Hour).UTC().Format(time.RFC3339) }, 0,
			"[OperationUncertain Operation]"},
		{"BMC reports no LastResetTime", false, func(time.Time) string { return "" }, 0,
			"[OperationUncertain]"},
	}
	for k, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := fleet.Take(t)
			b.SetReportsLastResetTime(tc.reports)
			bmcName := "bmccrash" + strconv.Itoa(k)
			name := fleet.RegisterBMC(t, b, bmcName)
			suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
			waitBMCReady(t, bmcName, "True/"+metalv1alpha1.ReasonConnected)
			if tc.reports && getBMC(t, bmcName).Status.LastResetTime == nil {
				t.Errorf("status.lastResetTime not reported")
			}
			start := time.Now()
			// What a manager killed while issuing leaves behind; this one never issued it.
			crashed := intent.Intent{Op: metalv1alpha1.OperationGracefulRestartBMC, Phase: intent.Issuing,
				At: start.Add(-time.Second), Sent: start, LastReset: tc.baseline(b.LastResetTime())}
			annotateBMC(t, bmcName, intent.Annotation, crashed.String())
			waitBMCOperationDone(t, bmcName, 30*time.Second)
			want := strings.Fields(strings.Trim(tc.wantReasons, "[]"))
			waitEvent(t, bmcName, want[len(want)-1])
			if n := managerResets(b, start); n != tc.wantResets {
				t.Errorf("BMC resets: %d, want %d", n, tc.wantResets)
			}
			if got := fmt.Sprint(eventReasons(t, bmcName)); got != tc.wantReasons {
				t.Errorf("operation events %s, want %s", got, tc.wantReasons)
			}
		})
	}
}

// A slow BMC, whose inspection takes most of the pass's deadline, still gets its reset: it has
// a request of its own instead of waiting for a pass in which the BMC answers faster, which a
// slow BMC never does.
func TestBMCResetOnASlowBMC(t *testing.T) {
	b := fleet.Take(t)
	name := fleet.RegisterBMC(t, b, "bmcslow")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	waitBMCReady(t, "bmcslow", "True/"+metalv1alpha1.ReasonConnected)
	// Each answer takes 15% of the request timeout: the inspection (the manager's chain of
	// four reads beside the systems') answers in time, with less than half the deadline left.
	b.SetFaults(redfish.Faults{Latency: redfish.Duration(testOpts.BMCRequestTimeout * 15 / 100)})
	defer b.ClearFaults()
	start := time.Now()
	annotateBMC(t, "bmcslow", metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationGracefulRestartBMC)
	waitBMCOperationDone(t, "bmcslow", 30*time.Second)
	waitEvent(t, "bmcslow", metalv1alpha1.ReasonOperation)
	if n := managerResets(b, start); n != 1 {
		t.Errorf("BMC resets: %d, want 1", n)
	}
}

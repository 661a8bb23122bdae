package metal

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcevents"
	"github.com/metalhub/metalhub/internal/controller/metal/health"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// deliverEvent posts a Redfish Event from the server's BMC to the suite's event receiver, as a
// subscribed BMC would, and returns when it was taken.
func deliverEvent(t *testing.T, s *metalv1alpha1.Server, origin string) {
	t.Helper()
	body := fmt.Sprintf(`{"@odata.type":"#Event.v1_7_0.Event","Id":"1","Name":"Event Array","Context":%q,
		"Events":[{"EventType":"Alert","EventId":"1","Severity":"Critical","Message":"x","MessageId":"ResourceEvent.1.0.ResourceErrorsDetected",
		"OriginOfCondition":{"@odata.id":%q}}]}`, bmcevents.SubscriptionContext(s.Spec.BMCRef.Name), origin)
	rec := httptest.NewRecorder()
	testOpts.HardwareEvents.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, bmcevents.EventsPath, strings.NewReader(body)))
	if rec.Code != http.StatusNoContent {
		t.Fatalf("event receiver: %d %s", rec.Code, rec.Body)
	}
}

// waitLogRead waits until the server's log was read after since.
func waitLogRead(t *testing.T, name string, since time.Time) {
	t.Helper()
	uid := suite.Server(env, name).UID
	testenv.Eventually(t, 3*testHealthPoll, "a read of "+name+"'s log", func() (bool, string) {
		at, owed := testOpts.HardwareEvents.LastRead(uid)
		return at.After(since) && !owed, fmt.Sprintf("last read %v", at)
	})
}

func hasFaultTaint(s *metalv1alpha1.Server) bool {
	return slices.ContainsFunc(s.Spec.Taints, func(t metalv1alpha1.Taint) bool { return t.Key == metalv1alpha1.HardwareFaultTaintKey })
}

func faultCondition(s *metalv1alpha1.Server) *metav1.Condition {
	return apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionHardwareFault)
}

// A critical event in the SEL of an unclaimed server whose BMC has no EventService: within one
// poll period it is a HardwareFault with a Warning event, the server is tainted and
// (TaintAndMaintenance, the suite's policy) its maintenance is opened, once. Cleared, it does
// not come back from the log.
func TestCriticalEventOnUnclaimedServer(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	b.SetFaults(redfish.Faults{NoEventService: true})
	t.Cleanup(b.ClearFaults)
	name := fleet.RegisterBMC(t, b, "sel")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	if c := suite.Server(env, name).Annotations[health.HardwareLogCursorAnnotation]; c == "" {
		t.Fatal("no log cursor recorded with the move to Available")
	}
	sys := systemOf(b)
	sys.InjectLogEntry(redfish.LogEntry{Severity: redfish.SeverityWarning, SensorType: "Temperature", Message: "Inlet temperature high"})
	e := sys.InjectLogEntry(redfish.LogEntry{Severity: redfish.SeverityCritical, SensorType: "Memory", Message: "Uncorrectable ECC error on DIMM A3"})
	start := time.Now()
	testenv.Eventually(t, 3*testHealthPoll+5*time.Second, "HardwareFault", func() (bool, string) {
		s := suite.Server(env, name)
		c := faultCondition(s)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "Memory: Uncorrectable ECC error on DIMM A3 (log entry "+e.ID) &&
			!strings.Contains(c.Message, "Inlet") && hasFaultTaint(s), fmt.Sprintf("condition %+v, taints %v", c, s.Spec.Taints)
	})
	t.Logf("critical event to condition: %v (poll period %v)", time.Since(start).Round(time.Millisecond), testHealthPoll)
	waitEvent(t, name, metalv1alpha1.ReasonCriticalEvent)
	maint := &metalv1alpha1.ServerMaintenance{}
	testenv.Eventually(t, 10*time.Second, "fault maintenance", func() (bool, string) {
		err := env.Client.Get(ctx(), client.ObjectKey{Namespace: testOpts.DiscoveryNamespace, Name: "hardware-fault-" + name}, maint)
		return err == nil, fmt.Sprint(err)
	})
	t.Cleanup(func() { _ = env.Client.Delete(ctx(), maint) })
	if maint.Spec.ServerRef == nil || maint.Spec.ServerRef.Name != name || maint.Spec.Policy != metalv1alpha1.ServerMaintenancePolicyOwnerApproval ||
		!strings.Contains(maint.Annotations[metalv1alpha1.MaintenanceReasonAnnotation], "DIMM A3") {
		t.Fatalf("maintenance %+v", maint)
	}
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateMaintenance, 20*time.Second)
	// A second fault, announced by the BMC's event: added to the record within seconds; the
	// maintenance is not opened twice.
	sys.InjectLogEntry(redfish.LogEntry{Severity: redfish.SeverityCritical, SensorType: "Power Supply / Converter", Message: "PSU 2 failure"})
	s := suite.Server(env, name)
	start = time.Now()
	deliverEvent(t, s, "/redfish/v1/Chassis/1/PowerSubsystem/PowerSupplies/2")
	testenv.Eventually(t, 10*time.Second, "second fault", func() (bool, string) {
		c := faultCondition(suite.Server(env, name))
		return c != nil && strings.Contains(c.Message, "DIMM A3") && strings.Contains(c.Message, "PSU 2 failure"), fmt.Sprintf("%+v", c)
	})
	list := &metalv1alpha1.ServerMaintenanceList{}
	if err := env.Client.List(ctx(), list); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range list.Items {
		if m.Spec.ServerRef != nil && m.Spec.ServerRef.Name == name {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d maintenances for the server, want 1", n)
	}
	t.Logf("event to condition: %v", time.Since(start).Round(time.Millisecond))

	// Repaired: the maintenance is finished and the fault cleared. It stays cleared.
	if err := env.Client.Delete(ctx(), maint); err != nil {
		t.Fatal(err)
	}
	annotate(t, name, metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationClearHardwareFault)
	testenv.Eventually(t, 20*time.Second, "fault cleared", func() (bool, string) {
		s := suite.Server(env, name)
		return faultCondition(s) == nil && !hasFaultTaint(s) && s.Annotations[metalv1alpha1.HardwareFaultAnnotation] == "" &&
			s.Annotations[metalv1alpha1.OperationAnnotation] == "", fmt.Sprintf("annotations %v, taints %v", s.Annotations, s.Spec.Taints)
	})
	waitEvent(t, name, metalv1alpha1.ReasonFaultCleared)
	read := time.Now()
	deliverEvent(t, s, "/redfish/v1/Systems/"+sys.ID())
	waitLogRead(t, name, read)
	if s := suite.Server(env, name); faultCondition(s) != nil || hasFaultTaint(s) {
		t.Fatalf("a cleared fault came back from the log: %v", s.Annotations[metalv1alpha1.HardwareFaultAnnotation])
	}
}

// A claimed server with a critical event gets the fault and the taint, no maintenance: the
// workload's owner decides.
func TestCriticalEventOnClaimedServer(t *testing.T) {
	t.Parallel()
	name, b, _ := claimedOn(t, "selcl")
	origin := "/redfish/v1/Systems/" + systemOf(b).ID() + "/Processors/GPU3"
	systemOf(b).InjectLogEntry(redfish.LogEntry{Severity: redfish.SeverityCritical, SensorType: "Add-in Card", Message: "GPU 3 fell off the bus", Origin: origin})
	deliverEvent(t, suite.Server(env, name), origin)
	testenv.Eventually(t, 10*time.Second, "HardwareFault and taint", func() (bool, string) {
		s := suite.Server(env, name)
		c := faultCondition(s)
		return c != nil && strings.Contains(c.Message, "GPU 3 fell off the bus") && hasFaultTaint(s), fmt.Sprintf("%+v", c)
	})
	// The pass that wrote the condition had the policy's say already; one more read to be sure.
	read := time.Now()
	deliverEvent(t, suite.Server(env, name), origin)
	waitLogRead(t, name, read)
	m := &metalv1alpha1.ServerMaintenance{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Namespace: testOpts.DiscoveryNamespace, Name: "hardware-fault-" + name}, m); err == nil {
		t.Fatal("a maintenance was opened for a claimed server")
	}
	s := suite.Server(env, name)
	if durableState(s) != string(metalv1alpha1.ServerStateReserved) || s.Status.PowerState != metalv1alpha1.PowerStateOn {
		t.Fatalf("the claimed server was disturbed: %s, %s", durableState(s), s.Status.PowerState)
	}
}

// Each BMC keeps exactly one subscription of ours to the receiver: made once, found again (not
// made twice) after a wiped status, a stale one of ours to an older URL replaced, another
// client's left alone.
func TestBMCEventSubscriptionKeptOnce(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	name := fleet.RegisterBMC(t, b, "subs")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	bmcName := suite.Server(env, name).Spec.BMCRef.Name
	ours := func() []redfish.Subscription {
		var out []redfish.Subscription
		for _, s := range b.Subscriptions() {
			if s.Context == bmcevents.SubscriptionContext(bmcName) {
				out = append(out, s)
			}
		}
		return out
	}
	getBMC := func() *metalv1alpha1.BMC {
		x := &metalv1alpha1.BMC{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: bmcName}, x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	testenv.Eventually(t, 30*time.Second, "subscribed", func() (bool, string) {
		link := getBMC().Status.EventsSubscriptionLink
		subs := ours()
		return link != "" && len(subs) == 1 && subs[0].Destination == testOpts.HardwareEventsURL && strings.HasSuffix(link, "/"+subs[0].ID),
			fmt.Sprintf("link %q, ours %+v", link, subs)
	})
	// Another client's subscription, and a stale one of ours to an old receiver URL.
	_, conn := suite.Connect(t, b)
	foreign, err := conn.Subscribe(ctx(), "http://127.0.0.1:1/elsewhere", "someone-else")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Subscribe(ctx(), "http://127.0.0.1:1/old-receiver", bmcevents.SubscriptionContext(bmcName)); err != nil {
		t.Fatal(err)
	}
	// A wiped status brings the BMC's next pass, which finds its subscription again.
	x := getBMC()
	x.Status = metalv1alpha1.BMCStatus{}
	if err := testenv.WriteStatus(ctx(), env.Client, x); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "one subscription of ours, found again", func() (bool, string) {
		link := getBMC().Status.EventsSubscriptionLink
		subs := ours()
		return link != "" && len(subs) == 1 && subs[0].Destination == testOpts.HardwareEventsURL, fmt.Sprintf("link %q, ours %+v", link, subs)
	})
	kept := false
	for _, s := range b.Subscriptions() {
		kept = kept || strings.HasSuffix(foreign, "/"+s.ID) && s.Context == "someone-else"
	}
	if !kept {
		t.Fatalf("another client's subscription was removed: %+v", b.Subscriptions())
	}
}

// A server whose log could not be read when it became Available (a BMC serving none then, or a
// server discovered before metalhub read logs): its first read takes the log as history — a
// critical entry already there is not raised — and later entries are news.
func TestFirstLogReadIsHistory(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	b.SetFaults(redfish.Faults{NoLogServices: true, NoEventService: true})
	t.Cleanup(b.ClearFaults)
	sys := systemOf(b)
	old := sys.InjectLogEntry(redfish.LogEntry{Severity: redfish.SeverityCritical, SensorType: "Fan", Message: "Fan 3 failed last year"})
	name := fleet.RegisterBMC(t, b, "selhist")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	if c, ok := suite.Server(env, name).Annotations[health.HardwareLogCursorAnnotation]; ok {
		t.Fatalf("a cursor %q without a log", c)
	}
	b.SetFaults(redfish.Faults{NoEventService: true})
	s := suite.Server(env, name)
	read := time.Now()
	deliverEvent(t, s, "/redfish/v1/Systems/"+sys.ID())
	testenv.Eventually(t, 3*testHealthPoll, "cursor recorded by the first read", func() (bool, string) {
		c := suite.Server(env, name).Annotations[health.HardwareLogCursorAnnotation]
		return c == old.ID, c
	})
	waitLogRead(t, name, read)
	read = time.Now()
	deliverEvent(t, s, "/redfish/v1/Systems/"+sys.ID())
	waitLogRead(t, name, read)
	if s := suite.Server(env, name); faultCondition(s) != nil || s.Annotations[metalv1alpha1.HardwareFaultAnnotation] != "" {
		t.Fatalf("history raised as a fault: %v", s.Annotations[metalv1alpha1.HardwareFaultAnnotation])
	}
	sys.InjectLogEntry(redfish.LogEntry{Severity: redfish.SeverityCritical, SensorType: "Fan", Message: "Fan 4 failed"})
	deliverEvent(t, s, "/redfish/v1/Systems/"+sys.ID())
	testenv.Eventually(t, 3*testHealthPoll, "the new fault", func() (bool, string) {
		c := faultCondition(suite.Server(env, name))
		return c != nil && strings.Contains(c.Message, "Fan 4 failed") && !strings.Contains(c.Message, "last year"), fmt.Sprintf("%+v", c)
	})
}

package metal

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/inventory"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// The inventory a discovery found (written here as the registry writes it: the record, then the
// drift annotation) survives a wiped status, its drift shows as a condition, rediscover runs a
// new discovery round on an Available server, and accept-inventory ends the drift.
func TestInventoryDriftRediscoverAndAccept(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	name := fleet.RegisterBMC(t, b, "drift")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	s := suite.Server(env, name)

	gpu := func(addr string) metalv1alpha1.GPU {
		return metalv1alpha1.GPU{PCIAddress: addr, VendorID: "10de", DeviceID: "20b2", Model: "A100", Driver: "nvidia"}
	}
	baseline := inventory.Hardware{GPUs: []metalv1alpha1.GPU{gpu("0000:41:00.0"), gpu("0000:42:00.0")},
		TotalSystemMemory: resource.NewQuantity(256<<30, resource.BinarySI)}
	now := inventory.Hardware{GPUs: baseline.GPUs[:1], TotalSystemMemory: baseline.TotalSystemMemory}
	rec, drift := inventory.Next(&inventory.Record{Baseline: baseline}, now, "r2")
	if drift == "" {
		t.Fatal("no drift to test with")
	}
	cm, err := inventory.ConfigMap(testOpts.DiscoveryNamespace, name, rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := controllerutil.SetOwnerReference(s, cm, env.Client.Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx(), cm); err != nil {
		t.Fatal(err)
	}
	annotate(t, name, metalv1alpha1.InventoryDriftAnnotation, drift)
	driftCondition := func(s *metalv1alpha1.Server) *metav1.Condition {
		return apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionInventoryDrift)
	}
	testenv.Eventually(t, 10*time.Second, "InventoryDrift condition", func() (bool, string) {
		c := driftCondition(suite.Server(env, name))
		return c != nil && c.Status == "True" && c.Reason == metalv1alpha1.ReasonHardwareMissing && c.Message == drift, fmt.Sprintf("%+v", c)
	})

	// A wiped status gets the condition back, and the probe's inventory (GPUs) from the record.
	suite.WipeStatus(t, env, name)
	testenv.Eventually(t, 15*time.Second, "status rebuilt with GPUs and drift", func() (bool, string) {
		s := suite.Server(env, name)
		c := driftCondition(s)
		return len(s.Status.GPUs) == 1 && s.Status.GPUs[0].PCIAddress == "0000:41:00.0" && c != nil && c.Status == "True",
			fmt.Sprintf("gpus %+v, condition %+v", s.Status.GPUs, c)
	})

	// Rediscover: back through Initial and Discovery (a PXE boot of a new round) to Available.
	start := time.Now()
	annotate(t, name, metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationRediscover)
	testenv.Eventually(t, 30*time.Second, "a discovery boot after rediscover", func() (bool, string) {
		for _, r := range suite.Since(fleet.BoxActions(b), start) {
			if r.Action == redfish.ActionBootOverride && r.Boot != nil && r.Boot.Target == "Pxe" {
				return true, ""
			}
		}
		return false, fmt.Sprint(suite.ResetTypes(suite.Since(fleet.BoxActions(b), start)))
	})
	testenv.Eventually(t, 60*time.Second, "Available again, operation done", func() (bool, string) {
		s := suite.Server(env, name)
		_, pending := s.Annotations[metalv1alpha1.OperationAnnotation]
		return durableState(s) == string(metalv1alpha1.ServerStateAvailable) && !pending && s.Status.PowerState == metalv1alpha1.PowerStateOff,
			fmt.Sprintf("state %s, annotations %v", durableState(s), s.Annotations)
	})

	// Accepted: the drift is over, and the record's baseline is what was found.
	annotate(t, name, metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationAcceptInventory)
	testenv.Eventually(t, 10*time.Second, "drift accepted", func() (bool, string) {
		s := suite.Server(env, name)
		_, d := s.Annotations[metalv1alpha1.InventoryDriftAnnotation]
		_, op := s.Annotations[metalv1alpha1.OperationAnnotation]
		return !d && !op && driftCondition(s) == nil, fmt.Sprintf("annotations %v, conditions %v", s.Annotations, s.Status.Conditions)
	})
	got := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Namespace: testOpts.DiscoveryNamespace, Name: inventory.ObjectName(name)}, got); err != nil {
		t.Fatal(err)
	}
	if r, err := inventory.Decode(got); err != nil || len(r.Baseline.GPUs) != 1 {
		t.Fatalf("record after accept: %+v, %v", r, err)
	}
	waitEvent(t, name, metalv1alpha1.ReasonInventoryAccepted)
}

// rediscover is refused on a claimed server: its workload is not rebooted into discovery.
func TestRediscoverRefusedWhenClaimed(t *testing.T) {
	t.Parallel()
	name, b, _ := claimedOn(t, "rediscl")
	start := time.Now()
	annotate(t, name, metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationRediscover)
	testenv.Eventually(t, 10*time.Second, "operation removed", func() (bool, string) {
		s := suite.Server(env, name)
		_, pending := s.Annotations[metalv1alpha1.OperationAnnotation]
		return !pending, fmt.Sprint(s.Annotations)
	})
	waitEvent(t, name, metalv1alpha1.ReasonUnsupportedOperation)
	s := suite.Server(env, name)
	if durableState(s) != string(metalv1alpha1.ServerStateReserved) {
		t.Fatalf("state %s", durableState(s))
	}
	for _, r := range suite.Since(fleet.BoxActions(b), start) {
		if r.Action == redfish.ActionReset || (r.Action == redfish.ActionBootOverride && r.Boot != nil && strings.EqualFold(r.Boot.Target, "Pxe")) {
			t.Fatalf("a claimed server was acted on after rediscover: %+v", r)
		}
	}
}

package metal

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	readinessv1alpha1 "github.com/metalhub/metalhub/api/readiness/v1alpha1"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// A ServerReadinessRule that requires NetworkReady True keeps claims off a server whose cabling
// differs from its ServerWiring (a cable in the wrong switch port); the next discovery report,
// cabled as expected, lets the waiting claim bind.
func TestWiringGatesClaims(t *testing.T) {
	const ns, prefix = "wiring", "wiring"
	ensureNamespace(t, ns)
	names, _ := availableServers(t, prefix, 1, func(int) map[string]string { return map[string]string{"pool": prefix} })
	name := names[0]
	// The discovery report as the probe gives it (the suite's stand-in registry reports none).
	report := func(port string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, "discovery report on "+name, func() (bool, string) {
			s := suite.Server(env, name)
			s.Status.NetworkInterfaces = []metalv1alpha1.NetworkInterface{{Name: "eno1", MACAddress: "02:00:00:00:0a:01", CarrierStatus: "up",
				Neighbors: []metalv1alpha1.LLDPNeighbor{{SystemName: "leaf-01", PortID: port}}}}
			err := testenv.WriteStatus(ctx(), env.Client, s)
			return err == nil, fmt.Sprint(err)
		})
	}
	report("Ethernet2") // miswired: expected in Ethernet1

	taint := metalv1alpha1.Taint{Key: "metal.ironcore.dev/wiring", Value: "unverified", Effect: metalv1alpha1.TaintEffectNoBind}
	rule := &metalv1alpha1.ServerReadinessRule{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: metalv1alpha1.ServerReadinessRuleSpec{
		Conditions: []metalv1alpha1.ConditionRequirement{{Type: readinessv1alpha1.ConditionNetworkReady, RequiredStatus: metav1.ConditionTrue}},
		Taint:      &taint, ServerSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": prefix}},
	}}
	w := &readinessv1alpha1.ServerWiring{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: prefix}, Spec: readinessv1alpha1.ServerWiringSpec{
		ServerRef: corev1.LocalObjectReference{Name: name},
		Network: readinessv1alpha1.ExpectedNetwork{Interfaces: []readinessv1alpha1.ExpectedInterface{{MACAddress: "02:00:00:00:0A:01", CarrierStatus: "up",
			Neighbors: []readinessv1alpha1.ExpectedNeighbor{{SystemName: "leaf-01", PortID: "Ethernet1"}}}}},
	}}
	if err := env.Client.Create(ctx(), rule); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx(), w); err != nil {
		t.Fatal(err)
	}
	networkReady := func(want metav1.ConditionStatus, reason string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%s NetworkReady %s/%s", name, want, reason), func() (bool, string) {
			c := apimeta.FindStatusCondition(suite.Server(env, name).Status.Conditions, readinessv1alpha1.ConditionNetworkReady)
			return c != nil && c.Status == want && c.Reason == reason, fmt.Sprintf("%+v", c)
		})
	}
	networkReady(metav1.ConditionFalse, readinessv1alpha1.ReasonNeighborMismatch)
	testenv.Eventually(t, 10*time.Second, name+" tainted", func() (bool, string) {
		s := suite.Server(env, name)
		return slices.Contains(s.Spec.Taints, taint), fmt.Sprint(s.Spec.Taints)
	})
	got := getObject(ns, prefix, &readinessv1alpha1.ServerWiring{})
	if got == nil || got.Status.Ready || len(got.Status.Mismatches) != 1 || !strings.Contains(got.Status.Mismatches[0].Message, "seen: leaf-01 port Ethernet2") {
		t.Fatalf("wiring status %+v: want not ready, the moved cable named", got)
	}

	claim := selectorClaim(ns, prefix, metalv1alpha1.PowerOff, &metav1.LabelSelector{MatchLabels: map[string]string{"pool": prefix}})
	if err := env.Client.Create(ctx(), claim); err != nil {
		t.Fatal(err)
	}
	c := waitClaim(t, ns, prefix, "Unbound/"+metalv1alpha1.ReasonNoClaimableServer, 10*time.Second)
	if cond := apimeta.FindStatusCondition(c.Status.Conditions, metalv1alpha1.ConditionBound); cond == nil || !strings.Contains(cond.Message, "1 with taints not tolerated") {
		t.Errorf("claim condition %+v does not say the server is tainted", cond)
	}
	if s := suite.Server(env, name); s.Spec.ServerClaimRef != nil {
		t.Fatalf("the miswired server was bound to %+v", s.Spec.ServerClaimRef)
	}

	report("Ethernet1") // recabled, and discovered again
	networkReady(metav1.ConditionTrue, readinessv1alpha1.ReasonMatch)
	c = waitClaim(t, ns, prefix, "Bound/Bound", 20*time.Second)
	if c.Spec.ServerRef == nil || c.Spec.ServerRef.Name != name {
		t.Fatalf("claim bound %+v, want %s", c.Spec.ServerRef, name)
	}
	checkNoDoubleWrites(t)
}

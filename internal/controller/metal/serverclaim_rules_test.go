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
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// Bad input — an empty image, a missing ignition Secret, an invalid selector — gives a
// condition that says so and binds nothing; fixing it lets the claim bind.
func TestClaimBadInput(t *testing.T) {
	const ns = "default"
	pool := func(int) map[string]string { return map[string]string{"pool": "bad"} }
	names, _ := availableServers(t, "bad", 1, pool)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "bad"}}

	noImage := selectorClaim(ns, "bad-image", metalv1alpha1.PowerOff, sel)
	noImage.Spec.Image = ""
	noSecret := selectorClaim(ns, "bad-secret", metalv1alpha1.PowerOff, sel)
	noSecret.Spec.IgnitionSecretRef = &corev1.LocalObjectReference{Name: "bad-ignition"}
	badSel := selectorClaim(ns, "bad-selector", metalv1alpha1.PowerOff, &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Bogus", Values: []string{"bad"}}}})
	for _, c := range []*metalv1alpha1.ServerClaim{noImage, noSecret, badSel} {
		if err := env.Client.Create(ctx(), c); err != nil {
			t.Fatal(err)
		}
	}
	waitClaim(t, ns, "bad-image", "Unbound/"+metalv1alpha1.ReasonImageMissing, 10*time.Second)
	waitClaim(t, ns, "bad-secret", "Unbound/"+metalv1alpha1.ReasonIgnitionSecretNotFound, 10*time.Second)
	waitClaim(t, ns, "bad-selector", "Unbound/"+metalv1alpha1.ReasonInvalidSelector, 10*time.Second)
	if s := suite.Server(env, names[0]); s.Spec.ServerClaimRef != nil {
		t.Fatalf("a claim with bad input bound %s", names[0])
	}

	// The selector can be corrected while unbound; the claim then binds the one server.
	updateClaim(t, ns, "bad-selector", func(c *metalv1alpha1.ServerClaim) {
		c.Spec.ServerSelector.MatchExpressions[0].Operator = metav1.LabelSelectorOpIn
	})
	c := waitClaim(t, ns, "bad-selector", "Bound/Bound", 10*time.Second)
	if c.Spec.ServerRef == nil || c.Spec.ServerRef.Name != names[0] {
		t.Fatalf("bad-selector bound %+v, want %s", c.Spec.ServerRef, names[0])
	}
	// Once bound, it is immutable. A patch, not an Update: the controller writes the claim
	// too, and a conflict would hide the answer under test.
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.ServerSelector.MatchExpressions[0].Values = []string{"other"}
	if err := env.Client.Patch(ctx(), c, patch); err == nil || !apierrors.IsInvalid(err) {
		t.Errorf("changing the selector of a bound claim: err %v, want Invalid", err)
	}

	// Two more servers: the broken claims still do not bind them.
	more, _ := availableServers(t, "bad-more", 2, pool)
	time.Sleep(time.Second)
	waitClaim(t, ns, "bad-image", "Unbound/"+metalv1alpha1.ReasonImageMissing, time.Second)
	waitClaim(t, ns, "bad-secret", "Unbound/"+metalv1alpha1.ReasonIgnitionSecretNotFound, time.Second)
	for _, name := range more {
		if s := suite.Server(env, name); s.Spec.ServerClaimRef != nil {
			t.Fatalf("a claim with bad input bound %s", name)
		}
	}
	// Fixing them lets them bind.
	updateClaim(t, ns, "bad-image", func(c *metalv1alpha1.ServerClaim) { c.Spec.Image = "os-image:latest" })
	if err := env.Client.Create(ctx(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad-ignition"},
		Data: map[string][]byte{"ignition": []byte("{}")}}); err != nil {
		t.Fatal(err)
	}
	waitClaim(t, ns, "bad-image", "Bound/Bound", 10*time.Second)
	waitClaim(t, ns, "bad-secret", "Bound/Bound", 10*time.Second)
	testenv.Eventually(t, 10*time.Second, "boot configuration of bad-secret Ready", func() (bool, string) {
		sbc := &metalv1alpha1.ServerBootConfiguration{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Namespace: ns, Name: "bad-secret"}, sbc); err != nil {
			return false, err.Error()
		}
		return sbc.Status.State == metalv1alpha1.ServerBootConfigurationStateReady, string(sbc.Status.State)
	})
	waitEvent(t, "bad-image", metalv1alpha1.ReasonImageMissing)
	checkNoDoubleWrites(t)
}

// After a crash between the two binding writes the claim adopts the server already pointing at
// it instead of binding another; if two servers point at one claim, it keeps one and releases
// the other.
func TestClaimAdoptsAndRepairs(t *testing.T) {
	const ns = "default"
	names, _ := availableServers(t, "adopt", 4, func(i int) map[string]string {
		return map[string]string{"pool": fmt.Sprintf("adopt-%d", i/2)}
	})
	point := func(server, claim string) {
		t.Helper()
		if err := lifecycle.PatchMetadata(ctx(), env.Client, suite.Server(env, server), func(o client.Object) {
			o.(*metalv1alpha1.Server).Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: ns, Name: claim}
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i, claim := range []string{"adopt-0", "adopt-1"} {
		c := selectorClaim(ns, claim, metalv1alpha1.PowerOff, &metav1.LabelSelector{MatchLabels: map[string]string{"pool": claim}})
		c.Annotations = map[string]string{metalv1alpha1.OperationAnnotation: metalv1alpha1.OperationIgnore}
		if err := env.Client.Create(ctx(), c); err != nil {
			t.Fatal(err)
		}
		point(names[2*i+1], claim) // the first write of a binding, then "crash"
		if i == 1 {
			point(names[2*i], claim) // and a second server pointing at the same claim
		}
	}
	for _, claim := range []string{"adopt-0", "adopt-1"} {
		c := getClaim(ns, claim)
		if err := lifecycle.PatchMetadata(ctx(), env.Client, c, func(o client.Object) {
			lifecycle.RemoveAnnotation(o, metalv1alpha1.OperationAnnotation)
		}); err != nil {
			t.Fatal(err)
		}
	}
	c := waitClaim(t, ns, "adopt-0", "Bound/Bound", 10*time.Second)
	if c.Spec.ServerRef.Name != names[1] {
		t.Errorf("adopt-0 bound %s, want the server pointing at it, %s", c.Spec.ServerRef.Name, names[1])
	}
	c = waitClaim(t, ns, "adopt-1", "Bound/Bound", 10*time.Second)
	keep, other := names[2], names[3] // the first by name is kept
	if c.Spec.ServerRef.Name != keep {
		t.Errorf("adopt-1 bound %s, want %s", c.Spec.ServerRef.Name, keep)
	}
	suite.WaitServerState(t, env, other, metalv1alpha1.ServerStateAvailable, 20*time.Second)
	testenv.Eventually(t, 10*time.Second, "second server released", func() (bool, string) {
		s := suite.Server(env, other)
		return s.Spec.ServerClaimRef == nil, fmt.Sprintf("%+v", s.Spec.ServerClaimRef)
	})
	time.Sleep(500 * time.Millisecond)
	if s := suite.Server(env, names[0]); s.Spec.ServerClaimRef != nil {
		t.Errorf("%s was bound too: %+v", names[0], s.Spec.ServerClaimRef)
	}
	checkNoDoubleWrites(t)
}

// The built-in boot provider marks boot configurations Ready or Error and looks again when the
// ignition Secret appears.
func TestBootConfigurationProvider(t *testing.T) {
	t.Parallel()
	const ns = "default"
	mk := func(name, image, secret string) {
		sbc := &metalv1alpha1.ServerBootConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: metalv1alpha1.ServerBootConfigurationSpec{ServerRef: corev1.LocalObjectReference{Name: "some-server"}, Image: image}}
		if secret != "" {
			sbc.Spec.IgnitionSecretRef = &corev1.LocalObjectReference{Name: secret}
		}
		if err := env.Client.Create(ctx(), sbc); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(name string, want metalv1alpha1.ServerBootConfigurationState, reason string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, "boot configuration "+name+" "+string(want), func() (bool, string) {
			sbc := &metalv1alpha1.ServerBootConfiguration{}
			if err := env.Client.Get(ctx(), client.ObjectKey{Namespace: ns, Name: name}, sbc); err != nil {
				return false, err.Error()
			}
			got := string(sbc.Status.State)
			if c := apimeta.FindStatusCondition(sbc.Status.Conditions, metalv1alpha1.ConditionReady); c != nil {
				got += "/" + c.Reason
			}
			return got == string(want)+"/"+reason, got
		})
	}
	mk("sbc-ready", "img", "")
	mk("sbc-noimage", "", "")
	mk("sbc-nosecret", "img", "sbc-ignition")
	wait("sbc-ready", metalv1alpha1.ServerBootConfigurationStateReady, metalv1alpha1.ReasonBootConfigurationReady)
	wait("sbc-noimage", metalv1alpha1.ServerBootConfigurationStateError, metalv1alpha1.ReasonImageMissing)
	wait("sbc-nosecret", metalv1alpha1.ServerBootConfigurationStateError, metalv1alpha1.ReasonIgnitionSecretNotFound)
	if err := env.Client.Create(ctx(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sbc-ignition"}}); err != nil {
		t.Fatal(err)
	}
	wait("sbc-nosecret", metalv1alpha1.ServerBootConfigurationStateReady, metalv1alpha1.ReasonBootConfigurationReady)
}

// A claimed server is powered on only once its boot configuration is Ready: before, its boot
// provider serves nothing and the box would boot whatever is on its disk.
func TestClaimPowerWaitsForBootConfiguration(t *testing.T) {
	t.Parallel()
	const ns = "default"
	names, bmcs := availableServers(t, "bootwait", 1, func(int) map[string]string { return map[string]string{"pool": "bootwait"} })
	// A boot configuration of the claim's name that is not the claim's (the claim reports the
	// conflict) and not Ready: its ignition Secret is missing.
	sbc := &metalv1alpha1.ServerBootConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bootwait"},
		Spec: metalv1alpha1.ServerBootConfigurationSpec{ServerRef: corev1.LocalObjectReference{Name: names[0]}, Image: "img",
			IgnitionSecretRef: &corev1.LocalObjectReference{Name: "bootwait-ignition"}}}
	if err := env.Client.Create(ctx(), sbc); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx(), selectorClaim(ns, "bootwait", metalv1alpha1.PowerOn,
		&metav1.LabelSelector{MatchLabels: map[string]string{"pool": "bootwait"}})); err != nil {
		t.Fatal(err)
	}
	waitClaim(t, ns, "bootwait", "Bound/"+metalv1alpha1.ReasonBootConfigurationConflict, 20*time.Second)
	suite.WaitServerState(t, env, names[0], metalv1alpha1.ServerStateReserved, 10*time.Second)
	time.Sleep(2 * time.Second) // what a wrong power-on would need to show
	if p := systemPower(bmcs[0]); p != redfish.PowerOff {
		t.Fatalf("server powered %s before its boot configuration was Ready", p)
	}
	if err := env.Client.Create(ctx(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bootwait-ignition"}}); err != nil {
		t.Fatal(err)
	}
	// The boot provider's Ready reaches the server through its watch, long before the 15 s retry.
	waitSystemPower(t, bmcs[0], redfish.PowerOn, 5*time.Second)
	waitPower(t, names[0], metalv1alpha1.PowerStateOn, 10*time.Second)

	if err := env.Client.Delete(ctx(), getClaim(ns, "bootwait")); err != nil {
		t.Fatal(err)
	}
	suite.WaitServerState(t, env, names[0], metalv1alpha1.ServerStateAvailable, 20*time.Second)
	waitClaimGone(t, ns, "bootwait", 20*time.Second)
	_ = env.Client.Delete(ctx(), sbc)
}

// An Evict taint evicts the bound claims that do not tolerate it (they are deleted, and their
// servers released as on any deletion); claims that tolerate it stay, and the taint keeps new
// claims without the toleration away.
func TestClaimEvictTaint(t *testing.T) {
	const ns = "default"
	names, _ := availableServers(t, "evict", 2, func(i int) map[string]string {
		return map[string]string{"pool": fmt.Sprintf("evict-%d", i)}
	})
	taint := metalv1alpha1.Taint{Key: "broken", Value: "psu", Effect: metalv1alpha1.TaintEffectEvict}
	claims := []*metalv1alpha1.ServerClaim{
		selectorClaim(ns, "evict-0", metalv1alpha1.PowerOff, &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "evict-0"}}),
		selectorClaim(ns, "evict-1", metalv1alpha1.PowerOff, &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "evict-1"}}),
	}
	claims[1].Spec.Tolerations = []metalv1alpha1.Toleration{{Key: "broken", Operator: metalv1alpha1.TolerationOpExists, Effect: metalv1alpha1.TaintEffectEvict}}
	for _, c := range claims {
		if err := env.Client.Create(ctx(), c); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range claims {
		waitClaim(t, ns, c.Name, "Bound/Bound", 20*time.Second)
		suite.WaitServerState(t, env, names[i], metalv1alpha1.ServerStateReserved, 10*time.Second)
	}
	// A NoBind taint leaves bound claims alone.
	for _, name := range names {
		if err := lifecycle.PatchMetadata(ctx(), env.Client, suite.Server(env, name), func(o client.Object) {
			o.(*metalv1alpha1.Server).Spec.Taints = []metalv1alpha1.Taint{{Key: "cordon"}}
		}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	if got := claimStatus(getClaim(ns, "evict-0")); got != "Bound/Bound" {
		t.Fatalf("a NoBind taint changed a bound claim: %s", got)
	}
	for _, name := range names {
		if err := lifecycle.PatchMetadata(ctx(), env.Client, suite.Server(env, name), func(o client.Object) {
			o.(*metalv1alpha1.Server).Spec.Taints = []metalv1alpha1.Taint{taint}
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitClaimGone(t, ns, "evict-0", 20*time.Second)
	s := suite.WaitServerState(t, env, names[0], metalv1alpha1.ServerStateAvailable, 20*time.Second)
	if s.Spec.ServerClaimRef != nil || len(s.Spec.Taints) != 1 {
		t.Errorf("evicted server: claim ref %+v, taints %+v", s.Spec.ServerClaimRef, s.Spec.Taints)
	}
	waitEvent(t, "evict-0", "Evicted")
	if got := claimStatus(getClaim(ns, "evict-1")); got != "Bound/Bound" {
		t.Errorf("the claim tolerating the taint: %s", got)
	}
	if s := suite.Server(env, names[1]); durableState(s) != string(metalv1alpha1.ServerStateReserved) {
		t.Errorf("the tolerating claim's server is %s", durableState(s))
	}
	// A new claim without the toleration does not bind the tainted server.
	again := selectorClaim(ns, "evict-0", metalv1alpha1.PowerOff, &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "evict-0"}})
	if err := env.Client.Create(ctx(), again); err != nil {
		t.Fatal(err)
	}
	waitClaim(t, ns, "evict-0", "Unbound/"+metalv1alpha1.ReasonNoClaimableServer, 10*time.Second)
	checkNoDoubleWrites(t)
}

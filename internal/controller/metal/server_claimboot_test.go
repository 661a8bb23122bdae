package metal

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// A claim whose configuration network-boots only the first power-on (networkBoot FirstPowerOn):
// the recorder shows the one-time PXE before the first power-on only; the record of it is
// bookkeeping on the Server, written with the power-on, and rewritten from what the box does
// when it goes missing (a lost write), so a later power-on still boots the disk.
func TestClaimNetworkBootsOnlyTheFirstPowerOn(t *testing.T) {
	const ns, name = "default", "firstboot"
	names, bmcs := availableServers(t, name, 1, func(int) map[string]string { return map[string]string{"pool": name} })
	start := time.Now()
	c := selectorClaim(ns, name, metalv1alpha1.PowerOn, &metav1.LabelSelector{MatchLabels: map[string]string{"pool": name}})
	c.Spec.NetworkBoot = metalv1alpha1.NetworkBootFirstPowerOn
	if err := env.Client.Create(ctx(), c); err != nil {
		t.Fatal(err)
	}
	waitClaim(t, ns, name, "Bound/Bound", 20*time.Second)
	waitSystemPower(t, bmcs[0], redfish.PowerOn, 10*time.Second)
	sbc := &metalv1alpha1.ServerBootConfiguration{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Namespace: ns, Name: name}, sbc); err != nil {
		t.Fatal(err)
	}
	if sbc.Spec.NetworkBoot != metalv1alpha1.NetworkBootFirstPowerOn {
		t.Fatalf("the claim's boot configuration says networkBoot %q, want the claim's FirstPowerOn", sbc.Spec.NetworkBoot)
	}
	recorded := func(what string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, what, func() (bool, string) {
			v := suite.Server(env, names[0]).Annotations[serverstate.ClaimBootAnnotation]
			return v == string(sbc.UID), v
		})
	}
	offAndOn := func() {
		t.Helper()
		updateClaim(t, ns, name, func(c *metalv1alpha1.ServerClaim) { c.Spec.Power = metalv1alpha1.PowerOff })
		waitSystemPower(t, bmcs[0], redfish.PowerOff, 10*time.Second)
		updateClaim(t, ns, name, func(c *metalv1alpha1.ServerClaim) { c.Spec.Power = metalv1alpha1.PowerOn })
		waitSystemPower(t, bmcs[0], redfish.PowerOn, 10*time.Second)
		waitPower(t, names[0], metalv1alpha1.PowerStateOn, 10*time.Second)
	}
	recorded("first network boot recorded")

	// Off and on again: the disk.
	offAndOn()

	// The record lost (as when the power-on's write was): the running box rewrites it.
	editServer(t, names[0], func(s *metalv1alpha1.Server) { lifecycle.RemoveAnnotation(s, serverstate.ClaimBootAnnotation) })
	recorded("record rewritten from the running box")
	offAndOn()

	if got := fmt.Sprint(suite.ResetTypes(suite.Since(fleet.BoxActions(bmcs[0]), start))); got != "[Boot:Pxe/Once On GracefulShutdown On GracefulShutdown On]" {
		t.Errorf("BMC actions %s, want the network boot before the first power-on only", got)
	}
	if err := env.Client.Delete(ctx(), getClaim(ns, name)); err != nil {
		t.Fatal(err)
	}
	if s := suite.WaitServerState(t, env, names[0], metalv1alpha1.ServerStateAvailable, 20*time.Second); s.Annotations[serverstate.ClaimBootAnnotation] != "" {
		t.Errorf("released server keeps its claim's boot record %q", s.Annotations[serverstate.ClaimBootAnnotation])
	}
	waitClaimGone(t, ns, name, 20*time.Second)
	checkNoDoubleWrites(t)
}

package metal

import (
	"fmt"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// setPause sets (value) or removes ("") the pause annotation of an object.
func setPause(t *testing.T, o client.Object, value string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "pause "+o.GetName(), func() (bool, string) {
		if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(o), o); err != nil {
			return false, err.Error()
		}
		err := lifecycle.PatchMetadata(ctx(), env.Client, o, func(o client.Object) {
			if value == "" {
				lifecycle.RemoveAnnotation(o, lifecycle.PausedAnnotation)
			} else {
				lifecycle.SetAnnotation(o, lifecycle.PausedAnnotation, value)
			}
		})
		return err == nil, fmt.Sprint(err)
	})
}

// Issue 23: a pause is acknowledged by the pass that saw it, and then nothing binds the server:
// not a claim naming it, not one selecting any server.
func TestPausedServerIsAcknowledgedAndNeverBound(t *testing.T) {
	t.Parallel()
	name, _ := availableServer(t, "pause-bind")
	s := suite.Server(env, name)
	setPause(t, s, "move-1")
	testenv.Eventually(t, 30*time.Second, "the pause acknowledged", func() (bool, string) {
		s := suite.Server(env, name)
		return s.Annotations[lifecycle.PauseAckAnnotation] == "move-1", fmt.Sprint(s.Annotations)
	})
	claim := claimServer(t, name, "pause-bind-claim", metalv1alpha1.PowerOn)
	testenv.Eventually(t, 15*time.Second, "the claim refused with the reason", func() (bool, string) {
		c := &metalv1alpha1.ServerClaim{}
		if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(claim), c); err != nil {
			return false, err.Error()
		}
		cond := apimeta.FindStatusCondition(c.Status.Conditions, metalv1alpha1.ConditionBound)
		return cond != nil && cond.Reason == metalv1alpha1.ReasonServerNotClaimable, fmt.Sprintf("%+v", c.Status.Conditions)
	})
	if s := suite.Server(env, name); s.Spec.ServerClaimRef != nil {
		t.Fatalf("a paused server was bound: %+v", s.Spec.ServerClaimRef)
	}
	setPause(t, s, "")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateReserved, 30*time.Second)
}

// Pausing a BMC pauses its Servers: a claimed server whose claim asks for power Off is not
// turned off while its BMC is paused, and is once it is unpaused.
func TestPausedBMCPausesItsServers(t *testing.T) {
	t.Parallel()
	name, b, claim := claimedOn(t, "pause-bmc")
	bmcObj := &metalv1alpha1.BMC{}
	bmcObj.Name = "pause-bmc"
	setPause(t, bmcObj, "true")
	start := time.Now()
	setClaimPower(t, claim, metalv1alpha1.PowerOff)
	watch := time.Now().Add(5 * time.Second)
	for time.Now().Before(watch) {
		if recs := suite.Since(fleet.BoxActions(b), start); len(recs) != 0 {
			t.Fatalf("a server of a paused BMC was acted on: %+v", recs)
		}
		time.Sleep(200 * time.Millisecond) // the window being watched, not a synchronisation
	}
	setPause(t, bmcObj, "")
	waitPower(t, name, metalv1alpha1.PowerStateOff, 30*time.Second)
}

package metal

import (
	"fmt"
	"net"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

func readyReason(conds []metav1.Condition) string {
	if c := apimeta.FindStatusCondition(conds, ConditionReady); c != nil {
		return string(c.Status) + "/" + c.Reason
	}
	return ""
}

func waitBMCReady(t *testing.T, name, want string) {
	t.Helper()
	eventually(t, 15*time.Second, "BMC "+name+" "+want, func() (bool, string) {
		b := &metalv1alpha1.BMC{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, b); err != nil {
			return false, err.Error()
		}
		got := readyReason(b.Status.Conditions)
		return got == want, fmt.Sprintf("%s (state %s)", got, b.Status.State)
	})
}

func waitServerReady(t *testing.T, name, want string) {
	t.Helper()
	eventually(t, 15*time.Second, "server "+name+" "+want, func() (bool, string) {
		s := getServer(t, name)
		if s == nil {
			return false, "no server"
		}
		got := readyReason(s.Status.Conditions)
		return got == want, got
	})
}

// poke makes a change the predicate passes, so the next look happens now instead of at resync.
func poke(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	if err := lifecycle.PatchMetadata(ctx(), env.Client, obj, func(o client.Object) {
		lifecycle.SetAnnotation(o, "test.metalhub.io/poke", time.Now().String())
	}); err != nil {
		t.Fatal(err)
	}
}

// Missing secret, wrong credentials, an unreachable address and a BMC answering 500 each give a
// condition with a clear reason and an event; each recovers by itself once the fault is gone.
func TestBMCBadInputAndFaults(t *testing.T) {
	t.Run("missing secret", func(t *testing.T) {
		b := takeBMC(t)
		obj := bmcObject(b, "fault-nosecret")
		if err := env.Client.Create(ctx(), obj); err != nil {
			t.Fatal(err)
		}
		waitBMCReady(t, obj.Name, "False/"+ReasonSecretNotFound)
		hasEvent(t, obj.Name, ReasonSecretNotFound)
		user, pass := b.Credentials()
		if err := env.Client.Create(ctx(), &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: obj.Name},
			StringData: map[string]string{"username": user, "password": pass}}); err != nil {
			t.Fatal(err)
		}
		waitBMCReady(t, obj.Name, "True/"+ReasonConnected)
	})

	t.Run("wrong credentials", func(t *testing.T) {
		b := takeBMC(t)
		user, pass := b.Credentials()
		sec := &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: "fault-creds"},
			StringData: map[string]string{"username": user, "password": "wrong"}}
		if err := env.Client.Create(ctx(), sec); err != nil {
			t.Fatal(err)
		}
		obj := bmcObject(b, "fault-creds")
		if err := env.Client.Create(ctx(), obj); err != nil {
			t.Fatal(err)
		}
		waitBMCReady(t, obj.Name, "False/AuthenticationFailed")
		hasEvent(t, obj.Name, "AuthenticationFailed")
		sec.StringData["password"] = pass
		if err := env.Client.Update(ctx(), sec); err != nil {
			t.Fatal(err)
		}
		waitBMCReady(t, obj.Name, "True/"+ReasonConnected)
	})

	t.Run("unreachable", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closedPort := int32(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		if err := env.Client.Create(ctx(), &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: "fault-unreachable"},
			StringData: map[string]string{"username": "u", "password": "p"}}); err != nil {
			t.Fatal(err)
		}
		obj := bmcObject(fleet.BMC(0), "fault-unreachable")
		obj.Spec.Protocol.Port = closedPort
		if err := env.Client.Create(ctx(), obj); err != nil {
			t.Fatal(err)
		}
		waitBMCReady(t, obj.Name, "False/ConnectionFailed")
	})

	t.Run("BMC hanging", func(t *testing.T) {
		// A BMC that accepts requests and never answers costs a pass at most the request
		// timeout: the server reports Timeout instead of holding a worker.
		b := takeBMC(t)
		name := registerBMC(t, b, "fault-hang")
		waitState(t, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
		b.SetFaults(redfish.Faults{Hang: true})
		start := time.Now()
		poke(t, &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: name}})
		waitServerReady(t, name, "False/Timeout")
		t.Logf("hanging BMC reported after %s (request timeout %s)", time.Since(start).Round(10*time.Millisecond), testOpts.BMCRequestTimeout)
		b.ClearFaults()
		waitServerReady(t, name, "True/"+ReasonConnected)
	})

	t.Run("BMC answering 500", func(t *testing.T) {
		b := takeBMC(t)
		name := registerBMC(t, b, "fault-500")
		waitState(t, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
		b.SetFaults(redfish.Faults{Status: 500})
		poke(t, &metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: "fault-500"}})
		poke(t, &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: name}})
		waitBMCReady(t, "fault-500", "False/Unavailable")
		waitServerReady(t, name, "False/Unavailable")
		hasEvent(t, name, "Unavailable")
		if s := getServer(t, name); durableState(s) != string(metalv1alpha1.ServerStateAvailable) {
			t.Errorf("a flaky BMC changed the lifecycle: %s", durableState(s))
		}
		b.ClearFaults()
		waitBMCReady(t, "fault-500", "True/"+ReasonConnected)
		waitServerReady(t, name, "True/"+ReasonConnected)
	})
}

// Fifty servers asked to power on at once all report On within two emulated power delays plus
// a margin: power never waits on a worker, so fifty transitions overlap.
func TestFiftyServersPowerOnAtOnce(t *testing.T) {
	const n = 50
	const delay = 2 * time.Second
	names := make([]string, n)
	bmcs := make([]*redfish.BMC, n)
	for i := range n {
		bmcs[i] = takeBMC(t)
		names[i] = registerBMC(t, bmcs[i], fmt.Sprintf("power-%d", i))
	}
	parallel(n, func(i int) {
		waitState(t, names[i], metalv1alpha1.ServerStateAvailable, 90*time.Second)
		waitPower(t, names[i], metalv1alpha1.PowerStateOff, 30*time.Second)
	})
	for _, b := range bmcs {
		b.SetPowerDelay(delay)
	}
	start := time.Now()
	for i := range n {
		claimServer(t, names[i], fmt.Sprintf("power-%d", i), metalv1alpha1.PowerOn)
	}
	parallel(n, func(i int) { waitPower(t, names[i], metalv1alpha1.PowerStateOn, 2*delay+10*time.Second) })
	took := time.Since(start)
	t.Logf("%d servers powered on in %s (emulated power delay %s)", n, took.Round(10*time.Millisecond), delay)
	if took > 2*delay+5*time.Second {
		t.Errorf("power-on of %d servers took %s, more than two power delays (%s) plus 5s", n, took, 2*delay)
	}
}

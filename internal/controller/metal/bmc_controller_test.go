package metal

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccontroller"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

func readyReason(conds []metav1.Condition) string {
	if c := apimeta.FindStatusCondition(conds, metalv1alpha1.ConditionReady); c != nil {
		return string(c.Status) + "/" + c.Reason
	}
	return ""
}

func waitBMCReady(t *testing.T, name, want string) {
	t.Helper()
	testenv.Eventually(t, 15*time.Second, "BMC "+name+" "+want, func() (bool, string) {
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
	testenv.Eventually(t, 15*time.Second, "server "+name+" "+want, func() (bool, string) {
		s := suite.Server(env, name)
		if s == nil {
			return false, "no server"
		}
		got := readyReason(s.Status.Conditions)
		return got == want, got
	})
}

// poke makes a change the predicate passes, so the next look happens now instead of at resync.
// The patch is optimistically locked: a controller's write in between is a conflict, retried
// on the fresh object as a user would.
func poke(t *testing.T, obj client.Object) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "poke "+obj.GetName(), func() (bool, string) {
		if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err.Error()
		}
		err := lifecycle.PatchMetadata(ctx(), env.Client, obj, func(o client.Object) {
			lifecycle.SetAnnotation(o, "test.metalhub.io/poke", time.Now().String())
		})
		return err == nil, fmt.Sprint(err)
	})
}

// Missing secret, wrong credentials, an unreachable address and a BMC answering 500 each give a
// condition with a clear reason and an event; each recovers by itself once the fault is gone.
func TestBMCBadInputAndFaults(t *testing.T) {
	t.Run("missing secret", func(t *testing.T) {
		b := fleet.Take(t)
		obj := suite.BMCObject(b, "fault-nosecret")
		if err := env.Client.Create(ctx(), obj); err != nil {
			t.Fatal(err)
		}
		waitBMCReady(t, obj.Name, "False/"+metalv1alpha1.ReasonSecretNotFound)
		waitEvent(t, obj.Name, metalv1alpha1.ReasonSecretNotFound)
		user, pass := b.Credentials()
		if err := env.Client.Create(ctx(), &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: obj.Name},
			StringData: map[string]string{"username": user, "password": pass}}); err != nil {
			t.Fatal(err)
		}
		waitBMCReady(t, obj.Name, "True/"+metalv1alpha1.ReasonConnected)
	})

	t.Run("wrong credentials", func(t *testing.T) {
		b := fleet.Take(t)
		user, pass := b.Credentials()
		sec := &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: "fault-creds"},
			StringData: map[string]string{"username": user, "password": "wrong"}}
		if err := env.Client.Create(ctx(), sec); err != nil {
			t.Fatal(err)
		}
		obj := suite.BMCObject(b, "fault-creds")
		if err := env.Client.Create(ctx(), obj); err != nil {
			t.Fatal(err)
		}
		waitBMCReady(t, obj.Name, "False/AuthenticationFailed")
		waitEvent(t, obj.Name, "AuthenticationFailed")
		sec.StringData["password"] = pass
		if err := env.Client.Update(ctx(), sec); err != nil {
			t.Fatal(err)
		}
		waitBMCReady(t, obj.Name, "True/"+metalv1alpha1.ReasonConnected)
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
		obj := suite.BMCObject(fleet.BMC(0), "fault-unreachable")
		obj.Spec.Protocol.Port = closedPort
		if err := env.Client.Create(ctx(), obj); err != nil {
			t.Fatal(err)
		}
		waitBMCReady(t, obj.Name, "False/ConnectionFailed")
	})

	t.Run("BMC hanging", func(t *testing.T) {
		// A BMC that accepts requests and never answers costs a pass at most the request
		// timeout: the server reports Timeout instead of holding a worker.
		b := fleet.Take(t)
		name := fleet.RegisterBMC(t, b, "fault-hang")
		suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
		b.SetFaults(redfish.Faults{Hang: true})
		start := time.Now()
		poke(t, &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: name}})
		// The margin covers the watch event, the queue and the status write, but not a second
		// request timeout: a pass that hangs, or waits on the BMC twice, fails here.
		bound := testOpts.BMCRequestTimeout + 1500*time.Millisecond
		want := "False/" + string(bmc.ReasonTimeout)
		testenv.Eventually(t, bound, "server "+name+" "+want+" within the request timeout", func() (bool, string) {
			s := suite.Server(env, name)
			if s == nil {
				return false, "no server"
			}
			got := readyReason(s.Status.Conditions)
			return got == want, got
		})
		t.Logf("hanging BMC reported after %s (request timeout %s)", time.Since(start).Round(10*time.Millisecond), testOpts.BMCRequestTimeout)
		b.ClearFaults()
		waitServerReady(t, name, "True/"+metalv1alpha1.ReasonConnected)
	})

	t.Run("BMC answering 500", func(t *testing.T) {
		b := fleet.Take(t)
		name := fleet.RegisterBMC(t, b, "fault-500")
		suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
		b.SetFaults(redfish.Faults{Status: 500})
		poke(t, &metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: "fault-500"}})
		poke(t, &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: name}})
		waitBMCReady(t, "fault-500", "False/Unavailable")
		waitServerReady(t, name, "False/Unavailable")
		waitEvent(t, name, "Unavailable")
		if s := suite.Server(env, name); durableState(s) != string(metalv1alpha1.ServerStateAvailable) {
			t.Errorf("a flaky BMC changed the lifecycle: %s", durableState(s))
		}
		b.ClearFaults()
		waitBMCReady(t, "fault-500", "True/"+metalv1alpha1.ReasonConnected)
		waitServerReady(t, name, "True/"+metalv1alpha1.ReasonConnected)
	})
}

// Fifty servers asked to power on at once all report On within two emulated power delays plus
// a margin: power never waits on a worker, so fifty transitions overlap.
// #15 item 1: the same BMC registered twice. The second BMC object finds its system already a
// Server of the first: it reports DuplicateIdentity and creates no Server (a second Server
// would power and PXE-boot the first one's box).
func TestBMCRegisteredTwiceCreatesNoSecondServer(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	first := fleet.RegisterBMC(t, b, "twice-a")
	suite.WaitServerState(t, env, first, metalv1alpha1.ServerStateAvailable, time.Minute)
	fleet.RegisterBMC(t, b, "twice-b")
	waitBMCReady(t, "twice-b", "False/"+metalv1alpha1.ReasonDuplicateIdentity)
	waitEvent(t, "twice-b", metalv1alpha1.ReasonDuplicateIdentity)
	list := &metalv1alpha1.ServerList{}
	if err := env.Client.List(ctx(), list); err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		if s.Spec.BMCRef != nil && s.Spec.BMCRef.Name == "twice-b" {
			t.Fatalf("Server %s created from the BMC registered twice", s.Name)
		}
	}
	// The first keeps its server, Ready.
	waitBMCReady(t, "twice-a", "True/"+metalv1alpha1.ReasonConnected)

	// Both registered at once, before either has a Server: still one set of Servers, from the
	// first registered.
	b2 := fleet.Take(t)
	fleet.RegisterBMC(t, b2, "twice-c")
	fleet.RegisterBMC(t, b2, "twice-d")
	waitBMCReady(t, "twice-d", "False/"+metalv1alpha1.ReasonDuplicateIdentity)
	waitBMCReady(t, "twice-c", "True/"+metalv1alpha1.ReasonConnected)
	if err := env.Client.List(ctx(), list); err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		if s.Spec.BMCRef != nil && s.Spec.BMCRef.Name == "twice-d" {
			t.Fatalf("Server %s created from the BMC registered twice at once", s.Name)
		}
	}
}

func TestFiftyServersPowerOnAtOnce(t *testing.T) {
	const n = 50
	const delay = 2 * time.Second
	names := make([]string, n)
	bmcs := make([]*redfish.BMC, n)
	for i := range n {
		bmcs[i] = fleet.Take(t)
		names[i] = fleet.RegisterBMC(t, bmcs[i], fmt.Sprintf("power-%d", i))
	}
	parallel(n, func(i int) {
		suite.WaitServerState(t, env, names[i], metalv1alpha1.ServerStateAvailable, 90*time.Second)
		waitPower(t, names[i], metalv1alpha1.PowerStateOff, 30*time.Second)
	})
	for _, b := range bmcs {
		b.SetPowerDelay(delay)
	}
	start := time.Now()
	for i := range n {
		claimServer(t, names[i], fmt.Sprintf("power-%d", i), metalv1alpha1.PowerOn)
	}
	// One after another they would take n power delays (100 s); in parallel a few, however loaded
	// the machine: the bound is a quarter of the serial time, far from both.
	serial := n * delay
	parallel(n, func(i int) { waitPower(t, names[i], metalv1alpha1.PowerStateOn, serial/4) })
	took := time.Since(start)
	t.Logf("%d servers powered on in %s (emulated power delay %s)", n, took.Round(10*time.Millisecond), delay)
	if took > serial/4 {
		t.Errorf("power-on of %d servers took %s: not in parallel (one after another: %s)", n, took, serial)
	}
}

// startGraveyard starts an emulated fleet of its own (not the suite's), with faults set on
// every BMC before anything talks to it. Cleanup heals it and removes what the test made.
func startGraveyard(t *testing.T, n int, faults redfish.Faults) *redfish.Emulator {
	t.Helper()
	// A seed of its own: the suite's fleet has the default one, and two machines with one
	// system UUID are one machine to the controllers (neither is acted on).
	e, err := redfish.Start(redfish.Options{BMCs: n, PowerDelay: powerDelay, Seed: 0x67726176})
	if err != nil {
		t.Fatalf("start emulator: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	for _, b := range e.BMCs() {
		b.SetFaults(faults)
	}
	return e
}

// addBMC creates a BMCSecret and a BMC for b, and with withServer its Server as well (the BMC
// controller cannot list the systems of a dead BMC). Cleanup removes them, finalizers and all:
// they are this test's fixtures, not what it checks.
func addBMC(t *testing.T, b *redfish.BMC, name string, withServer bool) string {
	t.Helper()
	user, pass := b.Credentials()
	objs := []client.Object{
		&metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"username": user, "password": pass}},
		suite.BMCObject(b, name),
	}
	server := bmccontroller.ServerName(name, b.SystemIDs()[0])
	if withServer {
		sys := systemOf(b)
		objs = append(objs, &metalv1alpha1.Server{
			ObjectMeta: metav1.ObjectMeta{Name: server},
			Spec: metalv1alpha1.ServerSpec{SystemUUID: strings.ToLower(sys.UUID()), SystemURI: "/redfish/v1/Systems/" + sys.ID(),
				BMCRef: &corev1.LocalObjectReference{Name: name}},
		})
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx(), o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		b.ClearFaults()
		_ = env.Client.Delete(ctx(), &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: server}})
		for _, o := range objs {
			_ = env.Client.Delete(ctx(), o)
		}
		for _, o := range []client.Object{&metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: server}}, objs[1]} {
			for range 20 {
				if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(o), o); err != nil {
					break
				}
				if err := lifecycle.PatchMetadata(ctx(), env.Client, o, func(o client.Object) { o.SetFinalizers(nil) }); err == nil {
					break
				}
			}
		}
	})
	return server
}

// More dead BMCs than the Server controller has workers, each hanging on every request: after
// each has cost its first request timeout, a healthy server is still claimed and powered on
// as if they were not there. Before the BMC circuit breaker every dead server's pass held a
// worker for the whole request timeout, every RetryAfter, and the healthy server's passes
// queued behind them.
func TestDeadBMCsDoNotStarveHealthyServers(t *testing.T) {
	const dead = 5 * 20 // the suite runs 20 workers per controller
	if testOpts.Concurrency >= dead {
		t.Fatalf("%d dead BMCs do not outnumber %d workers", dead, testOpts.Concurrency)
	}
	healthy := fleet.Take(t)
	name := fleet.RegisterBMC(t, healthy, "starve-healthy")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	waitPower(t, name, metalv1alpha1.PowerStateOff, 30*time.Second)

	graveyard := startGraveyard(t, dead, redfish.Faults{Hang: true})
	servers := make([]string, dead)
	for i, b := range graveyard.BMCs() {
		servers[i] = addBMC(t, b, fmt.Sprintf("starve-dead-%d", i), true)
	}
	// Every dead server has had a pass fail on its BMC's first timeout.
	parallel(dead, func(i int) {
		testenv.Eventually(t, 60*time.Second, "dead server "+servers[i]+" not ready", func() (bool, string) {
			s := suite.Server(env, servers[i])
			if s == nil {
				return false, "no server"
			}
			got := readyReason(s.Status.Conditions)
			return got == "False/"+string(bmc.ReasonTimeout), got
		})
	})

	start := time.Now()
	claimServer(t, name, "starve-claim", metalv1alpha1.PowerOn)
	// Unloaded, this takes a few passes and one emulated power delay; the bound is for
	// correctness: it is what a handful of passes waiting one request timeout each would break.
	bound := 2 * testOpts.BMCRequestTimeout
	waitPower(t, name, metalv1alpha1.PowerStateOn, bound)
	t.Logf("with %d dead BMCs the healthy server was claimed and powered on in %s", dead, time.Since(start).Round(10*time.Millisecond))
}

// A BMC pass has a deadline, the pass timeout, longer than one request's: a pass makes several
// requests in turn. A BMC answering every request just within the request timeout makes a pass
// end after the pass timeout with Timeout, instead of taking as many request timeouts as the
// pass has requests; it is not taken for unreachable: it answers. A BMC answering in half the
// request timeout, so that none of its passes fits one request timeout but they fit the pass
// timeout, is Connected (with passes bounded by one request's time it failed forever).
func TestBMCPassIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		latency time.Duration
		want    string
		// bound: the first pass adds the finalizer, the second talks to the BMC; a BMC that
		// answers in half a request timeout may take a pass more once it has a session.
		bound time.Duration
	}{
		{"beyond the pass timeout", testOpts.BMCRequestTimeout * 9 / 10, "False/" + string(bmc.ReasonTimeout), testOpts.BMCPassTimeout + 3*time.Second},
		{"within the pass timeout", testOpts.BMCRequestTimeout / 2, "True/" + metalv1alpha1.ReasonConnected, 2*testOpts.BMCPassTimeout + 3*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startGraveyard(t, 1, redfish.Faults{Latency: redfish.Duration(tc.latency)}).BMC(0)
			name := "slow-bmc-" + strconv.Itoa(int(tc.latency/time.Millisecond))
			addBMC(t, b, name, false)
			start := time.Now()
			testenv.Eventually(t, tc.bound, "slow BMC reported within its pass deadline", func() (bool, string) {
				o := &metalv1alpha1.BMC{}
				if err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, o); err != nil {
					return false, err.Error()
				}
				got := readyReason(o.Status.Conditions)
				return got == tc.want, got
			})
			t.Logf("slow BMC reported after %s, %d requests answered (request timeout %s, pass timeout %s)", time.Since(start).Round(10*time.Millisecond),
				b.Stats().Requests, testOpts.BMCRequestTimeout, testOpts.BMCPassTimeout)
		})
	}
}

// A paused object gets no pass: an operation asked of a paused Server reaches the BMC only once
// the pause is lifted ("metalhub move" relies on it for a fleet in transit).
func TestPausedServerIsNotActedOn(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	name := fleet.RegisterBMC(t, b, "paused")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, time.Minute)
	before := len(fleet.BoxActions(b))
	s := suite.Server(env, name)
	if err := lifecycle.PatchMetadata(ctx(), env.Client, s, func(o client.Object) {
		lifecycle.SetAnnotation(o, lifecycle.PausedAnnotation, "true")
		lifecycle.SetAnnotation(o, metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationForceOnServer)
	}); err != nil {
		t.Fatal(err)
	}
	for range 30 {
		if got := fleet.BoxActions(b)[before:]; len(got) > 0 {
			t.Fatalf("a paused server was acted on: %+v", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := lifecycle.PatchMetadata(ctx(), env.Client, suite.Server(env, name), func(o client.Object) {
		lifecycle.RemoveAnnotation(o, lifecycle.PausedAnnotation)
	}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the operation after the pause", func() (bool, string) {
		return len(fleet.BoxActions(b)) > before, "no BMC action yet"
	})
}

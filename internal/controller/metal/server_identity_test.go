package metal

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccontroller"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// Issue 23: a Server acts only on its own machine, proven before every action.

// identityPasses is how many passes of the mismatched Server (and of its BMC object) a test
// watches for actions: the acceptance's ten resync periods, each brought on at once by a change
// to the objects instead of waited for, and each seen to reach the machine behind the address.
const identityPasses = 10

// availableServer registers a BMC and waits until its server is Available (and Off).
func availableServer(t *testing.T, prefix string) (string, *redfish.BMC) {
	t.Helper()
	b := fleet.Take(t)
	name := fleet.RegisterBMC(t, b, prefix)
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	waitPower(t, name, metalv1alpha1.PowerStateOff, 15*time.Second)
	return name, b
}

// takeBMCLike takes the next free BMC of the fleet whose first system has the same Redfish path
// as b's: real fleets of one vendor all answer at /redfish/v1/Systems/1 (or the like), which is
// why the path proves nothing. The ones passed over are not used by anyone.
func takeBMCLike(t *testing.T, b *redfish.BMC) *redfish.BMC {
	t.Helper()
	for range 40 {
		if o := fleet.Take(t); o.SystemIDs()[0] == b.SystemIDs()[0] {
			return o
		}
	}
	t.Fatalf("no BMC like %d in the fleet", b.Index())
	return nil
}

// claimedOnLike is claimedOn with a BMC like b.
func claimedOnLike(t *testing.T, prefix string, like *redfish.BMC) (string, *redfish.BMC) {
	t.Helper()
	b := takeBMCLike(t, like)
	name := fleet.RegisterBMC(t, b, prefix)
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	claimServer(t, name, prefix+"-claim", metalv1alpha1.PowerOn)
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateReserved, 15*time.Second)
	waitPower(t, name, metalv1alpha1.PowerStateOn, 15*time.Second)
	return name, b
}

// forgetPowerRecord removes the record of the server's last power action, as on a server that
// has been Available for longer than --power-timeout: its next pass acts on what it reads, so a
// test that shows it does not act shows it for the right reason.
func forgetPowerRecord(t *testing.T, name string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "forget the power record of "+name, func() (bool, string) {
		s := suite.Server(env, name)
		err := lifecycle.PatchMetadata(ctx(), env.Client, s, func(o client.Object) { lifecycle.RemoveAnnotation(o, serverstate.PowerAnnotation) })
		return err == nil, fmt.Sprint(err)
	})
}

// watchUntouched checks, through passes passes of the Server name and of its BMC object bmcName
// and then a while of wall time (past a hardware-log poll), that nothing reaches the claimed box
// behind b (it stays On), and that name, whose address addr reaches it, keeps reporting the
// mismatch and keeps its state. Each pass is brought on by a change to the objects' annotations (poke)
// and counted only once a request of it arrived at b through addr: a pass that did not reach the
// box would prove nothing.
func watchUntouched(t *testing.T, b *redfish.BMC, addr, name, bmcName string, start time.Time, passes int) {
	t.Helper()
	b.JournalRequests(true)
	t.Cleanup(func() { b.JournalRequests(false) })
	through := func() int {
		n := 0
		for _, s := range b.RequestSpans() {
			if s.Host == addr {
				n++
			}
		}
		return n
	}
	check := func() {
		t.Helper()
		if recs := suite.Since(fleet.BoxActions(b), start); len(recs) != 0 {
			t.Fatalf("actions on the claimed box through another server's address: %+v", recs)
		}
		if p := systemOf(b).PowerState(); p != redfish.PowerOn {
			t.Fatalf("the claimed box is %s", p)
		}
		s := suite.Server(env, name)
		if c := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionIdentityMismatch); c == nil || c.Status != metav1.ConditionTrue {
			t.Fatalf("the mismatch was no longer reported: %+v", s.Status.Conditions)
		}
		if durableState(s) != string(metalv1alpha1.ServerStateAvailable) {
			t.Fatalf("%s left Available: %s", name, durableState(s))
		}
	}
	for i := 1; i <= passes; i++ {
		before := through()
		poke(t, &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: name}})
		poke(t, &metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: bmcName}})
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("pass %d of %s reaches %s", i, name, addr), func() (bool, string) {
			n := through()
			return n > before, fmt.Sprintf("%d requests through %s", n, addr)
		})
		check()
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		check()
		time.Sleep(time.Second) // the window being watched, not a synchronisation
	}
}

// waitMismatch waits until the Server reports another machine at its address, naming it.
func waitMismatch(t *testing.T, name, answered string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, name+" IdentityMismatch naming "+answered, func() (bool, string) {
		s := suite.Server(env, name)
		if s == nil {
			return false, "no server"
		}
		c := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionIdentityMismatch)
		ready := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(strings.ToLower(c.Message), strings.ToLower(answered)) &&
			ready != nil && ready.Reason == metalv1alpha1.ReasonIdentityMismatch, fmt.Sprintf("%+v", s.Status.Conditions)
	})
}

// waitVerified waits until the Server's machine answers again: no mismatch, Ready.
func waitVerified(t *testing.T, name string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, name+" verified again", func() (bool, string) {
		s := suite.Server(env, name)
		if s == nil {
			return false, "no server"
		}
		ready := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionReady)
		return apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionIdentityMismatch) == nil &&
			ready != nil && ready.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", s.Status.Conditions)
	})
}

// bmcReason waits until a BMC object's Ready reason is want.
func bmcReason(t *testing.T, name, want string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "BMC "+name+" "+want, func() (bool, string) {
		b := &metalv1alpha1.BMC{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, b); err != nil {
			return false, err.Error()
		}
		c := apimeta.FindStatusCondition(b.Status.Conditions, metalv1alpha1.ConditionReady)
		return c != nil && c.Reason == want, fmt.Sprintf("%+v", b.Status.Conditions)
	})
}

// An Available server's BMC address is handed to another BMC whose box is claimed and On (a
// DHCP lease or IPAM swap): the Available server must not force that box off. On 3d9e66d it did
// at its next pass.
func TestAddressHandedToAnotherMachineActsOnNothing(t *testing.T) {
	t.Parallel()
	idle, bIdle := availableServer(t, "reuse-idle")
	claimed, bClaimed := claimedOnLike(t, "reuse-claimed", bIdle)
	forgetPowerRecord(t, idle)
	start := time.Now()
	bIdle.AnswerAs(bClaimed)
	t.Cleanup(func() { bIdle.AnswerAs(nil) })

	// Nothing tells the operator of a swapped lease: its next pass finds out, brought on here
	// rather than waited for.
	poke(t, &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: idle}})
	waitMismatch(t, idle, systemOf(bClaimed).UUID())
	bmcReason(t, "reuse-idle", metalv1alpha1.ReasonIdentityMismatch)
	watchUntouched(t, bClaimed, fmt.Sprintf("127.0.0.1:%d", suite.Port(bIdle)), idle, "reuse-idle", start, identityPasses)
	if s := suite.Server(env, claimed); durableState(s) != string(metalv1alpha1.ServerStateReserved) {
		t.Errorf("the claimed server left Reserved: %s", durableState(s))
	}

	// The address comes back: the idle server resumes without acting (its box is Off already).
	back := time.Now()
	bIdle.AnswerAs(nil)
	poke(t, &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: idle}})
	waitVerified(t, idle)
	bmcReason(t, "reuse-idle", metalv1alpha1.ReasonConnected)
	if recs := suite.Since(fleet.BoxActions(bIdle), back); len(recs) != 0 {
		t.Errorf("actions on the idle box after the address came back: %+v", recs)
	}
	if recs := suite.Since(fleet.BoxActions(bClaimed), start); len(recs) != 0 {
		t.Errorf("actions on the claimed box: %+v", recs)
	}
}

// The acceptance: an Endpoint edited to point at another BMC whose box is claimed and On. The
// emulated BMCs all answer on 127.0.0.1, each on its own port; the claimed box's BMC answers on
// 127.0.0.2 too, at the idle BMC's port, as BMCs in a data centre share a port at their own IPs.
// Through ten passes (the acceptance's five minutes, ten resyncs) no action reaches the claimed box and the edited server says
// why; edited back, it resumes with no action. On 3d9e66d the idle server forced the claimed box
// off at its next pass.
func TestEndpointEditedOntoAClaimedBoxActsOnNothing(t *testing.T) {
	t.Parallel()
	bIdle := fleet.Take(t)
	user, pass := bIdle.Credentials()
	ep := &metalv1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Name: "ep-idle"}, Spec: metalv1alpha1.EndpointSpec{IP: "127.0.0.1"}}
	sec := &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: "ep-idle"}, StringData: map[string]string{"username": user, "password": pass}}
	obj := suite.BMCObject(bIdle, "ep-idle")
	obj.Spec.Access, obj.Spec.EndpointRef = nil, &corev1.LocalObjectReference{Name: "ep-idle"}
	for _, o := range []client.Object{ep, sec, obj} {
		if err := env.Client.Create(ctx(), o); err != nil {
			t.Fatal(err)
		}
	}
	idle := bmccontroller.ServerName("ep-idle", bIdle.SystemIDs()[0])
	suite.WaitServerState(t, env, idle, metalv1alpha1.ServerStateAvailable, 60*time.Second)
	claimed, bClaimed := claimedOnLike(t, "ep-claimed", bIdle)
	if err := bClaimed.ListenAt(fmt.Sprintf("127.0.0.2:%d", suite.Port(bIdle))); err != nil {
		t.Fatal(err)
	}
	setIP := func(ip string) {
		testenv.Eventually(t, 5*time.Second, "edit the Endpoint", func() (bool, string) {
			e := &metalv1alpha1.Endpoint{}
			if err := env.Client.Get(ctx(), client.ObjectKey{Name: "ep-idle"}, e); err != nil {
				return false, err.Error()
			}
			patch := client.MergeFrom(e.DeepCopy())
			e.Spec.IP = ip
			err := env.Client.Patch(ctx(), e, patch)
			return err == nil, fmt.Sprint(err)
		})
	}
	forgetPowerRecord(t, idle)
	start := time.Now()
	setIP("127.0.0.2")
	waitMismatch(t, idle, systemOf(bClaimed).UUID())
	watchUntouched(t, bClaimed, fmt.Sprintf("127.0.0.2:%d", suite.Port(bIdle)), idle, "ep-idle", start, identityPasses)
	if s := suite.Server(env, claimed); durableState(s) != string(metalv1alpha1.ServerStateReserved) {
		t.Errorf("the claimed server left Reserved: %s", durableState(s))
	}
	back := time.Now()
	setIP("127.0.0.1")
	waitVerified(t, idle)
	if recs := suite.Since(fleet.BoxActions(bIdle), back); len(recs) != 0 {
		t.Errorf("actions on the idle box after the Endpoint was edited back: %+v", recs)
	}
	if recs := suite.Since(fleet.BoxActions(bClaimed), start); len(recs) != 0 {
		t.Errorf("actions on the claimed box: %+v", recs)
	}
}

// A user edits a BMC's address onto another registered BMC's (a typo, a copy-paste): the edited
// BMC's server reports the mismatch and acts on nothing; the BMC it now points at keeps its
// Servers and goes on; the edit undone, everything resumes with no action.
func TestEditedAddressActsOnNothing(t *testing.T) {
	t.Parallel()
	idle, bIdle := availableServer(t, "edit-idle")
	claimed, bClaimed := claimedOnLike(t, "edit-claimed", bIdle)
	claim := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "edit-claimed-claim"}}
	forgetPowerRecord(t, idle)
	start := time.Now()
	setPort := func(p int32) {
		testenv.Eventually(t, 5*time.Second, "edit the BMC's port", func() (bool, string) {
			b := &metalv1alpha1.BMC{}
			if err := env.Client.Get(ctx(), client.ObjectKey{Name: "edit-idle"}, b); err != nil {
				return false, err.Error()
			}
			patch := client.MergeFrom(b.DeepCopy())
			b.Spec.Protocol.Port = p
			err := env.Client.Patch(ctx(), b, patch)
			return err == nil, fmt.Sprint(err)
		})
	}
	setPort(suite.Port(bClaimed))
	waitMismatch(t, idle, systemOf(bClaimed).UUID())
	bmcReason(t, "edit-idle", metalv1alpha1.ReasonIdentityMismatch)

	// The claimed server still follows its claim: it is not frozen by the other's edit.
	setClaimPower(t, claim, metalv1alpha1.PowerOff)
	waitPower(t, claimed, metalv1alpha1.PowerStateOff, 30*time.Second)
	bmcReason(t, "edit-claimed", metalv1alpha1.ReasonConnected)
	if s := suite.Server(env, idle); durableState(s) != string(metalv1alpha1.ServerStateAvailable) {
		t.Errorf("the edited server left Available: %s", durableState(s))
	}
	offs := 0
	for _, r := range suite.Since(fleet.BoxActions(bClaimed), start) {
		if r.Action == redfish.ActionReset {
			offs++
		}
	}
	if offs != 1 {
		t.Errorf("resets on the claimed box: %d, want the claim's one power off: %+v", offs, suite.Since(fleet.BoxActions(bClaimed), start))
	}

	back := time.Now()
	setPort(suite.Port(bIdle))
	waitVerified(t, idle)
	bmcReason(t, "edit-idle", metalv1alpha1.ReasonConnected)
	if recs := suite.Since(fleet.BoxActions(bIdle), back); len(recs) != 0 {
		t.Errorf("actions on the idle box after the edit was undone: %+v", recs)
	}
}

// A replaced mainboard answers at the same address and path with another UUID and serial: no
// action on it, even one its claim asks for, until the user accepts it with the annotation; then
// it is the Server's machine, its inventory is read anew, and the claim's power follows.
func TestReplacedBoardNeedsTheAnnotation(t *testing.T) {
	t.Parallel()
	name, b, claim := claimedOn(t, "board")
	sys := systemOf(b)
	newUUID, newSerial := "0b0a4d00-0000-4000-8000-00000000b0a4", "SWAPPED01"
	start := time.Now()
	sys.ReplaceBoard(strings.ToUpper(newUUID), newSerial)
	waitMismatch(t, name, newUUID)
	setClaimPower(t, claim, metalv1alpha1.PowerOff)
	noActions(t, b, start, 10*time.Second, "actions on the replaced board before it was accepted") // past a few retries of the mismatch
	if p := sys.PowerState(); p != redfish.PowerOn {
		t.Fatalf("the replaced board is %s", p)
	}

	annotate(t, name, metalv1alpha1.AcceptSystemUUIDAnnotation, strings.ToUpper(newUUID))
	testenv.Eventually(t, 60*time.Second, "replacement accepted", func() (bool, string) {
		s := suite.Server(env, name)
		_, pending := s.Annotations[metalv1alpha1.AcceptSystemUUIDAnnotation]
		return s.Spec.SystemUUID == newUUID && !pending && s.Status.SerialNumber == newSerial,
			fmt.Sprintf("uuid %s, annotation pending %v, serial %s", s.Spec.SystemUUID, pending, s.Status.SerialNumber)
	})
	waitVerified(t, name)
	waitPower(t, name, metalv1alpha1.PowerStateOff, 30*time.Second)
	waitEvent(t, name, metalv1alpha1.ReasonSystemReplaced)
	bmcReason(t, "board", metalv1alpha1.ReasonConnected)
}

// setClaimPower patches a claim's power.
func setClaimPower(t *testing.T, claim *metalv1alpha1.ServerClaim, power metalv1alpha1.Power) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "claim power "+string(power), func() (bool, string) {
		c := &metalv1alpha1.ServerClaim{}
		if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(claim), c); err != nil {
			return false, err.Error()
		}
		patch := client.MergeFrom(c.DeepCopy())
		c.Spec.Power = power
		err := env.Client.Patch(ctx(), c, patch)
		return err == nil, fmt.Sprint(err)
	})
}

// createInlineServer creates a Server registered inline (spec.bmc) for b's address.
func createInlineServer(t *testing.T, name, uuid string, b *redfish.BMC, secret string) *metalv1alpha1.Server {
	t.Helper()
	s := &metalv1alpha1.Server{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: metalv1alpha1.ServerSpec{
			SystemUUID: uuid,
			BMC: &metalv1alpha1.BMCAccess{
				Protocol:     metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: suite.Port(b), Scheme: metalv1alpha1.HTTPScheme},
				Address:      "127.0.0.1",
				BMCSecretRef: corev1.LocalObjectReference{Name: secret},
			},
		},
	}
	if err := env.Client.Create(ctx(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// A second Server for a machine that has one (made by hand, registered inline with the address
// in another spelling): both report it, neither acts; once the copy is deleted (it lets go
// without touching the box) the first resumes.
func TestServerTwiceActsThroughNeither(t *testing.T) {
	t.Parallel()
	name, b := availableServer(t, "twice")
	sys := systemOf(b)
	twin := createInlineServer(t, "twice-by-hand", "{"+strings.ToUpper(sys.UUID())+"}", b, "twice")
	for _, n := range []string{name, twin.Name} {
		waitServerReason(t, n, metalv1alpha1.ReasonDuplicateIdentity, false)
	}
	// The box is turned on by hand, and the first server's power record goes: acting through
	// either Server, an Available one would turn it off.
	forgetPowerRecord(t, name)
	start := time.Now()
	sys.SetPowerState(redfish.PowerOn)
	noActions(t, b, start, 40*time.Second, "actions on a machine with two Servers") // past a resync of each
	// The copy's deletion wakes the first at once: paused meanwhile, the first cannot act, so
	// whatever reaches the machine until the copy is gone is the deletion's.
	setPause(t, &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: name}}, "twice")
	testenv.Eventually(t, 30*time.Second, "the pause acknowledged", func() (bool, string) {
		s := suite.Server(env, name)
		return s.Annotations[lifecycle.PauseAckAnnotation] == "twice", fmt.Sprint(s.Annotations)
	})
	if err := env.Client.Delete(ctx(), twin); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the copy is gone", func() (bool, string) { return suite.Server(env, twin.Name) == nil, "still there" })
	if recs := suite.Since(fleet.BoxActions(b), start); len(recs) != 0 {
		t.Fatalf("the copy's deletion acted on the machine: %+v", recs)
	}
	// The first resumes: Available turns the box off again.
	setPause(t, &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: name}}, "")
	waitPower(t, name, metalv1alpha1.PowerStateOff, 60*time.Second)
	waitVerified(t, name)
}

// A BMC object for a machine that is already a Server registered inline never creates a second
// Server (on 3d9e66d it created <bmc>-<system>, whose Initial step forced the box off).
func TestBMCForAnInlineServerCreatesNothing(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	user, pass := b.Credentials()
	sec := &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: "inline-first"}, StringData: map[string]string{"username": user, "password": pass}}
	if err := env.Client.Create(ctx(), sec); err != nil {
		t.Fatal(err)
	}
	sys := systemOf(b)
	inline := createInlineServer(t, "inline-first", sys.UUID(), b, "inline-first")
	suite.WaitServerState(t, env, inline.Name, metalv1alpha1.ServerStateAvailable, 60*time.Second)
	start := time.Now()
	obj := suite.BMCObject(b, "inline-first")
	if err := env.Client.Create(ctx(), obj); err != nil {
		t.Fatal(err)
	}
	bmcReason(t, obj.Name, metalv1alpha1.ReasonDuplicateIdentity)
	if s := suite.Server(env, bmccontroller.ServerName(obj.Name, sys.ID())); s != nil {
		t.Fatalf("a second Server %s was created for a machine that has one", s.Name)
	}
	if recs := suite.Since(fleet.BoxActions(b), start); len(recs) != 0 {
		t.Errorf("actions on the machine: %+v", recs)
	}
	if s := suite.Server(env, inline.Name); durableState(s) != string(metalv1alpha1.ServerStateAvailable) {
		t.Errorf("the inline server left Available: %s", durableState(s))
	}
}

// A BMC object that was there first but never held anything (its Endpoint and Secret were
// missing), written through an Endpoint while the one that holds the Servers is written inline:
// when its Endpoint and Secret appear it takes nothing. On 3d9e66d it created a second Server
// for the claimed machine.
func TestOlderEmptyBMCNeverTakesHeldServers(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	older := suite.BMCObject(b, "late-a")
	older.Spec.Access, older.Spec.EndpointRef = nil, &corev1.LocalObjectReference{Name: "late-a"}
	if err := env.Client.Create(ctx(), older); err != nil {
		t.Fatal(err)
	}
	bmcReason(t, "late-a", metalv1alpha1.ReasonEndpointNotFound)
	name := fleet.RegisterBMC(t, b, "late-b")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 60*time.Second)
	claimServer(t, name, "late-b-claim", metalv1alpha1.PowerOn)
	waitPower(t, name, metalv1alpha1.PowerStateOn, 30*time.Second)
	start := time.Now()

	ep := &metalv1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Name: "late-a"}, Spec: metalv1alpha1.EndpointSpec{IP: "127.0.0.1"}}
	if err := env.Client.Create(ctx(), ep); err != nil {
		t.Fatal(err)
	}
	user, pass := b.Credentials()
	sec := &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: "late-a"}, StringData: map[string]string{"username": user, "password": pass}}
	if err := env.Client.Create(ctx(), sec); err != nil {
		t.Fatal(err)
	}
	bmcReason(t, "late-a", metalv1alpha1.ReasonDuplicateIdentity)
	if s := suite.Server(env, bmccontroller.ServerName("late-a", systemOf(b).ID())); s != nil {
		t.Fatalf("the older, empty BMC created Server %s for a claimed machine", s.Name)
	}
	bmcReason(t, "late-b", metalv1alpha1.ReasonConnected)
	if recs := suite.Since(fleet.BoxActions(b), start); len(recs) != 0 {
		t.Errorf("actions on the claimed machine: %+v", recs)
	}
}

// A Server deleted while its claim still holds the box keeps holding it: a second registration
// of the machine made meanwhile does not rediscover (force off, network boot) a box in use.
// Once the claim lets go, the old Server goes without touching the box and the newcomer is the
// machine's only Server. (Found by the campaign, seed 24: the newcomer forced a claimed box off.)
func TestDeletedClaimedServerKeepsItsMachineFromANewcomer(t *testing.T) {
	t.Parallel()
	name, b, claim := claimedOn(t, "held-twin")
	sys := systemOf(b)
	if err := env.Client.Delete(ctx(), suite.Server(env, name)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	twin := createInlineServer(t, "held-twin-by-hand", sys.UUID(), b, "held-twin")
	waitServerReason(t, twin.Name, metalv1alpha1.ReasonDuplicateIdentity, false)
	noActions(t, b, start, 10*time.Second, "a claimed machine was acted on through its second registration") // past a resync
	if got := sys.PowerState(); got != redfish.PowerOn {
		t.Fatalf("the claimed box is %s", got)
	}
	if err := env.Client.Delete(ctx(), claim); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the old Server gone", func() (bool, string) { return suite.Server(env, name) == nil, "still there" })
	waitServerReason(t, twin.Name, metalv1alpha1.ReasonDuplicateIdentity, true)
}

// waitServerReason waits until Server name reports Ready with reason (or, with not, any other).
func waitServerReason(t *testing.T, name, reason string, not bool) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("%s Ready reason %s (not: %v)", name, reason, not), func() (bool, string) {
		s := suite.Server(env, name)
		if s == nil {
			return false, "no server"
		}
		c := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionReady)
		return (c != nil && c.Reason == reason) != not, fmt.Sprintf("%+v", s.Status.Conditions)
	})
}

// noActions watches b's recorder for d and fails on any request recorded since start.
func noActions(t *testing.T, b *redfish.BMC, start time.Time, d time.Duration, what string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); {
		if recs := suite.Since(fleet.BoxActions(b), start); len(recs) != 0 {
			t.Fatalf("%s: %+v", what, recs)
		}
		time.Sleep(500 * time.Millisecond) // the window being watched, not a synchronisation
	}
}

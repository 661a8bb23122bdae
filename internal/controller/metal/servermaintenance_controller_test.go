package metal

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

func getMaintenance(ns, name string) *metalv1alpha1.ServerMaintenance {
	return getObject(ns, name, &metalv1alpha1.ServerMaintenance{})
}

func waitMaintenance(t *testing.T, ns, name, want string, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, "maintenance "+name+" "+want, func() (bool, string) {
		got := metaltest.MaintenanceStatus(getMaintenance(ns, name))
		return got == want, got
	})
}

func deleteMaintenance(t *testing.T, ns, name string) {
	t.Helper()
	if err := env.Client.Delete(ctx(), getMaintenance(ns, name)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "maintenance "+name+" gone", func() (bool, string) {
		m := getMaintenance(ns, name)
		return m == nil, metaltest.MaintenanceStatus(m)
	})
}

func approve(t *testing.T, ns, claim string) {
	t.Helper()
	if err := lifecycle.PatchMetadata(ctx(), env.Client, getClaim(ns, claim), func(o client.Object) {
		l := o.GetLabels()
		l[metalv1alpha1.MaintenanceApprovedLabel] = "true"
		o.SetLabels(l)
	}); err != nil {
		t.Fatal(err)
	}
}

func waitLabel(t *testing.T, ns, claim, key string, present bool) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("claim %s label %s present=%v", claim, key, present), func() (bool, string) {
		c := getClaim(ns, claim)
		_, ok := c.Labels[key]
		return ok == present, fmt.Sprint(c.Labels)
	})
}

// boundClaims creates one claim per server (by a per-server label) with power On and waits until
// each server is Reserved and on.
func boundClaims(t *testing.T, ns, prefix string, names []string, bmcs []*redfish.BMC) {
	t.Helper()
	for i := range names {
		c := selectorClaim(ns, fmt.Sprintf("%s-%d", prefix, i), metalv1alpha1.PowerOn,
			&metav1.LabelSelector{MatchLabels: map[string]string{"pool": fmt.Sprintf("%s-%d", prefix, i)}})
		if err := env.Client.Create(ctx(), c); err != nil {
			t.Fatal(err)
		}
	}
	for i, name := range names {
		waitClaim(t, ns, fmt.Sprintf("%s-%d", prefix, i), "Bound/Bound", 20*time.Second)
		suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateReserved, 10*time.Second)
		waitSystemPower(t, bmcs[i], redfish.PowerOn, 10*time.Second)
		waitPower(t, name, metalv1alpha1.PowerStateOn, 10*time.Second)
	}
}

// Enforced maintenance takes a Reserved server at once, with its power; a status wipe during it
// changes nothing; deleting it returns the server to Reserved with the claim's power.
// OwnerApproval waits for the claim owner's label.
func TestMaintenanceEnforcedAndApproval(t *testing.T) {
	const ns = "default"
	names, bmcs := availableServers(t, "maint", 2, func(i int) map[string]string {
		return map[string]string{"pool": fmt.Sprintf("maint-%d", i)}
	})
	boundClaims(t, ns, "maint", names, bmcs)

	// Enforced.
	if err := env.Client.Create(ctx(), metaltest.NewMaintenance(ns, "maint-enforced", names[0], metalv1alpha1.ServerMaintenancePolicyEnforced, metalv1alpha1.PowerOff, 0)); err != nil {
		t.Fatal(err)
	}
	suite.WaitServerState(t, env, names[0], metalv1alpha1.ServerStateMaintenance, 10*time.Second)
	waitSystemPower(t, bmcs[0], redfish.PowerOff, 10*time.Second)
	waitMaintenance(t, ns, "maint-enforced", "InMaintenance/"+metalv1alpha1.ReasonInMaintenance, 10*time.Second)
	waitLabel(t, ns, "maint-0", metalv1alpha1.MaintenanceNeededLabel, true)
	if c := getClaim(ns, "maint-0"); c.Annotations[metalv1alpha1.MaintenanceReasonAnnotation] != "firmware update" {
		t.Errorf("maintenance reason not on the claim: %v", c.Annotations)
	}
	waitPower(t, names[0], metalv1alpha1.PowerStateOff, 10*time.Second)
	time.Sleep(300 * time.Millisecond)

	// Wipe every status involved: nothing moves.
	wiped := time.Now()
	suite.WipeStatus(t, env, names[0])
	m := getMaintenance(ns, "maint-enforced")
	m.Status = metalv1alpha1.ServerMaintenanceStatus{}
	if err := testenv.WriteStatus(ctx(), env.Client, m); err != nil {
		t.Fatal(err)
	}
	// (The claim controller writes the claim too, showing the server's power as its rebuilt
	// status reports it: read again on a conflict.)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := getClaim(ns, "maint-0")
		c.Status = metalv1alpha1.ServerClaimStatus{}
		return testenv.WriteStatus(ctx(), env.Client, c)
	}); err != nil {
		t.Fatal(err)
	}
	waitMaintenance(t, ns, "maint-enforced", "InMaintenance/"+metalv1alpha1.ReasonInMaintenance, 10*time.Second)
	suite.WaitServerState(t, env, names[0], metalv1alpha1.ServerStateMaintenance, 10*time.Second)
	waitClaim(t, ns, "maint-0", "Bound/Bound", 10*time.Second)
	time.Sleep(1500 * time.Millisecond) // room for a wrong action to show
	if recs := suite.Since(fleet.BoxActions(bmcs[0]), wiped); len(recs) != 0 {
		t.Errorf("BMC actions after the wipe: %v", suite.ResetTypes(recs))
	}
	if s := suite.Server(env, names[0]); durableState(s) != string(metalv1alpha1.ServerStateMaintenance) || s.Spec.ServerMaintenanceRef == nil {
		t.Errorf("after the wipe: state %s, maintenance ref %+v", durableState(s), s.Spec.ServerMaintenanceRef)
	}

	// Deleting it hands the server back: Reserved, the claim's power, marks cleared.
	deleteMaintenance(t, ns, "maint-enforced")
	suite.WaitServerState(t, env, names[0], metalv1alpha1.ServerStateReserved, 10*time.Second)
	waitSystemPower(t, bmcs[0], redfish.PowerOn, 10*time.Second)
	waitLabel(t, ns, "maint-0", metalv1alpha1.MaintenanceNeededLabel, false)
	if s := suite.Server(env, names[0]); s.Spec.ServerMaintenanceRef != nil || s.Spec.ServerClaimRef == nil {
		t.Errorf("handed back: maintenance ref %+v, claim ref %+v", s.Spec.ServerMaintenanceRef, s.Spec.ServerClaimRef)
	}

	// OwnerApproval waits for the owner.
	if err := env.Client.Create(ctx(), metaltest.NewMaintenance(ns, "maint-approval", names[1], metalv1alpha1.ServerMaintenancePolicyOwnerApproval, metalv1alpha1.PowerOff, 0)); err != nil {
		t.Fatal(err)
	}
	waitLabel(t, ns, "maint-1", metalv1alpha1.MaintenanceNeededLabel, true)
	waitMaintenance(t, ns, "maint-approval", "Pending/"+metalv1alpha1.ReasonWaitingForApproval, 10*time.Second)
	asked := time.Now()
	time.Sleep(time.Second)
	if s := suite.Server(env, names[1]); durableState(s) != string(metalv1alpha1.ServerStateReserved) || s.Spec.ServerMaintenanceRef != nil {
		t.Fatalf("maintenance started without approval: state %s, ref %+v", durableState(s), s.Spec.ServerMaintenanceRef)
	}
	if recs := suite.Since(fleet.BoxActions(bmcs[1]), asked); len(recs) != 0 {
		t.Errorf("BMC actions before approval: %v", suite.ResetTypes(recs))
	}
	approve(t, ns, "maint-1")
	suite.WaitServerState(t, env, names[1], metalv1alpha1.ServerStateMaintenance, 10*time.Second)
	waitSystemPower(t, bmcs[1], redfish.PowerOff, 10*time.Second)
	waitMaintenance(t, ns, "maint-approval", "InMaintenance/"+metalv1alpha1.ReasonInMaintenance, 10*time.Second)
	deleteMaintenance(t, ns, "maint-approval")
	suite.WaitServerState(t, env, names[1], metalv1alpha1.ServerStateReserved, 10*time.Second)
	waitSystemPower(t, bmcs[1], redfish.PowerOn, 10*time.Second)
	waitLabel(t, ns, "maint-1", metalv1alpha1.MaintenanceApprovedLabel, false)
	for _, reason := range []string{"Started", "Ended"} {
		waitEvent(t, "maint-approval", reason)
	}
	checkNoDoubleWrites(t)
}

// Several maintenances of one server go highest priority first; each asks the owner again; the
// maintenance boot configuration is created, referenced and removed with its maintenance.
func TestMaintenancePriorityAndBootConfiguration(t *testing.T) {
	const ns = "default"
	names, bmcs := availableServers(t, "prio", 1, func(int) map[string]string { return map[string]string{"pool": "prio-0"} })
	boundClaims(t, ns, "prio", names, bmcs)
	server := names[0]

	low := metaltest.NewMaintenance(ns, "prio-low", server, metalv1alpha1.ServerMaintenancePolicyOwnerApproval, metalv1alpha1.PowerOff, 1)
	if err := env.Client.Create(ctx(), low); err != nil {
		t.Fatal(err)
	}
	waitMaintenance(t, ns, "prio-low", "Pending/"+metalv1alpha1.ReasonWaitingForApproval, 10*time.Second)
	high := metaltest.NewMaintenance(ns, "prio-high", server, metalv1alpha1.ServerMaintenancePolicyOwnerApproval, metalv1alpha1.PowerOn, 10)
	high.Spec.ServerBootConfigurationTemplate = &metalv1alpha1.ServerBootConfigurationTemplate{
		Name: "prio-high-boot", Spec: metalv1alpha1.ServerBootConfigurationSpec{Image: "firmware-updater:1"}}
	if err := env.Client.Create(ctx(), high); err != nil {
		t.Fatal(err)
	}
	waitMaintenance(t, ns, "prio-low", "Pending/"+metalv1alpha1.ReasonQueued, 10*time.Second)
	waitMaintenance(t, ns, "prio-high", "Pending/"+metalv1alpha1.ReasonWaitingForApproval, 10*time.Second)

	approve(t, ns, "prio-0")
	waitMaintenance(t, ns, "prio-high", "InMaintenance/"+metalv1alpha1.ReasonInMaintenance, 10*time.Second)
	waitMaintenance(t, ns, "prio-low", "Pending/"+metalv1alpha1.ReasonQueued, 10*time.Second)
	s := suite.WaitServerState(t, env, server, metalv1alpha1.ServerStateMaintenance, 10*time.Second)
	if ref := s.Spec.MaintenanceBootConfigurationRef; ref == nil || ref.Name != "prio-high-boot" || ref.Namespace != ns {
		t.Errorf("maintenance boot configuration ref %+v", ref)
	}
	sbc := &metalv1alpha1.ServerBootConfiguration{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Namespace: ns, Name: "prio-high-boot"}, sbc); err != nil {
		t.Fatal(err)
	}
	if sbc.Spec.ServerRef.Name != server || sbc.Spec.Image != "firmware-updater:1" {
		t.Errorf("maintenance boot configuration spec %+v", sbc.Spec)
	}
	waitSystemPower(t, bmcs[0], redfish.PowerOn, 10*time.Second) // the maintenance wants it on

	// The high one ends: the low one asks the owner again, then runs.
	deleteMaintenance(t, ns, "prio-high")
	testenv.Eventually(t, 10*time.Second, "maintenance boot configuration removed", func() (bool, string) {
		err := env.Client.Get(ctx(), client.ObjectKey{Namespace: ns, Name: "prio-high-boot"}, &metalv1alpha1.ServerBootConfiguration{})
		s := suite.Server(env, server)
		return apierrors.IsNotFound(err) && s.Spec.MaintenanceBootConfigurationRef == nil, fmt.Sprint(err)
	})
	waitMaintenance(t, ns, "prio-low", "Pending/"+metalv1alpha1.ReasonWaitingForApproval, 10*time.Second)
	suite.WaitServerState(t, env, server, metalv1alpha1.ServerStateReserved, 10*time.Second)
	approve(t, ns, "prio-0")
	waitMaintenance(t, ns, "prio-low", "InMaintenance/"+metalv1alpha1.ReasonInMaintenance, 10*time.Second)
	waitSystemPower(t, bmcs[0], redfish.PowerOff, 10*time.Second)
	deleteMaintenance(t, ns, "prio-low")
	suite.WaitServerState(t, env, server, metalv1alpha1.ServerStateReserved, 10*time.Second)
	waitSystemPower(t, bmcs[0], redfish.PowerOn, 10*time.Second)
	checkNoDoubleWrites(t)
}

// Campaign seed 58: a maintenance pointed at a claimed server that is then deleted (kept for its
// claim only, so it enters nothing) reported "waiting to enter Maintenance" forever. It says
// ServerDeleting instead, whether its ref was set before the deletion or the server was already
// going when it came; and the box is not touched for it.
func TestMaintenanceOfADeletedHeldServerSaysServerDeleting(t *testing.T) {
	t.Parallel()
	name, b, claim := claimedOn(t, "mdel")
	if err := env.Client.Delete(ctx(), &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	waitServerCondition := func(typ, want string) {
		t.Helper()
		testenv.Eventually(t, 15*time.Second, "server "+typ+" "+want, func() (bool, string) {
			c := apimeta.FindStatusCondition(suite.Server(env, name).Status.Conditions, typ)
			return c != nil && string(c.Status)+"/"+c.Reason == want, fmt.Sprint(c)
		})
	}
	waitServerCondition(metalv1alpha1.ConditionDeletionBlocked, "True/Held")
	start := time.Now()

	// Already going when the maintenance comes.
	if err := env.Client.Create(ctx(), metaltest.NewMaintenance("default", "mdel-late", name, metalv1alpha1.ServerMaintenancePolicyEnforced, metalv1alpha1.PowerOff, 0)); err != nil {
		t.Fatal(err)
	}
	waitMaintenance(t, "default", "mdel-late", "Pending/"+metalv1alpha1.ReasonServerDeleting, 15*time.Second)
	deleteMaintenance(t, "default", "mdel-late")

	// Pointed at before the deletion took it: the ref a maintenance that started on a lagging
	// cache leaves.
	testenv.Eventually(t, 5*time.Second, "point the server at the maintenance", func() (bool, string) {
		s := suite.Server(env, name)
		err := lifecycle.PatchMetadata(ctx(), env.Client, s, func(o client.Object) {
			o.(*metalv1alpha1.Server).Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Namespace: "default", Name: "mdel-early"}
		})
		return err == nil, fmt.Sprint(err)
	})
	if err := env.Client.Create(ctx(), metaltest.NewMaintenance("default", "mdel-early", name, metalv1alpha1.ServerMaintenancePolicyEnforced, metalv1alpha1.PowerOff, 0)); err != nil {
		t.Fatal(err)
	}
	waitMaintenance(t, "default", "mdel-early", "Pending/"+metalv1alpha1.ReasonServerDeleting, 15*time.Second)
	if s := suite.Server(env, name); durableState(s) != string(metalv1alpha1.ServerStateReserved) {
		t.Errorf("the deleted server's state: %s, want Reserved", durableState(s))
	}
	if recs := suite.Since(fleet.BoxActions(b), start); len(recs) != 0 {
		t.Errorf("BMC actions for a maintenance of a deleted server: %v", suite.ResetTypes(recs))
	}
	deleteMaintenance(t, "default", "mdel-early")
	if err := env.Client.Delete(ctx(), claim); err != nil {
		t.Fatal(err)
	}
	waitClaimGone(t, "default", claim.Name, 20*time.Second)
}

// #15: a ServerMaintenance of the newer stack's group (maintenance.metal.ironcore.dev) is
// carried out through a metal.ironcore.dev one of its name: the server goes into Maintenance
// keeping its power (the newer kind has none), the state shows on both, and deleting it hands
// the server back. One whose name a foreign metal.ironcore.dev maintenance has is refused.
func TestMaintenanceOfTheNewerGroup(t *testing.T) {
	t.Parallel()
	const ns = "default"
	names, bmcs := availableServers(t, "mgroup", 2, func(i int) map[string]string { return map[string]string{"pool": fmt.Sprintf("mgroup-%d", i)} })
	boundClaims(t, ns, "mgroup", names, bmcs)
	waitSystemPower(t, bmcs[0], redfish.PowerOn, 10*time.Second)
	before := time.Now()
	m := &maintenancev1alpha1.ServerMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: "mgroup-m", Namespace: ns},
		Spec: maintenancev1alpha1.ServerMaintenanceSpec{ServerRef: &corev1.LocalObjectReference{Name: names[0]},
			Policy: metalv1alpha1.ServerMaintenancePolicyEnforced, Priority: 5},
	}
	if err := env.Client.Create(ctx(), m); err != nil {
		t.Fatal(err)
	}
	suite.WaitServerState(t, env, names[0], metalv1alpha1.ServerStateMaintenance, 10*time.Second)
	waitMaintenance(t, ns, "mgroup-m", "InMaintenance/"+metalv1alpha1.ReasonInMaintenance, 10*time.Second)
	testenv.Eventually(t, 10*time.Second, "the newer kind's state", func() (bool, string) {
		got := &maintenancev1alpha1.ServerMaintenance{}
		if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(m), got); err != nil {
			return false, err.Error()
		}
		return got.Status.State == metalv1alpha1.ServerMaintenanceStateInMaintenance, "state " + string(got.Status.State)
	})
	if cp := getMaintenance(ns, "mgroup-m"); cp.Spec.ServerPower != "" || cp.Spec.Priority != 5 || len(cp.OwnerReferences) != 1 {
		t.Errorf("counterpart: power %q, priority %d, owners %v", cp.Spec.ServerPower, cp.Spec.Priority, cp.OwnerReferences)
	}
	// Its status wiped: rebuilt from the counterpart, nothing else moves.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got := &maintenancev1alpha1.ServerMaintenance{}
		if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(m), got); err != nil {
			return err
		}
		got.Status = maintenancev1alpha1.ServerMaintenanceStatus{}
		return testenv.WriteStatus(ctx(), env.Client, got)
	}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the newer kind's state after a wipe", func() (bool, string) {
		got := &maintenancev1alpha1.ServerMaintenance{}
		if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(m), got); err != nil {
			return false, err.Error()
		}
		return got.Status.State == metalv1alpha1.ServerMaintenanceStateInMaintenance, "state " + string(got.Status.State)
	})
	suite.WaitServerState(t, env, names[0], metalv1alpha1.ServerStateMaintenance, time.Second)
	if recs := suite.Since(fleet.BoxActions(bmcs[0]), before); len(recs) != 0 {
		t.Errorf("BMC actions for a maintenance that asks for no power: %v", suite.ResetTypes(recs))
	}

	// Deleting it deletes its counterpart first, which hands the server back.
	got := &maintenancev1alpha1.ServerMaintenance{}
	if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(m), got); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx(), got); err != nil {
		t.Fatal(err)
	}
	suite.WaitServerState(t, env, names[0], metalv1alpha1.ServerStateReserved, 10*time.Second)
	testenv.Eventually(t, 10*time.Second, "both maintenances gone", func() (bool, string) {
		err := env.Client.Get(ctx(), client.ObjectKeyFromObject(m), &maintenancev1alpha1.ServerMaintenance{})
		return apierrors.IsNotFound(err) && getMaintenance(ns, "mgroup-m") == nil, fmt.Sprintf("newer kind: %v", err)
	})

	// A foreign metal.ironcore.dev maintenance of the same name: refused, the foreign one untouched.
	foreign := metaltest.NewMaintenance(ns, "mgroup-clash", names[1], metalv1alpha1.ServerMaintenancePolicyOwnerApproval, "", 0)
	if err := env.Client.Create(ctx(), foreign); err != nil {
		t.Fatal(err)
	}
	clash := &maintenancev1alpha1.ServerMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: "mgroup-clash", Namespace: ns},
		Spec: maintenancev1alpha1.ServerMaintenanceSpec{ServerRef: &corev1.LocalObjectReference{Name: names[0]},
			Policy: metalv1alpha1.ServerMaintenancePolicyEnforced},
	}
	if err := env.Client.Create(ctx(), clash); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, "mgroup-clash", metalv1alpha1.ReasonMaintenanceConflict)
	testenv.Eventually(t, 10*time.Second, "conflict reported", func() (bool, string) {
		got := &maintenancev1alpha1.ServerMaintenance{}
		if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(clash), got); err != nil {
			return false, err.Error()
		}
		c := apimeta.FindStatusCondition(got.Status.Conditions, metalv1alpha1.ConditionReady)
		return c != nil && c.Reason == metalv1alpha1.ReasonMaintenanceConflict, fmt.Sprintf("conditions %v", got.Status.Conditions)
	})
	if f := getMaintenance(ns, "mgroup-clash"); f == nil || f.Spec.ServerRef.Name != names[1] || len(f.OwnerReferences) != 0 {
		t.Errorf("the foreign maintenance was touched: %+v", f)
	}
	if s := suite.Server(env, names[0]); s.Spec.ServerMaintenanceRef != nil {
		t.Errorf("server taken into maintenance by a refused one: %+v", s.Spec.ServerMaintenanceRef)
	}
}

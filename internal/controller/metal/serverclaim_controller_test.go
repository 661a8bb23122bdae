package metal

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccontroller"
	"github.com/metalhub/metalhub/internal/controller/metal/claim"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// ---- helpers ---------------------------------------------------------------------------------

// registerLabeled registers an emulated BMC whose labels (copied onto its Server) include lbls,
// and returns the Server's name.
func registerLabeled(t *testing.T, b *redfish.BMC, name string, lbls map[string]string) string {
	t.Helper()
	user, pass := b.Credentials()
	sec := &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"username": user, "password": pass}}
	if err := env.Client.Create(ctx(), sec); err != nil {
		t.Fatal(err)
	}
	obj := suite.BMCObject(b, name)
	maps.Copy(obj.Labels, lbls)
	if err := env.Client.Create(ctx(), obj); err != nil {
		t.Fatal(err)
	}
	return bmccontroller.ServerName(name, b.SystemIDs()[0])
}

// availableServers registers n BMCs with the given labels and waits until their Servers are
// Available and observed off, i.e. claimable.
func availableServers(t *testing.T, prefix string, n int, lbls func(i int) map[string]string) ([]string, []*redfish.BMC) {
	t.Helper()
	names := make([]string, n)
	bmcs := make([]*redfish.BMC, n)
	for i := range n {
		bmcs[i] = fleet.Take(t)
		names[i] = registerLabeled(t, bmcs[i], fmt.Sprintf("%s-%d", prefix, i), lbls(i))
	}
	parallel(n, func(i int) {
		suite.WaitServerState(t, env, names[i], metalv1alpha1.ServerStateAvailable, 60*time.Second)
		waitPower(t, names[i], metalv1alpha1.PowerStateOff, 20*time.Second)
	})
	return names, bmcs
}

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	err := env.Client.Create(ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func selectorClaim(ns, name string, power metalv1alpha1.Power, sel *metav1.LabelSelector) *metalv1alpha1.ServerClaim {
	return &metalv1alpha1.ServerClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       metalv1alpha1.ServerClaimSpec{Power: power, Image: "os-image:latest", ServerSelector: sel},
	}
}

func getClaim(ns, name string) *metalv1alpha1.ServerClaim {
	return getObject(ns, name, &metalv1alpha1.ServerClaim{})
}

// getObject reads ns/name into obj; nil (of T) when it cannot be read.
func getObject[T client.Object](ns, name string, obj T) T {
	if err := env.Client.Get(ctx(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		var none T
		return none
	}
	return obj
}

// claimStatus is "<phase>/<reason of Bound>".
func claimStatus(c *metalv1alpha1.ServerClaim) string {
	if c == nil {
		return "gone"
	}
	return metaltest.PhaseReason(string(c.Status.Phase), c.Status.Conditions, metalv1alpha1.ConditionBound)
}

func waitClaim(t *testing.T, ns, name, want string, timeout time.Duration) *metalv1alpha1.ServerClaim {
	t.Helper()
	var c *metalv1alpha1.ServerClaim
	testenv.Eventually(t, timeout, "claim "+name+" "+want, func() (bool, string) {
		c = getClaim(ns, name)
		return claimStatus(c) == want, claimStatus(c)
	})
	return c
}

func waitClaimGone(t *testing.T, ns, name string, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, "claim "+name+" gone", func() (bool, string) {
		c := getClaim(ns, name)
		return c == nil, claimStatus(c)
	})
}

func updateClaim(t *testing.T, ns, name string, mutate func(*metalv1alpha1.ServerClaim)) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "update claim "+name, func() (bool, string) {
		c := getClaim(ns, name)
		if c == nil {
			return false, "gone"
		}
		mutate(c)
		if err := env.Client.Update(ctx(), c); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

func systemPower(b *redfish.BMC) string { return systemOf(b).PowerState() }

func waitSystemPower(t *testing.T, b *redfish.BMC, want string, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, fmt.Sprintf("BMC %d power %s", b.Index(), want), func() (bool, string) {
		got := systemPower(b)
		return got == want, got
	})
}

// history records, from watches, every serverRef each claim had and every claim ref each
// server had, in order: flapping shows as a second entry.
type history struct {
	mu      sync.Mutex
	claims  map[string][]string
	servers map[string][]string
}

func watchHistory(t *testing.T, ns string) *history {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	h := &history{claims: map[string][]string{}, servers: map[string][]string{}}
	wctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	record := func(m map[string][]string, key, val string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if l := m[key]; len(l) == 0 && val == "" || len(l) > 0 && l[len(l)-1] == val {
			return
		}
		m[key] = append(m[key], val)
	}
	run := func(list client.ObjectList, opts []client.ListOption, on func(obj any)) {
		for wctx.Err() == nil {
			w, err := wc.Watch(wctx, list, opts...)
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Added || ev.Type == watch.Modified {
					on(ev.Object)
				}
			}
		}
	}
	go run(&metalv1alpha1.ServerClaimList{}, []client.ListOption{client.InNamespace(ns)}, func(o any) {
		c := o.(*metalv1alpha1.ServerClaim)
		if c.Spec.ServerRef != nil {
			record(h.claims, c.Name, c.Spec.ServerRef.Name)
		}
	})
	go run(&metalv1alpha1.ServerList{}, nil, func(o any) {
		s := o.(*metalv1alpha1.Server)
		ref := ""
		if s.Spec.ServerClaimRef != nil {
			ref = s.Spec.ServerClaimRef.Namespace + "/" + s.Spec.ServerClaimRef.Name
		}
		record(h.servers, s.Name, ref)
	})
	return h
}

// check reports claims that had more than one server and servers handed from one claim to
// another without being released in between.
func (h *history) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for c, refs := range h.claims {
		if len(refs) > 1 {
			t.Errorf("claim %s flapped between servers: %v", c, refs)
		}
	}
	for s, refs := range h.servers {
		for i := 1; i < len(refs); i++ {
			if refs[i-1] != "" && refs[i] != "" {
				t.Errorf("server %s went from claim %s to %s without release: %v", s, refs[i-1], refs[i], refs)
			}
		}
	}
}

func checkNoDoubleWrites(t *testing.T) {
	t.Helper()
	if v := writes.Violations(); len(v) > 0 {
		t.Fatalf("passes that wrote their object twice:\n%s", strings.Join(v, "\n"))
	}
}

// ---- tests -----------------------------------------------------------------------------------

// 100 claims with overlapping selectors race for 40 servers: exactly 40 bind, 60 say why not;
// no server holds two claims, no claim holds two servers or changes server. Deleting 10 bound
// claims lets 10 waiting claims bind the servers they free.
func TestClaimRace(t *testing.T) {
	const n, claims, ns = 40, 100, "race"
	ensureNamespace(t, ns)
	servers, _ := availableServers(t, "race", n, func(i int) map[string]string {
		return map[string]string{"pool": "race", "rack": fmt.Sprintf("r%d", i%4), "gen": fmt.Sprintf("g%d", i%2)}
	})
	h := watchHistory(t, ns)
	time.Sleep(200 * time.Millisecond) // let the watches start

	// Half the claims take any race server, so every server stays wanted until all are bound;
	// the rest overlap on racks and generations.
	selectorFor := func(i int) *metav1.LabelSelector {
		pool := map[string]string{"pool": "race"}
		switch {
		case i%2 == 0:
			return &metav1.LabelSelector{MatchLabels: pool}
		case i%6 == 1:
			return &metav1.LabelSelector{MatchLabels: pool, MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "rack", Operator: metav1.LabelSelectorOpIn, Values: []string{"r0", "r1"}}}}
		case i%6 == 3:
			return &metav1.LabelSelector{MatchLabels: pool, MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "rack", Operator: metav1.LabelSelectorOpIn, Values: []string{"r1", "r2"}}}}
		default:
			return &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "race", "gen": "g0"}}
		}
	}
	parallel(claims, func(i int) {
		c := selectorClaim(ns, fmt.Sprintf("race-%03d", i), metalv1alpha1.PowerOff, selectorFor(i))
		if err := env.Client.Create(ctx(), c); err != nil {
			t.Error(err)
		}
	})

	settled := func(wantBound, wantUnbound int) map[string]string {
		var bound map[string]string
		testenv.Eventually(t, 60*time.Second, fmt.Sprintf("%d bound, %d unbound", wantBound, wantUnbound), func() (bool, string) {
			list := &metalv1alpha1.ServerClaimList{}
			if err := env.Client.List(ctx(), list, client.InNamespace(ns)); err != nil {
				return false, err.Error()
			}
			bound = map[string]string{}
			unbound, other := 0, map[string]int{}
			for _, c := range list.Items {
				switch claimStatus(&c) {
				case "Bound/Bound":
					bound[c.Name] = c.Spec.ServerRef.Name
				case "Unbound/" + metalv1alpha1.ReasonAllMatchingServersTaken:
					unbound++
				default:
					other[claimStatus(&c)]++
				}
			}
			return len(bound) == wantBound && unbound == wantUnbound && len(list.Items) == wantBound+wantUnbound,
				fmt.Sprintf("%d bound, %d unbound, others %v", len(bound), unbound, other)
		})
		return bound
	}
	checkBindings := func(bound map[string]string) {
		t.Helper()
		held := map[string]string{}
		for claim, server := range bound {
			if other, ok := held[server]; ok {
				t.Errorf("server %s bound by %s and %s", server, other, claim)
			}
			held[server] = claim
			s := suite.Server(env, server)
			if s.Spec.ServerClaimRef == nil || s.Spec.ServerClaimRef.Name != claim || s.Spec.ServerClaimRef.Namespace != ns {
				t.Errorf("claim %s bound to %s, which points at %+v", claim, server, s.Spec.ServerClaimRef)
			}
			// Bound is reported first; the boot configuration follows.
			sbc := &metalv1alpha1.ServerBootConfiguration{}
			var err error
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if err = env.Client.Get(ctx(), client.ObjectKey{Namespace: ns, Name: claim}, sbc); err == nil || time.Now().After(deadline) {
					break
				}
			}
			if err != nil {
				t.Errorf("claim %s: boot configuration: %v", claim, err)
			} else if sbc.Spec.ServerRef.Name != server || s.Spec.BootConfigurationRef == nil || s.Spec.BootConfigurationRef.Name != claim {
				t.Errorf("claim %s: boot configuration for %s, server points at %+v", claim, sbc.Spec.ServerRef.Name, s.Spec.BootConfigurationRef)
			}
		}
		if len(held) != len(bound) {
			t.Errorf("%d claims bound to %d servers", len(bound), len(held))
		}
	}

	bound := settled(n, claims-n)
	checkBindings(bound)
	for _, s := range servers {
		suite.WaitServerState(t, env, s, metalv1alpha1.ServerStateReserved, 20*time.Second)
	}

	// Free ten servers: ten waiting claims get them.
	victims := slices.Sorted(maps.Keys(bound))[:10]
	freed := map[string]bool{}
	for _, name := range victims {
		freed[bound[name]] = true
		if err := env.Client.Delete(ctx(), getClaim(ns, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range victims {
		waitClaimGone(t, ns, name, 30*time.Second)
	}
	after := settled(n, claims-n-10)
	checkBindings(after)
	var newcomers []string
	for claim, server := range after {
		if _, before := bound[claim]; before {
			if bound[claim] != server {
				t.Errorf("claim %s moved from %s to %s", claim, bound[claim], server)
			}
			continue
		}
		newcomers = append(newcomers, claim)
		if !freed[server] {
			t.Errorf("newly bound claim %s got %s, which was not freed", claim, server)
		}
	}
	sort.Strings(newcomers)
	t.Logf("freed servers went to %v", newcomers)
	time.Sleep(time.Second) // let the watches catch up
	h.check(t)
	checkNoDoubleWrites(t)
	waitEvent(t, victims[0], "Unbound")
	waitEvent(t, newcomers[0], "Bound")
}

// A claim's power drives the server; deleting the claim powers the server off and returns it to
// Available (Recycle) or Released (Retain), and the claim goes only after that.
func TestClaimPowerAndReclaim(t *testing.T) {
	const ns = "default"
	names, bmcs := availableServers(t, "reclaim", 2, func(i int) map[string]string {
		return map[string]string{"pool": fmt.Sprintf("reclaim-%d", i)}
	})
	recycle, retain := names[0], names[1]
	if err := lifecycle.PatchMetadata(ctx(), env.Client, suite.Server(env, retain), func(o client.Object) {
		o.(*metalv1alpha1.Server).Spec.ReclaimPolicy = metalv1alpha1.ReclaimPolicyRetain
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range 2 {
		c := selectorClaim(ns, fmt.Sprintf("reclaim-%d", i), metalv1alpha1.PowerOn,
			&metav1.LabelSelector{MatchLabels: map[string]string{"pool": fmt.Sprintf("reclaim-%d", i)}})
		if err := env.Client.Create(ctx(), c); err != nil {
			t.Fatal(err)
		}
	}
	for i, name := range names {
		c := waitClaim(t, ns, fmt.Sprintf("reclaim-%d", i), "Bound/Bound", 20*time.Second)
		if c.Spec.ServerRef == nil || c.Spec.ServerRef.Name != name || !slices.Contains(c.Finalizers, claim.Finalizer) {
			t.Fatalf("claim %s: serverRef %+v, finalizers %v", c.Name, c.Spec.ServerRef, c.Finalizers)
		}
		suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateReserved, 10*time.Second)
		waitSystemPower(t, bmcs[i], redfish.PowerOn, 10*time.Second)
		waitPower(t, name, metalv1alpha1.PowerStateOn, 10*time.Second)
		waitClaimPower(t, ns, fmt.Sprintf("reclaim-%d", i), metalv1alpha1.PowerStateOn)
	}

	// Power follows the claim, and the claim shows it.
	updateClaim(t, ns, "reclaim-0", func(c *metalv1alpha1.ServerClaim) { c.Spec.Power = metalv1alpha1.PowerOff })
	waitSystemPower(t, bmcs[0], redfish.PowerOff, 10*time.Second)
	waitClaimPower(t, ns, "reclaim-0", metalv1alpha1.PowerStateOff)
	updateClaim(t, ns, "reclaim-0", func(c *metalv1alpha1.ServerClaim) { c.Spec.Power = metalv1alpha1.PowerOn })
	waitSystemPower(t, bmcs[0], redfish.PowerOn, 10*time.Second)
	waitPower(t, recycle, metalv1alpha1.PowerStateOn, 10*time.Second)

	for i := range 2 {
		if err := env.Client.Delete(ctx(), getClaim(ns, fmt.Sprintf("reclaim-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	s := suite.WaitServerState(t, env, recycle, metalv1alpha1.ServerStateAvailable, 20*time.Second)
	if s.Spec.ServerClaimRef != nil || s.Spec.BootConfigurationRef != nil {
		t.Errorf("recycled server keeps refs: claim %+v, boot %+v", s.Spec.ServerClaimRef, s.Spec.BootConfigurationRef)
	}
	s = suite.WaitServerState(t, env, retain, metalv1alpha1.ServerStateReleased, 20*time.Second)
	if s.Spec.ServerClaimRef == nil || s.Spec.ServerClaimRef.Name != "reclaim-1" {
		t.Errorf("retained server lost its claim ref: %+v", s.Spec.ServerClaimRef)
	}
	for i, name := range names {
		waitClaimGone(t, ns, fmt.Sprintf("reclaim-%d", i), 20*time.Second)
		if systemPower(bmcs[i]) != redfish.PowerOff {
			t.Errorf("%s: power %s after the claim went", name, systemPower(bmcs[i]))
		}
		err := env.Client.Get(ctx(), client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("reclaim-%d", i)}, &metalv1alpha1.ServerBootConfiguration{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("boot configuration of reclaim-%d still there: %v", i, err)
		}
	}
	testenv.Eventually(t, 10*time.Second, "retained server's boot configuration ref removed", func() (bool, string) {
		s := suite.Server(env, retain)
		return s.Spec.BootConfigurationRef == nil, fmt.Sprintf("%+v", s.Spec.BootConfigurationRef)
	})
	// Every power-on of a claim boots its configuration from the network first, as
	// metal-operator does: the first, and the one after the claim turned it off and on.
	if got := fmt.Sprint(suite.ResetTypes(suite.Since(fleet.BoxActions(bmcs[0]), start))); got != "[Boot:Pxe/Once On GracefulShutdown Boot:Pxe/Once On GracefulShutdown]" {
		t.Errorf("recycled server: BMC actions %s", got)
	}
	if got := fmt.Sprint(suite.ResetTypes(suite.Since(fleet.BoxActions(bmcs[1]), start))); got != "[Boot:Pxe/Once On GracefulShutdown]" {
		t.Errorf("retained server: BMC actions %s", got)
	}
	// A new claim of the same name does not inherit the retained server...
	again := selectorClaim(ns, "reclaim-1", metalv1alpha1.PowerOff, &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "reclaim-1"}})
	if err := env.Client.Create(ctx(), again); err != nil {
		t.Fatal(err)
	}
	waitClaim(t, ns, "reclaim-1", "Unbound/"+metalv1alpha1.ReasonAllMatchingServersTaken, 10*time.Second)
	if s := suite.Server(env, retain); durableState(s) != string(metalv1alpha1.ServerStateReleased) {
		t.Errorf("retained server became %s", durableState(s))
	}
	// ...until an admin removes the retained claim ref: the server is Available again, and the
	// waiting claim binds it.
	if err := lifecycle.PatchMetadata(ctx(), env.Client, suite.Server(env, retain), func(o client.Object) {
		o.(*metalv1alpha1.Server).Spec.ServerClaimRef = nil
	}); err != nil {
		t.Fatal(err)
	}
	c := waitClaim(t, ns, "reclaim-1", "Bound/Bound", 20*time.Second)
	if c.Spec.ServerRef == nil || c.Spec.ServerRef.Name != retain {
		t.Errorf("new reclaim-1 bound %+v, want %s", c.Spec.ServerRef, retain)
	}
	suite.WaitServerState(t, env, retain, metalv1alpha1.ServerStateReserved, 10*time.Second)
	for _, reason := range []string{"Bound", "Unbound"} {
		waitEvent(t, "reclaim-0", reason)
	}
	checkNoDoubleWrites(t)
}

// waitClaimPower waits for the claim to show its server's power.
func waitClaimPower(t *testing.T, ns, name string, want metalv1alpha1.PowerState) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "claim "+name+" shows server power "+string(want), func() (bool, string) {
		c := getClaim(ns, name)
		if c == nil {
			return false, "claim missing"
		}
		return c.Status.ServerPowerState == want, string(c.Status.ServerPowerState)
	})
}

package firmware

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// A BIOSVersion on an unclaimed server: maintenance, one SimpleUpdate, its task followed, one
// restart, the version read back, Completed, and the server handed back.
func TestBIOSVersionUnclaimed(t *testing.T) {
	names, bmcs := availableServers(t, "biosv-one", 1)
	const image = "http://fw.example/bios-one-2.0.0.bin"
	v := biosVersion("biosv-one", names[0], "2.0.0", image)
	if err := env.Client.Create(ctx(), v); err != nil {
		t.Fatal(err)
	}
	v = waitVersionState(t, "biosv-one", systemv1alpha1.VersionStateCompleted, 60*time.Second)
	if got := bmcs[0].Systems()[0].BIOSVersion(); got != "2.0.0" {
		t.Errorf("BIOS %s, want 2.0.0", got)
	}
	if n := simpleUpdates(bmcs[0]); n != 1 {
		t.Errorf("SimpleUpdates: %d, want 1", n)
	}
	if v.Status.UpgradeTask == nil || v.Status.UpgradeTask.URI == "" || v.Status.CurrentVersion != "2.0.0" {
		t.Errorf("status %+v", v.Status)
	}
	if v.Spec.ServerMaintenanceRef == nil {
		t.Fatal("no maintenance named")
	}
	suite.WaitServerState(t, env, names[0], metalv1alpha1.ServerStateAvailable, 30*time.Second)
}

// wipeStatus empties a BIOSVersion's status, as a restore or a careless script would.
func wipeStatus(t *testing.T, name string) {
	t.Helper()
	for range 20 {
		v := getVersion(name)
		if v == nil {
			return
		}
		v.Status = systemv1alpha1.BIOSVersionStatus{}
		if err := testenv.WriteStatus(ctx(), env.Client, v); err == nil {
			return
		}
	}
}

// Twenty upgrades while the manager is killed at random moments and statuses are wiped: each
// server is flashed exactly once and every upgrade completes.
func TestBIOSVersionSurvivesKillsAndWipes(t *testing.T) {
	const n = 20
	names, bmcs := availableServers(t, "biosv-kill", n)
	for _, b := range bmcs {
		b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(2500 * time.Millisecond)})
	}
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("seed %d", seed)
	for i, name := range names {
		v := biosVersion(fmt.Sprintf("biosv-kill-%d", i), name, "3.0.0", fmt.Sprintf("http://fw.example/kill/bios-%d-3.0.0.bin", i))
		if err := env.Client.Create(ctx(), v); err != nil {
			t.Fatal(err)
		}
	}
	// Kill the manager at random moments of the upgrades, wiping statuses on the way.
	stop := make(chan struct{})
	chaos := make(chan int)
	go func() {
		kills := 0
		defer func() { chaos <- kills }()
		for kills < 8 {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(200+rng.IntN(1200)) * time.Millisecond):
			}
			stopManager()
			for i := range n {
				if rng.IntN(3) == 0 {
					wipeStatus(t, fmt.Sprintf("biosv-kill-%d", i))
				}
			}
			if err := startManager(); err != nil {
				t.Errorf("restart: %v", err)
				return
			}
			kills++
			for i := range n {
				if rng.IntN(4) == 0 {
					wipeStatus(t, fmt.Sprintf("biosv-kill-%d", i))
				}
			}
		}
	}()
	for i := range n {
		waitVersionState(t, fmt.Sprintf("biosv-kill-%d", i), systemv1alpha1.VersionStateCompleted, 180*time.Second)
	}
	close(stop)
	t.Logf("manager killed %d times", <-chaos)
	for i, b := range bmcs {
		if got := simpleUpdates(b); got != 1 {
			t.Errorf("server %s: %d SimpleUpdates, want 1", names[i], got)
		}
		if got := b.Systems()[0].BIOSVersion(); got != "3.0.0" {
			t.Errorf("server %s runs BIOS %s", names[i], got)
		}
	}
}

// On a claimed server with OwnerApproval nothing happens (no flash, no restart, the claim's
// server stays Reserved) until the claim's owner approves; then the upgrade runs and the
// server goes back to its claim.
func TestBIOSVersionWaitsForOwnerApproval(t *testing.T) {
	names, bmcs := availableServers(t, "biosv-owner", 1)
	claim := &metalv1alpha1.ServerClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "biosv-owner"},
		Spec:       metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "img", ServerRef: &corev1.LocalObjectReference{Name: names[0]}},
	}
	if err := env.Client.Create(ctx(), claim); err != nil {
		t.Fatal(err)
	}
	suite.WaitServerState(t, env, names[0], metalv1alpha1.ServerStateReserved, 30*time.Second)
	before := len(fleet.RecordsOf(bmcs[0]))
	v := biosVersion("biosv-owner", names[0], "4.0.0", "http://fw.example/bios-owner-4.0.0.bin")
	v.Spec.ServerMaintenancePolicy = metalv1alpha1.ServerMaintenancePolicyOwnerApproval
	if err := env.Client.Create(ctx(), v); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "waiting for approval", func() (bool, string) {
		v := getVersion("biosv-owner")
		c := meta.FindStatusCondition(v.Status.Conditions, systemv1alpha1.ConditionUpgraded)
		return c != nil && c.Reason == systemv1alpha1.ReasonAwaitingMaintenance && strings.Contains(c.Message, "approve"), fmt.Sprint(v.Status.Conditions)
	})
	// Long enough for anything wrongly started to have shown.
	testenv.Eventually(t, 10*time.Second, "claim asked for approval", func() (bool, string) {
		c := &metalv1alpha1.ServerClaim{}
		_ = env.Client.Get(ctx(), client.ObjectKeyFromObject(claim), c)
		return c.Labels[metalv1alpha1.MaintenanceNeededLabel] == "true", fmt.Sprint(c.Labels)
	})
	if got := fleet.RecordsOf(bmcs[0])[before:]; len(got) != 0 {
		t.Fatalf("BMC actions before approval: %+v", got)
	}
	if v := getVersion("biosv-owner"); v.Status.State != systemv1alpha1.VersionStatePending {
		t.Fatalf("state %s before approval", v.Status.State)
	}
	suite.WaitServerState(t, env, names[0], metalv1alpha1.ServerStateReserved, time.Second)
	testenv.Eventually(t, 5*time.Second, "approve", func() (bool, string) {
		c := &metalv1alpha1.ServerClaim{}
		if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(claim), c); err != nil {
			return false, err.Error()
		}
		err := lifecycle.PatchMetadata(ctx(), env.Client, c, func(o client.Object) {
			labels := o.GetLabels()
			labels[metalv1alpha1.MaintenanceApprovedLabel] = "true"
			o.SetLabels(labels)
		})
		return err == nil, fmt.Sprint(err)
	})
	waitVersionState(t, "biosv-owner", systemv1alpha1.VersionStateCompleted, 60*time.Second)
	if n := simpleUpdates(bmcs[0]); n != 1 {
		t.Errorf("SimpleUpdates: %d, want 1", n)
	}
	suite.WaitServerState(t, env, names[0], metalv1alpha1.ServerStateReserved, 30*time.Second)
}

// A vendor that wants v2 on the way from v1 to v5: two flashes, two restarts, each version read
// back in turn.
func TestBIOSVersionUpgradePath(t *testing.T) {
	names, bmcs := availableServers(t, "biosv-path", 1)
	v := biosVersion("biosv-path", names[0], "5.0.0", "http://fw.example/bios-path-5.0.0.bin")
	v.Spec.UpgradePath = []systemv1alpha1.VersionStep{{Version: "2.0.0", Image: systemv1alpha1.ImageSpec{URI: "http://fw.example/bios-path-2.0.0.bin"}}}
	if err := env.Client.Create(ctx(), v); err != nil {
		t.Fatal(err)
	}
	waitVersionState(t, "biosv-path", systemv1alpha1.VersionStateCompleted, 60*time.Second)
	var images []string
	for _, r := range fleet.RecordsOf(bmcs[0]) {
		if r.Action == redfish.ActionSimpleUpdate {
			images = append(images, r.Image)
		}
	}
	if strings.Join(images, " ") != "http://fw.example/bios-path-2.0.0.bin http://fw.example/bios-path-5.0.0.bin" {
		t.Errorf("flashed %v", images)
	}
	if got := bmcs[0].Systems()[0].BIOSVersion(); got != "5.0.0" {
		t.Errorf("BIOS %s", got)
	}
}

// A BMC that cannot fetch images: metalhub fetches the image (with the image Secret's
// credentials) and pushes it (MultipartHttpPushUri), beside the passes; one push, completed.
func TestBIOSVersionPushedToABMCThatCannotFetch(t *testing.T) {
	names, bmcs := availableServers(t, "biosv-push", 1)
	b := bmcs[0]
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(updateDuration), NoSimpleUpdate: true})
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "fw" || p != "secret" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte("9.1.0\n")) // the emulator installs what a short image says
	}))
	defer images.Close()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "biosv-push"}, StringData: map[string]string{"username": "fw", "password": "secret"}}
	if err := env.Client.Create(ctx(), sec); err != nil {
		t.Fatal(err)
	}
	v := biosVersion("biosv-push", names[0], "9.1.0", images.URL+"/bios-9.1.0.bin")
	v.Spec.Image.SecretRef = &corev1.SecretReference{Namespace: "default", Name: "biosv-push"}
	if err := env.Client.Create(ctx(), v); err != nil {
		t.Fatal(err)
	}
	waitVersionState(t, "biosv-push", systemv1alpha1.VersionStateCompleted, 60*time.Second)
	if got := b.Systems()[0].BIOSVersion(); got != "9.1.0" {
		t.Errorf("BIOS %s", got)
	}
	if n := simpleUpdates(b); n != 1 {
		t.Errorf("updates: %d, want 1 push", n)
	}
}

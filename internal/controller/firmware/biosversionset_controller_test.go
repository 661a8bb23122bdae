package firmware

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// labelServers puts label key=value on the servers.
func labelServers(t *testing.T, names []string, key, value string) {
	t.Helper()
	for _, name := range names {
		testenv.Eventually(t, 5*time.Second, "label "+name, func() (bool, string) {
			s := suite.Server(env, name)
			if s == nil {
				return false, "gone"
			}
			err := lifecycle.PatchMetadata(ctx(), env.Client, s, func(o client.Object) {
				l := o.GetLabels()
				if l == nil {
					l = map[string]string{}
				}
				l[key] = value
				o.SetLabels(l)
			})
			return err == nil, fmt.Sprint(err)
		})
	}
}

func versionSet(name, selector, version, imagePrefix string, ro *systemv1alpha1.RolloutSpec) *systemv1alpha1.BIOSVersionSet {
	return &systemv1alpha1.BIOSVersionSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: systemv1alpha1.BIOSVersionSetSpec{
			ServerSelector:      metav1.LabelSelector{MatchLabels: map[string]string{"rollout": selector}},
			BIOSVersionTemplate: systemv1alpha1.BIOSVersionTemplate{Version: version, Image: systemv1alpha1.ImageSpec{URI: imagePrefix + version + ".bin"}},
			Rollout:             ro,
		},
	}
}

// children lists the set's BIOSVersions, read from the API server.
func children(t *testing.T, set string) []systemv1alpha1.BIOSVersion {
	t.Helper()
	list := &systemv1alpha1.BIOSVersionList{}
	if err := env.Client.List(ctx(), list); err != nil {
		t.Errorf("listing BIOSVersions: %v", err)
		return nil
	}
	var out []systemv1alpha1.BIOSVersion
	for _, v := range list.Items {
		if ref := metav1.GetControllerOf(&v); ref != nil && ref.Name == set {
			out = append(out, v)
		}
	}
	return out
}

// inFlight counts the set's servers out of service now: a BIOSVersion not ended, or the server
// still in that BIOSVersion's maintenance.
func inFlight(t *testing.T, set string) int {
	servers := &metalv1alpha1.ServerList{}
	if err := env.Client.List(ctx(), servers); err != nil {
		t.Errorf("listing servers: %v", err)
		return 0
	}
	busy := map[string]bool{}
	for _, s := range servers.Items {
		if ref := s.Spec.ServerMaintenanceRef; ref != nil && strings.HasPrefix(ref.Name, "biosversion-"+set+"-") {
			busy[s.Name] = true
		}
	}
	for _, v := range children(t, set) {
		if rec, ok := record.Parse(v.Annotations[record.Annotation]); ok && !rec.Terminal() && rec.Phase != record.PhaseMaintenance {
			busy[v.Spec.ServerRef.Name] = true
		}
	}
	return len(busy)
}

// A set over 40 servers with maxUnavailable 5 and 2 canaries: never more than 5 servers out of
// service (watched the whole time), the canaries complete before anything else starts, every
// server ends at the version with one flash, and status tells the waves.
func TestBIOSVersionSetWaves(t *testing.T) {
	const n = 40
	names, bmcs := availableServers(t, "bvs", n)
	labelServers(t, names, "rollout", "bvs")
	set := versionSet("bvs", "bvs", "6.0.0", "http://fw.example/bvs/bios-", &systemv1alpha1.RolloutSpec{
		MaxUnavailable: ptr.To(intstr.FromInt32(5)), Canary: 2})
	if err := env.Client.Create(ctx(), set); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var mu sync.Mutex
	maxSeen, samples := 0, 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			k := inFlight(t, "bvs")
			mu.Lock()
			maxSeen, samples = max(maxSeen, k), samples+1
			mu.Unlock()
		}
	}()
	var phases []systemv1alpha1.RolloutPhase
	testenv.Eventually(t, 240*time.Second, "rollout done", func() (bool, string) {
		s := &systemv1alpha1.BIOSVersionSet{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: "bvs"}, s); err != nil {
			return false, err.Error()
		}
		if p := s.Status.Rollout.Phase; p != "" && (len(phases) == 0 || phases[len(phases)-1] != p) {
			phases = append(phases, p)
		}
		return s.Status.Rollout.Phase == systemv1alpha1.RolloutDone && s.Status.CompletedBIOSVersion == n,
			fmt.Sprintf("%+v", s.Status.Rollout)
	})
	close(stop)
	<-done
	t.Logf("in flight at most %d over %d samples; phases %v", maxSeen, samples, phases)
	if maxSeen > 5 {
		t.Errorf("%d servers out of service at once, want at most 5", maxSeen)
	}
	if maxSeen < 2 || samples < 20 {
		t.Errorf("the watch saw too little: max %d over %d samples", maxSeen, samples)
	}
	// Canaries first: the two first in rollout order, both completed before any other began.
	kids := children(t, "bvs")
	sort.Slice(kids, func(i, j int) bool { return kids[i].Spec.ServerRef.Name < kids[j].Spec.ServerRef.Name })
	var canariesDone time.Time
	for _, v := range kids[:2] {
		rec, _ := record.Parse(v.Annotations[record.Annotation])
		if rec.AtTime().After(canariesDone) {
			canariesDone = rec.AtTime()
		}
	}
	for _, v := range kids[2:] {
		if v.CreationTimestamp.Time.Before(canariesDone) {
			t.Errorf("%s made at %s, before the canaries completed at %s", v.Name, v.CreationTimestamp, canariesDone)
		}
	}
	s := &systemv1alpha1.BIOSVersionSet{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Name: "bvs"}, s); err != nil {
		t.Fatal(err)
	}
	if s.Status.FullyLabeledServers != n || s.Status.AvailableBIOSVersion != n || s.Status.Rollout.Waves != 9 || s.Status.Rollout.Wave != 9 {
		t.Errorf("status %+v", s.Status)
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, systemv1alpha1.ConditionRolledOut); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("RolledOut %+v", c)
	}
	if !slices.Contains(phases, systemv1alpha1.RolloutCanary) {
		t.Errorf("phases seen %v: no canary phase", phases)
	}
	for i, b := range bmcs {
		if got := simpleUpdates(b); got != 1 {
			t.Errorf("%s: %d SimpleUpdates", names[i], got)
		}
	}
}

// A failing canary stops the rollout: nothing past the canary wave starts, and status names the
// failed server.
func TestBIOSVersionSetFailingCanaryStops(t *testing.T) {
	names, bmcs := availableServers(t, "bvsf", 5)
	labelServers(t, names, "rollout", "bvsf")
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	for i, name := range names {
		if name == sorted[0] {
			bmcs[i].SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(updateDuration), UpdateFails: true})
		}
	}
	set := versionSet("bvsf", "bvsf", "7.0.0", "http://fw.example/bvsf/bios-", &systemv1alpha1.RolloutSpec{
		MaxUnavailable: ptr.To(intstr.FromInt32(2)), Canary: 2})
	if err := env.Client.Create(ctx(), set); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "rollout stopped", func() (bool, string) {
		s := &systemv1alpha1.BIOSVersionSet{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: "bvsf"}, s); err != nil {
			return false, err.Error()
		}
		return s.Status.Rollout.Phase == systemv1alpha1.RolloutStopped && slices.Equal(s.Status.Rollout.FailedTargets, sorted[:1]) &&
			s.Status.CompletedBIOSVersion == 1, fmt.Sprintf("%+v completed %d", s.Status.Rollout, s.Status.CompletedBIOSVersion)
	})
	// The status above was the report of a pass that saw the other canary completed and its
	// server handed back (counted completed only then): that pass planned no wave.
	if kids := children(t, "bvsf"); len(kids) != 2 {
		t.Errorf("%d BIOSVersions, want the 2 canaries", len(kids))
	}
	suite.WaitServerState(t, env, sorted[1], metalv1alpha1.ServerStateAvailable, 30*time.Second)
	for i, b := range bmcs {
		want := 0
		if names[i] == sorted[0] || names[i] == sorted[1] {
			want = 1
		}
		if got := simpleUpdates(b); got != want {
			t.Errorf("%s: %d SimpleUpdates, want %d", names[i], got, want)
		}
	}
}

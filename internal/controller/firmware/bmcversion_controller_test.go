package firmware

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	baseboardv1alpha1 "github.com/metalhub/metalhub/api/baseboard/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	"github.com/metalhub/metalhub/internal/controller/firmware/version"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/testenv"
)

func waitBMCVersionState(t *testing.T, name string, want systemv1alpha1.VersionState, timeout time.Duration) *baseboardv1alpha1.BMCVersion {
	t.Helper()
	var v *baseboardv1alpha1.BMCVersion
	testenv.Eventually(t, timeout, "BMCVersion "+name+" "+string(want), func() (bool, string) {
		v = &baseboardv1alpha1.BMCVersion{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, v); err != nil {
			return false, err.Error()
		}
		rec, ok := record.Parse(v.Annotations[record.Annotation])
		return v.Status.State == want && version.StateOf(ok, rec) == want, fmt.Sprintf("status %s, record %s, conditions %v", v.Status.State, v.Annotations[record.Annotation], v.Status.Conditions)
	})
	return v
}

// slowReconciles counts the passes of controller that took longer than seconds (controller-
// runtime's reconcile time histogram, for every manager this process ran).
func slowReconciles(t *testing.T, controller string, seconds float64) (slow, total uint64) {
	t.Helper()
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "controller_runtime_reconcile_time_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := false
			for _, l := range m.GetLabel() {
				match = match || (l.GetName() == "controller" && l.GetValue() == controller)
			}
			if !match {
				continue
			}
			h := m.GetHistogram()
			total += h.GetSampleCount()
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() == seconds {
					slow += h.GetSampleCount() - b.GetCumulativeCount()
				}
			}
		}
	}
	return slow, total
}

// A BMC upgrade during which the BMC answers nothing for a minute (it restarts into the new
// image): one flash, the version read back once it is back, and no pass ever waited on it.
func TestBMCVersionThroughAMinuteOfSilence(t *testing.T) {
	t.Parallel() // waits out BMC timings on BMCs of its own (suite_test.go)
	_, bmcs := availableServers(t, "bmcv-down", 1)
	b := bmcs[0]
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(updateDuration), BMCRebootDuration: redfish.Duration(time.Minute)})
	before := b.LastResetTime()
	v := &baseboardv1alpha1.BMCVersion{
		ObjectMeta: metav1.ObjectMeta{Name: "bmcv-down"},
		Spec: baseboardv1alpha1.BMCVersionSpec{BMCRef: &corev1.LocalObjectReference{Name: "bmcv-down-0"},
			BMCVersionTemplate: baseboardv1alpha1.BMCVersionTemplate{Version: "7.2.0", Image: systemv1alpha1.ImageSpec{URI: "http://fw.example/bmc-7.2.0.bin"}}},
	}
	if err := env.Client.Create(ctx(), v); err != nil {
		t.Fatal(err)
	}
	// The BMC goes silent once its task completes: the object says it cannot reach it.
	testenv.Eventually(t, 30*time.Second, "BMC unreachable", func() (bool, string) {
		v := &baseboardv1alpha1.BMCVersion{}
		_ = env.Client.Get(ctx(), client.ObjectKey{Name: "bmcv-down"}, v)
		for _, c := range v.Status.Conditions {
			if c.Reason == systemv1alpha1.ReasonBMCUnavailable {
				return true, ""
			}
		}
		return false, fmt.Sprint(v.Status.Conditions)
	})
	waitBMCVersionState(t, "bmcv-down", systemv1alpha1.VersionStateCompleted, 150*time.Second)
	if got := b.FirmwareVersion(); got != "7.2.0" {
		t.Errorf("BMC firmware %s", got)
	}
	if !b.LastResetTime().After(before) {
		t.Errorf("the BMC did not restart")
	}
	if n := simpleUpdates(b); n != 1 {
		t.Errorf("SimpleUpdates: %d, want 1", n)
	}
	// Every pass returned within a few request timeouts (2s here), the minute notwithstanding.
	if slow, total := slowReconciles(t, "bmcversion", 5); slow > 0 || total == 0 {
		t.Errorf("%d of %d bmcversion passes took longer than 5s", slow, total)
	}
}

// A BMC's own settings in a flow step, one value from a ConfigMap: set once, read back, Applied;
// the hosts keep running (no policy, no maintenance).
func TestBMCSettingsWithAVariable(t *testing.T) {
	_, bmcs := availableServers(t, "bmcs-var", 1)
	b := bmcs[0]
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bmcs-var"}, Data: map[string]string{"ntp": "10.0.0.123"}}
	if err := env.Client.Create(ctx(), cm); err != nil {
		t.Fatal(err)
	}
	s := &baseboardv1alpha1.BMCSettings{
		ObjectMeta: metav1.ObjectMeta{Name: "bmcs-var"},
		Spec: baseboardv1alpha1.BMCSettingsSpec{BMCRef: &corev1.LocalObjectReference{Name: "bmcs-var-0"},
			BMCSettingsTemplate: baseboardv1alpha1.BMCSettingsTemplate{Version: b.FirmwareVersion(),
				SettingsFlow: []systemv1alpha1.SettingsFlowItem{{Name: "ntp", Priority: 10,
					Settings: map[string]string{"NTPConfigGroup.1.NTPEnable": "Enabled", "NTPConfigGroup.1.NTP1": "$(ntp)"}}},
				Variables: []systemv1alpha1.Variable{{Key: "ntp", ValueFrom: systemv1alpha1.VariableSource{
					ConfigMapKeyRef: &systemv1alpha1.KeyRef{Namespace: "default", Name: "bmcs-var", Key: "ntp"}}}}}},
	}
	if err := env.Client.Create(ctx(), s); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "applied", func() (bool, string) {
		got := &baseboardv1alpha1.BMCSettings{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: "bmcs-var"}, got); err != nil {
			return false, err.Error()
		}
		return got.Status.State == systemv1alpha1.SettingsStateApplied, fmt.Sprint(got.Status.State, got.Status.Conditions)
	})
	if a := b.ManagerAttributes(); a["NTPConfigGroup.1.NTP1"] != "10.0.0.123" || a["NTPConfigGroup.1.NTPEnable"] != "Enabled" {
		t.Errorf("attributes %v", a)
	}
	n := 0
	for _, r := range fleet.RecordsOf(b) {
		if r.Action == redfish.ActionManagerAttributes {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d attribute writes, want 1", n)
	}
}

// A BMC that keeps its new image staged until its manager is reset: the reset is asked for once
// (the BMC's operation annotation, carried out by the BMC controller), then the version shows.
func TestBMCVersionActivatedByAReset(t *testing.T) {
	_, bmcs := availableServers(t, "bmcv-reset", 1)
	b := bmcs[0]
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(updateDuration), UpdateNeedsReset: true})
	v := &baseboardv1alpha1.BMCVersion{
		ObjectMeta: metav1.ObjectMeta{Name: "bmcv-reset"},
		Spec: baseboardv1alpha1.BMCVersionSpec{BMCRef: &corev1.LocalObjectReference{Name: "bmcv-reset-0"},
			BMCVersionTemplate: baseboardv1alpha1.BMCVersionTemplate{Version: "7.3.0", Image: systemv1alpha1.ImageSpec{URI: "http://fw.example/bmc-7.3.0.bin"}}},
	}
	if err := env.Client.Create(ctx(), v); err != nil {
		t.Fatal(err)
	}
	waitBMCVersionState(t, "bmcv-reset", systemv1alpha1.VersionStateCompleted, 90*time.Second)
	resets := 0
	for _, r := range fleet.RecordsOf(b) {
		if r.Action == redfish.ActionManagerReset {
			resets++
		}
	}
	if got := b.FirmwareVersion(); got != "7.3.0" || resets != 1 || simpleUpdates(b) != 1 {
		t.Errorf("firmware %s after %d resets and %d updates, want 7.3.0, 1, 1", got, resets, simpleUpdates(b))
	}
}

// A BMC that cannot fetch its own image gets it pushed, proven again right before the push.
func TestBMCVersionPushed(t *testing.T) {
	_, bmcs := availableServers(t, "bmcv-push", 1)
	b := bmcs[0]
	b.SetFaults(redfish.Faults{UpdateDuration: redfish.Duration(updateDuration), NoSimpleUpdate: true, BMCRebootDuration: redfish.Duration(time.Second)})
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("7.4.0")) }))
	defer images.Close()
	v := &baseboardv1alpha1.BMCVersion{
		ObjectMeta: metav1.ObjectMeta{Name: "bmcv-push"},
		Spec: baseboardv1alpha1.BMCVersionSpec{BMCRef: &corev1.LocalObjectReference{Name: "bmcv-push-0"},
			BMCVersionTemplate: baseboardv1alpha1.BMCVersionTemplate{Version: "7.4.0", Image: systemv1alpha1.ImageSpec{URI: images.URL + "/bmc-7.4.0.bin"}}},
	}
	if err := env.Client.Create(ctx(), v); err != nil {
		t.Fatal(err)
	}
	waitBMCVersionState(t, "bmcv-push", systemv1alpha1.VersionStateCompleted, 90*time.Second)
	var devices []string
	for _, r := range fleet.RecordsOf(b) {
		if r.Action == redfish.ActionSimpleUpdate {
			devices = append(devices, r.Device+":"+r.Image)
		}
	}
	if got := b.FirmwareVersion(); got != "7.4.0" || len(devices) != 1 || devices[0] != "BMC:bmc-7.4.0.bin" {
		t.Errorf("firmware %s, pushes %v", got, devices)
	}
}

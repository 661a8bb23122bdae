package firmware

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	baseboardv1alpha1 "github.com/metalhub/metalhub/api/baseboard/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// sample reads one manifest of the companion operator's users, unchanged.
func sample(t *testing.T, file string) *unstructured.Unstructured {
	t.Helper()
	dir := os.Getenv("METALHUB_COMPAT_SAMPLES")
	if dir == "" {
		dir = filepath.Join(testenv.RepoRoot(), "..", "shared", "compat", "samples")
	}
	f, err := os.Open(filepath.Join(dir, "metal-maintenance-operator", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := utilyaml.NewYAMLReader(bufio.NewReader(f)).Read()
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		t.Fatal(err)
	}
	return u
}

// The samples as users write them, carried out: a Server named as the reference names it
// (endpoint-sample-system-0, under BMC endpoint-sample), labelled as a Dell, running BIOS
// P79 v1.45. The BIOSSettings and BIOSSettingsSet samples set bootMode for that version; then
// the BIOSVersion and BIOSVersionSet samples both want P79 v1.46, which the image the samples
// name installs: one flash, all of them done.
func TestSamplesCarriedOut(t *testing.T) {
	b := fleet.Take(t)
	fleet.SetImageVersion("https://example.com/firmware/bios-P79-v1.46.bin", "P79 v1.46 (01/15/2018)")
	sys := b.Systems()[0]
	// The box as the samples expect it: BIOS P79 v1.45, with the vendor's attribute bootMode;
	// BMC firmware 1.45.455b66-rev4 with attributes bootMode and hyperThreading.
	sys.SetBIOSVersion("P79 v1.45 (12/06/2017)")
	sys.SetBiosAttribute("bootMode", "Legacy")
	b.SetFirmwareVersion("1.45.455b66-rev4")
	b.SetManagerAttribute("bootMode", "Legacy")
	b.SetManagerAttribute("hyperThreading", "Disabled")
	server := &metalv1alpha1.Server{
		ObjectMeta: metav1.ObjectMeta{Name: "endpoint-sample-system-0", Labels: map[string]string{"metal.ironcore.dev/vendor": "dell"}},
		Spec:       metalv1alpha1.ServerSpec{SystemUUID: sys.UUID(), BMCRef: &corev1.LocalObjectReference{Name: "endpoint-sample"}},
	}
	if err := env.Client.Create(ctx(), server); err != nil {
		t.Fatal(err)
	}
	if got := fleet.RegisterBMC(t, b, "endpoint-sample"); got == "" {
		t.Fatal("no server name")
	}
	suite.WaitServerState(t, env, "endpoint-sample-system-0", metalv1alpha1.ServerStateAvailable, 60*time.Second)
	// Settings for v1.45 first, then the upgrade to v1.46.
	for _, f := range []string{"system_v1alpha1_biossettings.yaml", "system_v1alpha1_biossettingsset.yaml"} {
		if err := env.Client.Create(ctx(), sample(t, f), client.FieldValidation("Strict")); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	waitSettingsState(t, "biossettings-sample", systemv1alpha1.SettingsStateApplied, 60*time.Second)
	testenv.Eventually(t, 60*time.Second, "settings set done", func() (bool, string) {
		s := &systemv1alpha1.BIOSSettingsSet{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: "biossettingsset-sample"}, s); err != nil {
			return false, err.Error()
		}
		return s.Status.Rollout.Phase == systemv1alpha1.RolloutDone && s.Status.CompletedBIOSSettings == 1, fmt.Sprintf("%+v", s.Status)
	})
	if got := sys.BiosAttributes()["bootMode"]; got != "Uefi" {
		t.Errorf("bootMode %v", got)
	}
	for _, f := range []string{"system_v1alpha1_biosversion.yaml", "system_v1alpha1_biosversionset.yaml"} {
		if err := env.Client.Create(ctx(), sample(t, f), client.FieldValidation("Strict")); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	waitVersionState(t, "biosversion-sample", systemv1alpha1.VersionStateCompleted, 60*time.Second)
	testenv.Eventually(t, 60*time.Second, "set done", func() (bool, string) {
		s := &systemv1alpha1.BIOSVersionSet{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: "biosversionset-sample"}, s); err != nil {
			return false, err.Error()
		}
		return s.Status.Rollout.Phase == systemv1alpha1.RolloutDone && s.Status.CompletedBIOSVersion == 1, fmt.Sprintf("%+v", s.Status)
	})
	if got := sys.BIOSVersion(); got != "P79 v1.46 (01/15/2018)" {
		t.Errorf("BIOS %q", got)
	}
	if n := simpleUpdates(b); n != 1 {
		t.Errorf("BIOS SimpleUpdates: %d, want 1", n)
	}
	suite.WaitServerState(t, env, "endpoint-sample-system-0", metalv1alpha1.ServerStateAvailable, 30*time.Second)

	// The BMC's own firmware: the BMCVersion sample (its servers in maintenance, Enforced) and
	// the BMCVersionSet sample, which selects Lenovo BMCs.
	fleet.SetImageVersion("https://example.com/firmware/bmc-1.46.455b66-rev1.bin", "1.46.455b66-rev1")
	testenv.Eventually(t, 5*time.Second, "label the BMC", func() (bool, string) {
		bo := &metalv1alpha1.BMC{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: "endpoint-sample"}, bo); err != nil {
			return false, err.Error()
		}
		err := lifecycle.PatchMetadata(ctx(), env.Client, bo, func(o client.Object) {
			l := o.GetLabels()
			if l == nil {
				l = map[string]string{}
			}
			l["metal.ironcore.dev/vendor"] = "lenovo"
			o.SetLabels(l)
		})
		return err == nil, fmt.Sprint(err)
	})
	// The BMC's settings for 1.45 (its servers in maintenance, Enforced), then its upgrade.
	for _, f := range []string{"baseboard_v1alpha1_bmcsettings.yaml", "baseboard_v1alpha1_bmcsettingsset.yaml"} {
		if err := env.Client.Create(ctx(), sample(t, f), client.FieldValidation("Strict")); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	testenv.Eventually(t, 60*time.Second, "BMC settings applied", func() (bool, string) {
		s := &baseboardv1alpha1.BMCSettings{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: "bmcsettings-sample"}, s); err != nil {
			return false, err.Error()
		}
		set := &baseboardv1alpha1.BMCSettingsSet{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: "bmcsettingsset-sample"}, set); err != nil {
			return false, err.Error()
		}
		return s.Status.State == systemv1alpha1.SettingsStateApplied && set.Status.Rollout.Phase == systemv1alpha1.RolloutDone && set.Status.CompletedBMCSettings == 1,
			fmt.Sprintf("%s %v; set %+v", s.Status.State, s.Status.Conditions, set.Status.Rollout)
	})
	if a := b.ManagerAttributes(); a["bootMode"] != "UEFI" || a["hyperThreading"] != "Enabled" {
		t.Errorf("BMC attributes %v", a)
	}
	for _, f := range []string{"baseboard_v1alpha1_bmcversion.yaml", "baseboard_v1alpha1_bmcversionset.yaml"} {
		if err := env.Client.Create(ctx(), sample(t, f), client.FieldValidation("Strict")); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	waitBMCVersionState(t, "bmcversion-sample", systemv1alpha1.VersionStateCompleted, 120*time.Second)
	testenv.Eventually(t, 120*time.Second, "BMC set done", func() (bool, string) {
		s := &baseboardv1alpha1.BMCVersionSet{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: "bmcversionset-sample"}, s); err != nil {
			return false, err.Error()
		}
		return s.Status.Rollout.Phase == systemv1alpha1.RolloutDone && s.Status.CompletedBMCVersion == 1, fmt.Sprintf("%+v", s.Status)
	})
	if got := b.FirmwareVersion(); got != "1.46.455b66-rev1" {
		t.Errorf("BMC firmware %q", got)
	}
	bmcFlashes := 0
	for _, r := range fleet.RecordsOf(b) {
		if r.Action == redfish.ActionSimpleUpdate && r.Device == "BMC" {
			bmcFlashes++
		}
	}
	if bmcFlashes != 1 {
		t.Errorf("BMC flashed %d times, want 1", bmcFlashes)
	}
	suite.WaitServerState(t, env, "endpoint-sample-system-0", metalv1alpha1.ServerStateAvailable, 30*time.Second)
}

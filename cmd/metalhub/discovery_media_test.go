package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/testenv"
)

// Discovery without PXE. Over virtual media, for sites without DHCP: the operator, started with
// --discovery-boot-method VirtualMedia, mounts the discovery ISO, boots it once from the virtual
// CD (the probe in it reports through the real registry), and ejects it once the server is
// Available. Over UEFI HTTP boot: a one-time UefiHttp override with the image's URI. No PXE
// override reaches any box. A BMC without the method keeps its server in Initial with a
// BootMethod condition, is not powered on, and costs no reconcile errors (a condition the user
// must fix is not retried with backoff).
func TestDiscoveryOverVirtualMedia(t *testing.T) {
	const iso = "http://images.example/discovery.iso"
	testDiscoveryBoot(t, "VirtualMedia", iso, redfish.Faults{NoVirtualMedia: true}, nil,
		[]string{"InsertMedia:" + iso, "Boot:Cd/Once", "On", "ForceOff", "EjectMedia:" + iso})
}

func TestDiscoveryOverHTTPBoot(t *testing.T) {
	const efi = "http://images.example/discovery.efi"
	testDiscoveryBoot(t, "HTTP", efi, redfish.Faults{NoHTTPBoot: true}, (*redfish.BMC).HTTPBoot,
		[]string{"Boot:UefiHttp/Once", "On", "ForceOff"})
}

// testDiscoveryBoot runs discovery by method on three BMCs, the third lacking it (the fault); has,
// if set, says which of the others offer it (some vendors' older firmware does not).
func testDiscoveryBoot(t *testing.T, method, uri string, lacking redfish.Faults, has func(*redfish.BMC) bool, want []string) {
	purgeMetal(t)
	bin, err := testenv.MetalhubBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fleet := bootableFleet(t, 3, 200*time.Millisecond)
	fleet.BMC(2).SetFaults(lacking)
	offers := make([]bool, 3)
	for i := range offers {
		offers[i] = i < 2 && (has == nil || has(fleet.BMC(i)))
	}

	m := &managerProcess{bin: bin, logPath: filepath.Join(t.TempDir(), "manager.log"), args: []string{
		"--kubeconfig", env.Kubeconfig, "--controllers", "metal", "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--registry-bind-address", "127.0.0.1:0", "--power-poll", "100ms", "--discovery-namespace", "default",
		"--discovery-boot-method", method, "--discovery-boot-uri", uri,
	}}
	front := registryFront(t, m)
	m.args = append(m.args, "--registry-url", front)
	m.start(t)
	defer m.kill()

	names := registerFleet(t, fleet, "bootdisc")
	deadline := time.Now().Add(90 * time.Second)
	for {
		done := 0
		var last string
		for i, name := range names {
			s := &metalv1alpha1.Server{}
			if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
				last = err.Error()
				continue
			}
			c := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionBootMethod)
			switch {
			case offers[i] && s.Status.State == metalv1alpha1.ServerStateAvailable && s.Status.PowerState == metalv1alpha1.PowerStateOff &&
				s.Annotations[serverstate.MediaAnnotation] == "":
				done++
			case !offers[i] && c != nil && c.Reason == metalv1alpha1.ReasonBootMethodUnsupported:
				done++
			default:
				last = fmt.Sprintf("%s: state %s power %s media %q condition %v", name, s.Status.State, s.Status.PowerState, s.Annotations[serverstate.MediaAnnotation], c)
			}
		}
		if done == len(names) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not there after 90s: %s", last)
		}
		time.Sleep(200 * time.Millisecond)
	}
	got := actionsPerBMC(fleet)
	for i, ok := range offers {
		switch {
		case ok && fmt.Sprint(got[i]) != fmt.Sprint(want):
			t.Errorf("BMC %d actions %v, want %v", i, got[i], want)
		case !ok && len(got[i]) != 0:
			t.Errorf("BMC %d without %s boot got %v, want nothing", i, method, got[i])
		}
	}
	m.kill()
	logb, err := os.ReadFile(m.logPath)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range offers {
		for _, line := range strings.Split(string(logb), "\n") {
			if !ok && strings.Contains(line, "Reconciler error") && strings.Contains(line, names[i]) {
				t.Errorf("the server without %s boot is retried as an error: %s", method, line)
				break
			}
		}
	}
}

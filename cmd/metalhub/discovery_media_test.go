package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/testenv"
)

// Discovery over virtual media, for sites without DHCP: the operator, started with
// --discovery-boot-method VirtualMedia, mounts the discovery ISO, boots it once from the virtual
// CD (the probe in it reports through the real registry), and ejects it once the server is
// Available. No PXE override reaches any box. A BMC without virtual media keeps its server in
// Initial with a BootMethod condition, and is not powered on.
func TestDiscoveryOverVirtualMedia(t *testing.T) {
	const iso = "http://images.example/discovery.iso"
	purgeMetal(t)
	bin, err := testenv.MetalhubBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fleet := bootableFleet(t, 3, 200*time.Millisecond)
	fleet.BMC(2).SetFaults(redfish.Faults{NoVirtualMedia: true})

	m := &managerProcess{bin: bin, logPath: filepath.Join(t.TempDir(), "manager.log"), args: []string{
		"--kubeconfig", env.Kubeconfig, "--controllers", "metal", "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--registry-bind-address", "127.0.0.1:0", "--power-poll", "100ms", "--discovery-namespace", "default",
		"--discovery-boot-method", "VirtualMedia", "--discovery-boot-uri", iso,
	}}
	front := registryFront(t, m)
	m.args = append(m.args, "--registry-url", front)
	m.start(t)
	defer m.kill()

	names := registerFleet(t, fleet, "vmdisc")
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
			case i < 2 && s.Status.State == metalv1alpha1.ServerStateAvailable && s.Status.PowerState == metalv1alpha1.PowerStateOff &&
				s.Annotations[metal.MediaAnnotation] == "":
				done++
			case i == 2 && c != nil && c.Reason == metalv1alpha1.ReasonBootMethodUnsupported:
				done++
			default:
				last = fmt.Sprintf("%s: state %s power %s media %q condition %v", name, s.Status.State, s.Status.PowerState, s.Annotations[metal.MediaAnnotation], c)
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
	for i := range 2 {
		want := fmt.Sprint([]string{"InsertMedia:" + iso, "Boot:Cd/Once", "On", "ForceOff", "EjectMedia:" + iso})
		if fmt.Sprint(got[i]) != want {
			t.Errorf("BMC %d actions %v, want %s", i, got[i], want)
		}
	}
	if len(got[2]) != 0 {
		t.Errorf("BMC without virtual media got %v, want nothing", got[2])
	}
}

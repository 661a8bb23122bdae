package dev

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
)

// Through the real discovery path (PXE boot of the emulated fleet, the probe reading each
// machine's tree with its pci.ids, the registry): every server shows its GPUs and NICs in status
// and the labels derived from them, and a claim selecting GPU model and count binds a server
// that has them, while one asking for GPUs no server has stays unbound.
func TestDiscoveredGPUsSelectClaims(t *testing.T) {
	t.Parallel() // a run of its own: every address on port 0, its own data directory
	if testing.Short() {
		t.Skip("end to end")
	}
	bin, err := testenv.MetalhubBinary()
	if err != nil {
		t.Fatal(err)
	}
	// Five servers: the emulated fleet's hardware follows each system's UUID, and these five
	// hold A100s, MI210s and no GPU at all.
	dataDir := t.TempDir()
	run := startDev(t, bin, dataDir, []string{"--servers", "5", "--power-delay", "200ms", "--metrics-bind-address", "0", "--table=false"})
	ctx := context.Background()
	run.wait(t, "5/5 Available", 3*time.Minute, func() (bool, string) {
		st := run.states(t)
		n := 0
		for _, v := range st {
			if v == "Available/Off" {
				n++
			}
		}
		return n == 5, fmt.Sprint(st)
	})
	list := &metalv1alpha1.ServerList{}
	if err := run.c.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	byID := map[string][]string{}
	withGPUs, without := 0, 0
	for _, s := range list.Items {
		count, err := strconv.Atoi(s.Labels[metalv1alpha1.GPUCountLabel])
		if err != nil || count != len(s.Status.GPUs) {
			t.Errorf("%s: gpu-count label %q, %d GPUs in status", s.Name, s.Labels[metalv1alpha1.GPUCountLabel], len(s.Status.GPUs))
		}
		for _, g := range s.Status.GPUs {
			if g.Model == "" || g.Vendor == "" || g.Driver == "" || g.PCIAddress == "" {
				t.Errorf("%s: GPU without names, driver or address: %+v", s.Name, g)
			}
		}
		for _, n := range s.Status.NetworkInterfaces {
			if n.Model == "" || n.Driver == "" || n.PCIAddress == "" {
				t.Errorf("%s: NIC %s without model, driver or address: %+v", s.Name, n.Name, n)
			}
		}
		if len(s.Status.Storages) == 0 || len(s.Status.Storages[0].Drives) == 0 {
			t.Errorf("%s: no drives in status", s.Name)
		}
		for _, st := range s.Status.Storages {
			for _, d := range st.Drives {
				if d.Model == "" || d.SerialNumber == "" || d.Capacity == nil || d.Capacity.IsZero() || d.MediaType == "" {
					t.Errorf("%s: drive %s without model, serial, size or media type: %+v", s.Name, d.Name, d)
				}
			}
		}
		pciGPUs := 0
		for _, p := range s.Status.PCIDevices {
			if p.VendorID == "10de" || p.VendorID == "1002" {
				pciGPUs += int(p.Count)
			}
		}
		if len(s.Status.PCIDevices) == 0 || pciGPUs != len(s.Status.GPUs) {
			t.Errorf("%s: PCI summary %+v does not count its %d GPUs", s.Name, s.Status.PCIDevices, len(s.Status.GPUs))
		}
		if count > 0 {
			withGPUs++
			id := s.Labels[metalv1alpha1.GPUIDLabel] + "/" + s.Labels[metalv1alpha1.GPUCountLabel]
			byID[id] = append(byID[id], s.Name)
		} else {
			without++
		}
	}
	if withGPUs == 0 || without == 0 || len(byID) < 2 {
		t.Fatalf("the fleet should mix GPU models and machines without: %v, %d without", byID, without)
	}
	// The rarest model and count: exactly those servers may take the claim.
	var wantID string
	for id, names := range byID {
		if wantID == "" || len(names) < len(byID[wantID]) {
			wantID = id
		}
	}
	gpuID, gpuCount, _ := strings.Cut(wantID, "/")
	claim := func(name string, labels map[string]string) *metalv1alpha1.ServerClaim {
		c := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOff, Image: "img",
				ServerSelector: &metav1.LabelSelector{MatchLabels: labels}}}
		if err := run.c.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	claim("gpu-claim", map[string]string{metalv1alpha1.GPUIDLabel: gpuID, metalv1alpha1.GPUCountLabel: gpuCount})
	claim("no-such-gpus", map[string]string{metalv1alpha1.GPUCountLabel: "3"})
	var bound string
	run.wait(t, "the GPU claim bound", time.Minute, func() (bool, string) {
		c := &metalv1alpha1.ServerClaim{}
		if err := run.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "gpu-claim"}, c); err != nil || c.Spec.ServerRef == nil {
			return false, fmt.Sprint(err)
		}
		bound = c.Spec.ServerRef.Name
		return true, ""
	})
	ok := false
	for _, n := range byID[wantID] {
		ok = ok || n == bound
	}
	if !ok {
		t.Fatalf("claim for %s bound %s, not one of %v", wantID, bound, byID[wantID])
	}
	// The claim no server matches has been looked at (it reports Unbound) and bound nothing.
	run.wait(t, "the claim for 3 GPUs reported", time.Minute, func() (bool, string) {
		c := &metalv1alpha1.ServerClaim{}
		if err := run.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "no-such-gpus"}, c); err != nil {
			return false, err.Error()
		}
		if c.Spec.ServerRef != nil {
			t.Fatalf("a claim for 3 GPUs, which no server has, bound %s", c.Spec.ServerRef.Name)
		}
		return c.Status.Phase == metalv1alpha1.PhaseUnbound, string(c.Status.Phase)
	})
	t.Logf("fleet by GPU id/count %v, %d without; the claim for %s bound %s", byID, without, wantID, bound)

	// A technician pulls a GPU out of an unclaimed server; `metalhub rediscover` runs discovery
	// again, which finds one GPU fewer than the baseline: InventoryDrift with a Warning event.
	var victim *metalv1alpha1.Server
	for i := range list.Items {
		if s := &list.Items[i]; len(s.Status.GPUs) > 0 && s.Name != bound {
			victim = s
			break
		}
	}
	if victim == nil {
		t.Fatal("no unclaimed server with GPUs")
	}
	gpus := len(victim.Status.GPUs)
	req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("http://%s/emulator/machines/%s/pulled", run.control, victim.Spec.SystemUUID), strings.NewReader(`{"gpus":1}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("pulling a GPU: %s", resp.Status)
	}
	kubeconfig := filepath.Join(dataDir, "kubeconfig")
	if out, errOut, code := metalhubCLI(t, bin, kubeconfig, "rediscover", victim.Name); code != 0 || !strings.Contains(out, "rediscover requested") {
		t.Fatalf("metalhub rediscover: exit %d, %s%s", code, out, errOut)
	}
	run.wait(t, "InventoryDrift after rediscovery", 2*time.Minute, func() (bool, string) {
		s := run.server(t, victim.Name)
		c := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionInventoryDrift)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, fmt.Sprintf("1 of %d GPUs missing", gpus)) &&
				len(s.Status.GPUs) == gpus-1 && s.Labels[metalv1alpha1.GPUCountLabel] == strconv.Itoa(gpus-1),
			fmt.Sprintf("state %s, %d GPUs, condition %+v", s.Annotations[lifecycle.StateAnnotation], len(s.Status.GPUs), c)
	})
	events := &eventsv1.EventList{}
	if err := run.c.List(ctx, events); err != nil {
		t.Fatal(err)
	}
	warned := false
	for _, e := range events.Items {
		warned = warned || (e.Regarding.Name == victim.Name && e.Reason == metalv1alpha1.ReasonHardwareMissing && e.Type == "Warning")
	}
	if !warned {
		t.Error("no HardwareMissing Warning event")
	}
	// Pulled on purpose: accepting the inventory ends the drift.
	if out, errOut, code := metalhubCLI(t, bin, kubeconfig, "accept-inventory", victim.Name); code != 0 {
		t.Fatalf("metalhub accept-inventory: exit %d, %s%s", code, out, errOut)
	}
	run.wait(t, "drift accepted", time.Minute, func() (bool, string) {
		s := run.server(t, victim.Name)
		c := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionInventoryDrift)
		return c == nil, fmt.Sprintf("%+v", c)
	})
}

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
)

// Two manager processes with leader election: only the leader reconciles; killing it while ten
// claimed servers are powering on hands over within the lease duration, and the emulator's
// recorder shows no BMC action twice.
func TestLeaderHandover(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a lease")
	}
	const n = 10
	purgeMetal(t)
	bin, err := testenv.MetalhubBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fleet := bootableFleet(t, n, time.Second)

	managers := make([]*managerProcess, 2)
	for i := range managers {
		managers[i] = &managerProcess{bin: bin, logPath: filepath.Join(t.TempDir(), fmt.Sprintf("manager-%d.log", i)), args: []string{
			"--kubeconfig", env.Kubeconfig, "--controllers", "metal", "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
			"--leader-elect", "--leader-election-namespace", "default", "--leader-election-id", "metalhub-handover-test",
			"--leader-election-lease-duration", "6s", "--leader-election-renew-deadline", "4s", "--leader-election-retry-period", "1s",
			"--registry-bind-address", "127.0.0.1:0", "--power-poll", "100ms", "--discovery-namespace", "default",
		}}
	}
	// Both replicas serve the registry, each on its own port, behind one front.
	front := registryFront(t, managers...)
	for _, m := range managers {
		m.args = append(m.args, "--registry-url", front)
		m.start(t)
	}
	defer func() {
		for _, m := range managers {
			m.kill()
		}
	}()
	log := func(m *managerProcess) string { b, _ := os.ReadFile(m.logPath); return string(b) }
	// Controllers start their workers only once their process holds the lease.
	const acquired = "Starting workers"

	names := registerFleet(t, fleet, "handover")
	waitAll := func(what string, timeout time.Duration, state metalv1alpha1.ServerState, power metalv1alpha1.PowerState) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			done := 0
			for _, name := range names {
				s := &metalv1alpha1.Server{}
				if env.Client.Get(ctx, client.ObjectKey{Name: name}, s) == nil &&
					s.Annotations[lifecycle.StateAnnotation] == string(state) && s.Status.PowerState == power {
					done++
				}
			}
			if done == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d/%d after %s", what, done, n, timeout)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitAll("Available", 2*time.Minute, metalv1alpha1.ServerStateAvailable, metalv1alpha1.PowerStateOff)

	leader, standby := managers[0], managers[1]
	if !strings.Contains(log(leader), acquired) {
		leader, standby = standby, leader
	}
	if !strings.Contains(log(leader), acquired) || strings.Contains(log(standby), acquired) {
		t.Fatal("want exactly one process running controllers (the leader)")
	}

	for i, name := range names {
		if err := env.Client.Create(ctx, &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("handover-%d", i)},
			Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "img", ServerRef: &corev1.LocalObjectReference{Name: name}}}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(700 * time.Millisecond) // power-ons issued and in flight (1 s emulated delay)
	holder := func() string {
		l := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "metalhub-handover-test"}, l); err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	old := holder()
	killed := time.Now()
	leader.kill()
	// A killed leader cannot release its lease: the standby takes it once it has expired. client-go
	// measures expiry from when the standby last saw a renewal and polls with up to 2.2x jitter on
	// the retry period, so the bound is the lease duration plus two jittered polls: 6 s + 2x2.2 s.
	for h := holder(); h == old || h == ""; h = holder() {
		if time.Since(killed) > 30*time.Second {
			t.Fatal("the standby did not take the lease within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	handover := time.Since(killed)
	t.Logf("standby took the lease %s after the leader was killed (lease duration 6s, retry period 1s)", handover.Round(100*time.Millisecond))
	if handover > 6*time.Second+2*2200*time.Millisecond {
		t.Errorf("handover took %s, more than the lease duration plus two jittered retry periods", handover)
	}
	waitAll("Reserved and On after the handover", time.Minute, metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerStateOn)

	perBMC := actionsPerBMC(fleet)
	for i := range n {
		if got := fmt.Sprint(perBMC[i]); got != "[Boot:Pxe/Once On ForceOff Boot:Pxe/Once On]" {
			t.Errorf("%s: BMC actions %s, want each exactly once across the handover", names[i], got)
		}
	}
}

package dev

import (
	"context"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/testenv"
)

// injectLogEntry logs an entry in the SEL of the server's system at its emulated BMC.
func (r *devRun) injectLogEntry(t *testing.T, s *metalv1alpha1.Server, entry string) {
	t.Helper()
	bmcIndex := -1
	if _, err := fmt.Sscanf(s.Spec.BMCRef.Name, "bmc-%d", &bmcIndex); err != nil {
		t.Fatalf("BMC of %s: %v", s.Name, err)
	}
	url := fmt.Sprintf("http://%s/emulator/bmcs/%d/systems/%s/log", r.control, bmcIndex, path.Base(s.Spec.SystemURI))
	resp, err := http.Post(url, "application/json", strings.NewReader(entry))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("injecting a log entry: %s", resp.Status)
	}
}

// Hardware health end to end, as `metalhub dev` runs it: each BMC is subscribed to the
// operator's event receiver; a critical event injected at an emulated BMC reaches its Server's
// conditions within 10 s; under the TaintAndMaintenance policy an unclaimed server gets its
// maintenance (and the taint), a claimed one only the taint.
func TestHardwareHealthEndToEnd(t *testing.T) {
	t.Parallel() // a run of its own: every address on port 0, its own data directory
	if testing.Short() {
		t.Skip("end to end")
	}
	bin, err := testenv.MetalhubBinary()
	if err != nil {
		t.Fatal(err)
	}
	// The log is polled rarely here: the events must carry it.
	run := startDev(t, bin, t.TempDir(), []string{"--servers", "2", "--power-delay", "200ms", "--metrics-bind-address", "0", "--table=false",
		"--hardware-fault-policy", "TaintAndMaintenance", "--hardware-log-poll-interval", "10m"})
	ctx := context.Background()
	run.wait(t, "2/2 Available", 3*time.Minute, func() (bool, string) {
		st := run.states(t)
		n := 0
		for _, v := range st {
			if v == "Available/Off" {
				n++
			}
		}
		return n == 2, fmt.Sprint(st)
	})
	run.wait(t, "every BMC subscribed", time.Minute, func() (bool, string) {
		list := &metalv1alpha1.BMCList{}
		if err := run.c.List(ctx, list); err != nil {
			return false, err.Error()
		}
		for _, b := range list.Items {
			if b.Status.EventsSubscriptionLink == "" {
				return false, b.Name + " has no subscription"
			}
		}
		return len(list.Items) == 2, fmt.Sprintf("%d BMCs", len(list.Items))
	})
	list := &metalv1alpha1.ServerList{}
	if err := run.c.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b metalv1alpha1.Server) int { return strings.Compare(a.Name, b.Name) })
	unclaimed, claimed := &list.Items[0], &list.Items[1]
	claim := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "health"},
		Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "img", ServerRef: &corev1.LocalObjectReference{Name: claimed.Name}}}
	if err := run.c.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	run.wait(t, "claimed server Reserved", time.Minute, func() (bool, string) {
		s := run.server(t, claimed.Name)
		return s.Status.State == metalv1alpha1.ServerStateReserved && s.Status.PowerState == metalv1alpha1.PowerStateOn, string(s.Status.State)
	})

	fault := func(s *metalv1alpha1.Server) *metav1.Condition {
		return apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionHardwareFault)
	}
	tainted := func(s *metalv1alpha1.Server) bool {
		return slices.ContainsFunc(s.Spec.Taints, func(t metalv1alpha1.Taint) bool { return t.Key == metalv1alpha1.HardwareFaultTaintKey })
	}
	for _, s := range []*metalv1alpha1.Server{unclaimed, claimed} {
		start := time.Now()
		run.injectLogEntry(t, s, `{"severity":"Critical","sensorType":"Memory","message":"Uncorrectable ECC error on DIMM B2"}`)
		run.wait(t, s.Name+": HardwareFault within 10 s", 10*time.Second, func() (bool, string) {
			got := run.server(t, s.Name)
			c := fault(got)
			return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "DIMM B2") && tainted(got), fmt.Sprintf("%+v", c)
		})
		t.Logf("%s: critical event to HardwareFault condition in %v", s.Name, time.Since(start).Round(time.Millisecond))
	}
	run.wait(t, "maintenance of the unclaimed server", 30*time.Second, func() (bool, string) {
		maints := &metalv1alpha1.ServerMaintenanceList{}
		if err := run.c.List(ctx, maints, client.MatchingLabels{metalv1alpha1.HardwareFaultTaintKey: "true"}); err != nil {
			return false, err.Error()
		}
		for _, m := range maints.Items {
			if m.Name == "hardware-fault-"+unclaimed.Name && m.Spec.ServerRef.Name == unclaimed.Name {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d fault maintenances", len(maints.Items))
	})
	run.wait(t, "unclaimed server in Maintenance", time.Minute, func() (bool, string) {
		s := run.server(t, unclaimed.Name)
		return s.Status.State == metalv1alpha1.ServerStateMaintenance, string(s.Status.State)
	})
	maints := &metalv1alpha1.ServerMaintenanceList{}
	if err := run.c.List(ctx, maints); err != nil {
		t.Fatal(err)
	}
	for _, x := range maints.Items {
		if x.Spec.ServerRef != nil && x.Spec.ServerRef.Name == claimed.Name {
			t.Fatalf("a maintenance %s/%s was opened for the claimed server", x.Namespace, x.Name)
		}
	}
	if s := run.server(t, claimed.Name); s.Status.State != metalv1alpha1.ServerStateReserved || s.Status.PowerState != metalv1alpha1.PowerStateOn {
		t.Fatalf("the claimed server was disturbed: %s, %s", s.Status.State, s.Status.PowerState)
	}
}

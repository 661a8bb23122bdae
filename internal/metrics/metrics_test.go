package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/scheme"
)

func server(name, annotation string, status metalv1alpha1.ServerState, power metalv1alpha1.PowerState) *metalv1alpha1.Server {
	s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if annotation != "" {
		s.Annotations = map[string]string{lifecycle.StateAnnotation: annotation}
	}
	s.Status.State, s.Status.PowerState = status, power
	return s
}

// The gauges count by the durable state (not status.state), report every label value at 0, and
// only the leader reports them.
func TestCollector(t *testing.T) {
	objs := []client.Object{
		server("a", "Available", "Available", "Off"),
		server("b", "Reserved", "", "On"),           // status wiped: still Reserved
		server("c", "Available", "Reserved", "Off"), // a stale mirror does not count
		server("d", "", "Discovery", ""),            // migrated object, no power observed yet
		&metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "c1"}, Status: metalv1alpha1.ServerClaimStatus{Phase: metalv1alpha1.PhaseBound}},
		&metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "c2"}},
		// A BIOSVersion whose status was wiped counts where its record says.
		&systemv1alpha1.BIOSVersion{ObjectMeta: metav1.ObjectMeta{Name: "v1", Annotations: map[string]string{
			record.Annotation: `{"phase":"task","for":"2","version":"2","attempt":1,"at":1}`}}},
		&systemv1alpha1.BIOSVersion{ObjectMeta: metav1.ObjectMeta{Name: "v2"}},
		&infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Status: infrahubv1alpha1.InfrahubSyncStatus{SyncState: infrahubv1alpha1.StateFailed}},
		&infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Status: infrahubv1alpha1.VidraResourceStatus{
			DeployState: infrahubv1alpha1.StateSucceeded, ManagedResources: make([]infrahubv1alpha1.ManagedResource, 3)}},
	}
	reader := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).WithStatusSubresource(objs...).Build()
	elected := make(chan struct{})
	c := &collector{src: &Source{Reader: reader, Elected: elected, Metal: true, Delivery: true}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)

	// A standby reports only that it is one.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP metalhub_leader 1 if this replica holds the leader-election lease (or runs without leader election), else 0.
# TYPE metalhub_leader gauge
metalhub_leader 0
`)); err != nil {
		t.Fatal(err)
	}
	if n, _ := testutil.GatherAndCount(reg); n != 1 {
		t.Fatalf("a standby reports %d series", n)
	}

	close(elected)
	n, err := testutil.GatherAndCount(reg, "metalhub_servers")
	if err != nil {
		t.Fatal(err)
	}
	if want := len(ServerStates) * len(PowerStates); n != want {
		t.Errorf("%d metalhub_servers series, want every state x power state (%d)", n, want)
	}
	for _, tc := range []struct {
		name, labels string
		want         float64
	}{
		{"metalhub_servers", `state="Available",power_state="Off"`, 2},
		{"metalhub_servers", `state="Reserved",power_state="On"`, 1},
		{"metalhub_servers", `state="Reserved",power_state="Off"`, 0},
		{"metalhub_servers", `state="Discovery",power_state="Unknown"`, 1},
		{"metalhub_servers", `state="Error",power_state="Off"`, 0},
		{"metalhub_server_claims", `phase="Bound"`, 1},
		{"metalhub_server_claims", `phase="Unbound"`, 1},
		{"metalhub_infrahub_syncs", `state="Failed"`, 1},
		{"metalhub_infrahub_syncs", `state="Succeeded"`, 0},
		{"metalhub_vidra_resources", `state="Succeeded"`, 1},
		{"metalhub_vidra_resources", `state="Failed"`, 0},
		{"metalhub_vidra_applied_objects", ``, 3},
		{"metalhub_firmware_objects", `kind="BIOSVersion",state="InProgress"`, 1},
		{"metalhub_firmware_objects", `kind="BIOSVersion",state="Pending"`, 1},
		{"metalhub_firmware_objects", `kind="BMCVersion",state="Failed"`, 0},
		{"metalhub_leader", ``, 1},
		{"metalhub_state_metrics_errors", ``, 0},
	} {
		if got, ok := value(t, reg, tc.name, tc.labels); !ok || got != tc.want {
			t.Errorf("%s{%s} = %v (present %t), want %v", tc.name, tc.labels, got, ok, tc.want)
		}
	}
}

// value finds one series in reg's output by name and exact label text (as in the exposition).
func value(t *testing.T, reg prometheus.Gatherer, name, labels string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var parts []string
			for _, lp := range m.GetLabel() {
				parts = append(parts, lp.GetName()+`="`+lp.GetValue()+`"`)
			}
			if sameLabels(strings.Join(parts, ","), labels) {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func sameLabels(a, b string) bool {
	split := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, p := range strings.Split(s, ",") {
			if p != "" {
				m[p] = true
			}
		}
		return m
	}
	x, y := split(a), split(b)
	if len(x) != len(y) {
		return false
	}
	for k := range x {
		if !y[k] {
			return false
		}
	}
	return true
}

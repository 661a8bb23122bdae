package telemetry_test

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/emulator/redfish/sensors"
	"github.com/metalhub/metalhub/internal/telemetry"
)

// fleet is an emulated fleet with one Server per system, named s<bmc>-<k>.
type fleet struct {
	em      *redfish.Emulator
	c       client.Client
	servers map[string]*redfish.System
}

func newFleet(t *testing.T, bmcs, perBMC int) *fleet {
	t.Helper()
	em, err := redfish.Start(redfish.Options{BMCs: bmcs, SystemsPerBMC: perBMC, PowerDelay: -1, InitialPower: redfish.PowerOn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = em.Close() })
	f := &fleet{em: em, servers: map[string]*redfish.System{}}
	objs := []client.Object{&metalv1alpha1.BMCSecret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		Data:       map[string][]byte{metalv1alpha1.BMCSecretUsernameKey: []byte("admin"), metalv1alpha1.BMCSecretPasswordKey: []byte("password")},
	}}
	for _, b := range em.BMCs() {
		u, _ := url.Parse(b.URL())
		host, port, _ := net.SplitHostPort(u.Host)
		p, _ := strconv.Atoi(port)
		for k, s := range b.Systems() {
			name := "s" + strconv.Itoa(b.Index()) + "-" + strconv.Itoa(k)
			f.servers[name] = s
			objs = append(objs, &metalv1alpha1.Server{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: metalv1alpha1.ServerSpec{
					SystemUUID: s.UUID(), SystemURI: "/redfish/v1/Systems/" + s.ID(),
					BMC: &metalv1alpha1.BMCAccess{
						Protocol: metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfishLocal, Port: int32(p)},
						Address:  host, BMCSecretRef: corev1.LocalObjectReference{Name: "creds"},
					},
				},
			})
		}
	}
	f.c = metaltest.FakeClient(objs...)
	return f
}

func (f *fleet) collector(t *testing.T, m *telemetry.Metrics, reqTimeout time.Duration) *telemetry.Collector {
	t.Helper()
	p := bmc.NewPool(bmc.Options{RequestTimeout: reqTimeout})
	t.Cleanup(p.Close)
	return &telemetry.Collector{Client: f.c, Pool: p, Metrics: m, Interval: time.Minute, Concurrency: 2, ReadTimeout: 5 * time.Second}
}

// gather is the registry's families by name.
func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// value is the gauge or counter of family name with labels, and whether it is there.
func value(mfs map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if got[k] != v {
				continue next
			}
		}
		if m.GetGauge() != nil {
			return m.GetGauge().GetValue(), true
		}
		return m.GetCounter().GetValue(), true
	}
	return 0, false
}

func TestRound(t *testing.T) {
	f := newFleet(t, 4, 2)
	ctx := context.Background()
	// s0-0 loses a PSU and a fan; s1-0's Server expects another machine; s1-1 has no identity.
	if err := f.servers["s0-0"].SetSensorFaults(redfish.SensorFaults{FailedPSUs: []string{"PSU2"}, StoppedFans: []string{"Fan3"}, MemoryHealth: "Critical"}); err != nil {
		t.Fatal(err)
	}
	for name, uuid := range map[string]string{"s1-0": "00000000-0000-4000-8000-0000000000ff", "s1-1": ""} {
		s := &metalv1alpha1.Server{}
		if err := f.c.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
			t.Fatal(err)
		}
		s.Spec.SystemUUID = uuid
		if err := f.c.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	m := telemetry.NewMetrics(0)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	c := f.collector(t, m, 2*time.Second)
	c.Round(ctx)

	mfs := gather(t, reg)
	for name, s := range f.servers {
		w, ok := value(mfs, "metalhub_server_power_watts", map[string]string{"server": name})
		if name == "s1-0" || name == "s1-1" {
			if ok {
				t.Errorf("%s: power exported for a server whose machine is not proven", name)
			}
			continue
		}
		r := sensors.RangesFor(s.SensorIndex(), true).PowerWatts
		if !ok || w < r[0] || w > r[1]+1 {
			t.Errorf("%s: power %v (exported %t), want in %v", name, w, ok, r)
		}
		if v, ok := value(mfs, "metalhub_server_temperature_celsius", map[string]string{"server": name, "sensor": "inlet_temp"}); !ok || v < 15 {
			t.Errorf("%s: inlet_temp %v %t", name, v, ok)
		}
	}
	for _, tc := range []struct {
		metric string
		labels map[string]string
		want   float64
	}{
		{"metalhub_server_psu_healthy", map[string]string{"server": "s0-0", "psu": "psu2"}, 0},
		{"metalhub_server_psu_healthy", map[string]string{"server": "s0-0", "psu": "psu1"}, 1},
		{"metalhub_server_psu_healthy", map[string]string{"server": "s0-1", "psu": "psu2"}, 1},
		{"metalhub_server_fan_rpm", map[string]string{"server": "s0-0", "fan": "fan3"}, 0},
		{"metalhub_server_fan_healthy", map[string]string{"server": "s0-0", "fan": "fan3"}, 0},
		{"metalhub_server_component_healthy", map[string]string{"server": "s0-0", "component": "memory"}, 0},
		{"metalhub_server_component_healthy", map[string]string{"server": "s0-0", "component": "processor"}, 1},
		{"metalhub_telemetry_reads_total", map[string]string{"result": "ok"}, 6},
		{"metalhub_telemetry_reads_total", map[string]string{"result": "mismatch"}, 1},
	} {
		if got, ok := value(mfs, tc.metric, tc.labels); !ok || got != tc.want {
			t.Errorf("%s%v = %v (exported %t), want %v", tc.metric, tc.labels, got, ok, tc.want)
		}
	}

	// A deleted server's series go with the next round.
	if err := f.c.Delete(ctx, &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "s2-0"}}); err != nil {
		t.Fatal(err)
	}
	c.Round(ctx)
	if got := strings.Join(m.Servers(), ","); got != "s0-0,s0-1,s2-1,s3-0,s3-1" {
		t.Errorf("servers with series after a deletion: %s", got)
	}
	if n := testutil.CollectAndCount(m, "metalhub_server_power_watts"); n != 5 {
		t.Errorf("%d power series, want 5", n)
	}
}

// A BMC that stops answering costs one read's timeout, then is skipped while its breaker is
// open; its servers keep their last readings.
func TestRoundSkipsBrokenBMC(t *testing.T) {
	f := newFleet(t, 2, 1)
	ctx := context.Background()
	m := telemetry.NewMetrics(0)
	c := f.collector(t, m, 300*time.Millisecond)
	c.Round(ctx)
	if got := strings.Join(m.Servers(), ","); got != "s0-0,s1-0" {
		t.Fatalf("servers read: %s", got)
	}
	f.em.BMC(1).SetFaults(redfish.Faults{Hang: true})
	c.Round(ctx) // times out: the breaker opens
	c.Round(ctx) // skipped without asking
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	mfs := gather(t, reg)
	for result, want := range map[string]float64{"ok": 4, "failed": 1, "skipped": 1} {
		if got, _ := value(mfs, "metalhub_telemetry_reads_total", map[string]string{"result": result}); got != want {
			t.Errorf("reads %s = %v, want %v", result, got, want)
		}
	}
	if _, ok := value(mfs, "metalhub_server_power_watts", map[string]string{"server": "s1-0"}); !ok {
		t.Error("the last reading of a server whose BMC stopped answering is gone")
	}
}

// While Yield holds the collector back no read starts; once it lets go, the round reads every
// server.
func TestRoundYields(t *testing.T) {
	f := newFleet(t, 2, 1)
	m := telemetry.NewMetrics(0)
	c := f.collector(t, m, 2*time.Second)
	const held = 5 // looks that hold it back
	var (
		mu            sync.Mutex // one look at a time: a read starts only after a look let it go
		looks         int
		readWhileHeld []string
	)
	c.Yield = func() bool {
		mu.Lock()
		defer mu.Unlock()
		looks++
		if looks <= held && len(m.Servers()) > 0 {
			readWhileHeld = m.Servers()
		}
		return looks <= held
	}
	c.Round(context.Background())
	if readWhileHeld != nil {
		t.Errorf("read while held back: %v", readWhileHeld)
	}
	if looks <= held {
		t.Errorf("%d looks, want more than %d", looks, held)
	}
	if got := strings.Join(m.Servers(), ","); got != "s0-0,s1-0" {
		t.Errorf("servers read once let go: %s", got)
	}

	// A round held back when its context ends stops without reading.
	m = telemetry.NewMetrics(0)
	c = f.collector(t, m, 2*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	c.Yield = func() bool { cancel(); return true }
	c.Round(ctx)
	if got := m.Servers(); len(got) != 0 {
		t.Errorf("read after the context ended: %v", got)
	}
}

// A fleet that never stops working still gets its readings: a round held back for longer than
// its interval reads on, one server at a time.
func TestRoundHeldPastItsIntervalReadsOn(t *testing.T) {
	f := newFleet(t, 3, 1)
	m := telemetry.NewMetrics(0)
	c := f.collector(t, m, 2*time.Second)
	start := time.Now()
	var (
		mu    sync.Mutex
		calls int
	)
	// The round's start, then an hour later: past its interval at once.
	c.Now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return start
		}
		return start.Add(time.Hour)
	}
	c.Yield = func() bool { return true } // lifecycle work never stops
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.Round(ctx) // a round that waited for the work to stop would end with the context, unread
	if got := strings.Join(m.Servers(), ","); got != "s0-0,s1-0,s2-0" {
		t.Errorf("servers read past the interval: %q", got)
	}
}

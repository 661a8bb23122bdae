package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/apilimit"
	"github.com/metalhub/metalhub/internal/discovery"
	"github.com/metalhub/metalhub/internal/probe"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

const namespace = "metal-discovery"

var nsOnce sync.Once

// running is a registry served by its own manager (no controllers) on a free local port.
type running struct {
	reg    *Registry
	url    string
	cached client.Client
	stop   func()
}

// startRegistry runs a manager with only the registry; wrap may intercept the registry's client.
func startRegistry(t *testing.T, wrap func(client.Client) client.Client) *running {
	t.Helper()
	return startRegistryReading(t, wrap, nil)
}

// startRegistryReading is startRegistry with the registry's live reads (APIReader) wrapped too.
func startRegistryReading(t *testing.T, wrap func(client.Client) client.Client, wrapReader func(client.Reader) client.Reader) *running {
	t.Helper()
	return startRegistryWith(t, wrap, wrapReader, testRoundWait)
}

// testRoundWait is the tests' Options.RoundWait: short, so that a report refused for want of a
// round is refused soon.
const testRoundWait = 300 * time.Millisecond

// startRegistryWith is startRegistryReading with the registry's RoundWait.
func startRegistryWith(t *testing.T, wrap func(client.Client) client.Client, wrapReader func(client.Reader) client.Reader, roundWait time.Duration) *running {
	t.Helper()
	nsOnce.Do(func() {
		err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	})
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  scheme.New(),
		Logger:  logr.Discard(),
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		t.Fatal(err)
	}
	c := mgr.GetClient()
	if wrap != nil {
		c = wrap(c)
	}
	var reader client.Reader = mgr.GetAPIReader()
	if wrapReader != nil {
		reader = wrapReader(reader)
	}
	reg, err := New(c, Options{BindAddress: "127.0.0.1:0", DiscoveryNamespace: namespace,
		APIReader: reader, Logger: testr.New(t), MaxBodyBytes: 64 << 10,
		Recorder: mgr.GetEventRecorder("discovery-registry"), RoundWait: roundWait})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := mgr.GetCache().GetInformer(ctx, &metalv1alpha1.Server{})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.WatchRounds(inf); err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(reg); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	select {
	case <-reg.Listening():
	case err := <-done:
		t.Fatalf("manager stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("registry not listening")
	}
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("cache not synced")
	}
	return &running{reg: reg, url: "http://" + reg.Addr().String(), cached: mgr.GetClient(), stop: stop}
}

// round is a Server in Discovery as the Server controller leaves it: round annotation and a
// round Secret with the token (the ServerBootConfiguration plays no part in the registry).
type round struct {
	server *metalv1alpha1.Server
	id     string
	token  string
}

func newServerInDiscovery(t *testing.T, r *running, name, uuid string) *round {
	t.Helper()
	ctx := context.Background()
	id, token, err := discovery.NewRound()
	if err != nil {
		t.Fatal(err)
	}
	srv := &metalv1alpha1.Server{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{discovery.RoundAnnotation: id}},
		Spec:       metalv1alpha1.ServerSpec{SystemUUID: uuid},
	}
	if err := env.Client.Create(ctx, srv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), srv) })
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: discovery.ObjectName(name), Namespace: namespace,
			Labels: map[string]string{discovery.ServerLabel: name, discovery.RoundLabel: id}},
		Data: map[string][]byte{discovery.TokenKey: []byte(token), discovery.IgnitionKey: []byte("variant: fcos\n")},
	}
	if err := env.Client.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), sec) })
	waitCached(t, r, name, func(s *metalv1alpha1.Server) bool { return true })
	return &round{server: srv, id: id, token: token}
}

// startNewRound does what the controller does to begin another round: new token in the Secret,
// then the round annotation.
func startNewRound(t *testing.T, rd *round) *round {
	t.Helper()
	ctx := context.Background()
	id, token, _ := discovery.NewRound()
	setSecret(t, rd.server.Name, id, token)
	srv := get(t, rd.server.Name)
	// A patch of the one annotation: the registry writes the Server too (status).
	patch := client.MergeFrom(srv.DeepCopy())
	srv.Annotations[discovery.RoundAnnotation] = id
	if err := env.Client.Patch(ctx, srv, patch); err != nil {
		t.Fatal(err)
	}
	return &round{server: srv, id: id, token: token}
}

func setSecret(t *testing.T, server, id, token string) {
	t.Helper()
	sec := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: discovery.ObjectName(server)}, sec); err != nil {
		t.Fatal(err)
	}
	sec.Labels[discovery.RoundLabel] = id
	sec.Data[discovery.TokenKey] = []byte(token)
	if err := env.Client.Update(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
}

func waitCached(t *testing.T, r *running, name string, ok func(*metalv1alpha1.Server) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := &metalv1alpha1.Server{}
		if err := r.cached.Get(context.Background(), client.ObjectKey{Name: name}, s); err == nil && ok(s) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server %s not in the cache", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func get(t *testing.T, name string) *metalv1alpha1.Server {
	t.Helper()
	s := &metalv1alpha1.Server{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func sampleReport(uuid string) *probe.Report {
	return &probe.Report{
		Version: probe.ReportVersion, SystemUUID: uuid,
		System: probe.System{UUID: strings.ToLower(uuid), Vendor: "Dell Inc.", Architecture: "x86_64"},
		CPUs: []probe.CPU{
			{Socket: 0, Vendor: "GenuineIntel", Model: "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", Cores: 32, Threads: 64, MaxMHz: 3200},
			{Socket: 1, Vendor: "GenuineIntel", Model: "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", Cores: 32, Threads: 64, MaxMHz: 3200},
		},
		MemoryBytes: 512 << 30,
		NICs: []probe.NIC{
			{Name: "eno1", MAC: "b0:26:28:00:00:01", Carrier: "up", SpeedMbps: 25000, IPs: []string{"fe80::1", "10.0.0.5"},
				Neighbors: []probe.Neighbor{{ChassisID: "00:1c:73:00:00:01", ChassisIDType: "mac", SystemName: "leaf-01", PortID: "Ethernet1"}}},
			{Name: "eno2", MAC: "b0:26:28:00:00:02", Carrier: "down"},
			{Name: "podman0", MAC: "02:00:00:00:00:01", Carrier: "up", Virtual: true},
		},
		BlockDevices: []probe.BlockDevice{
			{Name: "nvme0n1", SizeBytes: 960197124096, Model: "SAMSUNG MZQL2960HCJR"},
			{Name: "sda", SizeBytes: 4000787030016, Vendor: "ATA", Model: "ST4000NM", Rotational: true},
		},
		PCIDevices: []probe.PCIDevice{{Address: "0000:00:00.0", Vendor: "8086", Device: "09a2", Class: "060000"}},
	}
}

func encode(t *testing.T, r *probe.Report) []byte {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func post(t *testing.T, url, auth string, body []byte) (int, string) {
	return postReader(t, url, auth, bytes.NewReader(body))
}

// postReader posts body; a reader of unknown length is sent chunked, without Content-Length.
func postReader(t *testing.T, url, auth string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+probe.RegisterPath, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func count(result string) float64 { return testutil.ToFloat64(reportsTotal.WithLabelValues(result)) }

func TestValidReport(t *testing.T) {
	r := startRegistry(t, nil)
	// Upper case on the Server, lower case from the kernel: the index matches both.
	rd := newServerInDiscovery(t, r, "valid-report", "4C4C4544-0042-3510-8056-B2C04F4B3732")
	accepted := count(resultAccepted)

	code, body := post(t, r.url, "Bearer "+rd.token, encode(t, sampleReport("4c4c4544-0042-3510-8056-b2c04f4b3732")))
	if code != http.StatusOK || body != `{"done":true}` {
		t.Fatalf("got %d %s", code, body)
	}
	if got := count(resultAccepted) - accepted; got != 1 {
		t.Fatalf("accepted counter moved by %v", got)
	}
	srv := get(t, "valid-report")
	if !discovery.Fresh(srv) || srv.Annotations[discovery.ReportedAnnotation] != rd.id {
		t.Fatalf("annotations %v", srv.Annotations)
	}
	st := srv.Status
	if len(st.Processors) != 2 || st.Processors[1].ID != "CPU1" || st.Processors[0].TotalThreads != 64 ||
		st.Processors[0].Manufacturer != "Intel(R) Corporation" || st.Processors[0].InstructionSet != "x86-64" {
		t.Errorf("processors %+v", st.Processors)
	}
	if st.TotalSystemMemory == nil || st.TotalSystemMemory.Cmp(resource.MustParse("512Gi")) != 0 {
		t.Errorf("memory %v", st.TotalSystemMemory)
	}
	if len(st.NetworkInterfaces) != 2 { // the virtual podman0 is left out
		t.Fatalf("nics %+v", st.NetworkInterfaces)
	}
	eno1 := st.NetworkInterfaces[0]
	if eno1.MACAddress != "b0:26:28:00:00:01" || eno1.IP != "10.0.0.5" || eno1.CarrierStatus != "up" ||
		len(eno1.Neighbors) != 1 || eno1.Neighbors[0].MACAddress != "00:1c:73:00:00:01" || eno1.Neighbors[0].PortID != "Ethernet1" {
		t.Errorf("eno1 %+v", eno1)
	}
	if len(st.Storages) != 1 || len(st.Storages[0].Drives) != 2 || st.Storages[0].Drives[1].MediaType != "HDD" ||
		st.Storages[0].Drives[0].Type != "NVMe" || st.Storages[0].Drives[0].Capacity.Value() != 960197124096 {
		t.Errorf("storages %+v", st.Storages)
	}

	// The agent keeps posting until it sees done; later posts change nothing.
	dup := count(resultDuplicate)
	waitCached(t, r, "valid-report", func(s *metalv1alpha1.Server) bool { return discovery.Fresh(s) })
	if code, _ := post(t, r.url, "Bearer "+rd.token, encode(t, sampleReport(srv.Spec.SystemUUID))); code != http.StatusOK {
		t.Fatalf("repeat: %d", code)
	}
	if again := get(t, "valid-report"); again.ResourceVersion != srv.ResourceVersion {
		t.Fatal("a repeated report wrote the server again")
	}
	if count(resultDuplicate)-dup != 1 {
		t.Fatal("duplicate not counted")
	}
}

// waitEvent waits for an event about the named object with reason and a note that ok accepts.
func waitEvent(t *testing.T, regarding, reason string, ok func(note string) bool) {
	t.Helper()
	waitEventOfType(t, corev1.EventTypeWarning, regarding, reason, ok)
}

func waitEventOfType(t *testing.T, typ, regarding, reason string, ok func(note string) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		list := &eventsv1.EventList{}
		if err := env.Client.List(context.Background(), list); err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Regarding.Name == regarding && e.Reason == reason && e.Type == typ && ok(e.Note) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s %s event for %s (%d events)", reason, typ, regarding, len(list.Items))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReportSurvivesWithoutManager: a report accepted while no controller runs is held by the
// Server object itself, so a controller started later (on a fresh read) sees discovery done.
func TestReportSurvivesWithoutManager(t *testing.T) {
	r := startRegistry(t, nil)
	rd := newServerInDiscovery(t, r, "durable", "d0d0d0d0-0000-0000-0000-000000000001")
	if code, body := post(t, r.url, "Bearer "+rd.token, encode(t, sampleReport(rd.server.Spec.SystemUUID))); code != http.StatusOK {
		t.Fatalf("got %d %s", code, body)
	}
	r.stop()

	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	srv := &metalv1alpha1.Server{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "durable"}, srv); err != nil {
		t.Fatal(err)
	}
	if !discovery.Fresh(srv) || len(srv.Status.Processors) != 2 || srv.Status.TotalSystemMemory == nil || len(srv.Status.NetworkInterfaces) == 0 {
		t.Fatalf("fresh read: annotations %v status %+v", srv.Annotations, srv.Status)
	}
}

// noWatch lets the manager's client (which cannot watch) be wrapped by an interceptor.
type noWatch struct{ client.Client }

func (noWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("not supported")
}

// interceptFirstStatusPatch runs before() just before the registry's first status write.
func interceptFirstStatusPatch(before func()) func(client.Client) client.Client {
	var fired atomic.Bool
	return func(c client.Client) client.Client {
		return interceptor.NewClient(noWatch{c}, interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if sub == "status" && fired.CompareAndSwap(false, true) {
					before()
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		})
	}
}

// A write by someone else between the registry's read and its write makes the registry's
// optimistic lock fail; it reads again and succeeds, keeping the other write.
func TestConcurrentWriteIsRetried(t *testing.T) {
	r := startRegistry(t, interceptFirstStatusPatch(func() {
		s := get(t, "race-other-writer")
		s.Labels = map[string]string{"touched": "yes"}
		if err := env.Client.Update(context.Background(), s); err != nil {
			t.Error(err)
		}
	}))
	rd := newServerInDiscovery(t, r, "race-other-writer", "e0e0e0e0-0000-0000-0000-000000000001")
	if code, body := post(t, r.url, "Bearer "+rd.token, encode(t, sampleReport(rd.server.Spec.SystemUUID))); code != http.StatusOK {
		t.Fatalf("got %d %s", code, body)
	}
	s := get(t, rd.server.Name)
	if !discovery.Fresh(s) || s.Labels["touched"] != "yes" || len(s.Status.Processors) != 2 {
		t.Fatalf("labels %v annotations %v processors %d", s.Labels, s.Annotations, len(s.Status.Processors))
	}
}

// A report's writes wait ahead of the controllers' for the manager's API write slots: the
// machine waits on them with a deadline of its own.
func TestReportWritesGoAhead(t *testing.T) {
	var mu sync.Mutex
	var prios []apilimit.Priority
	note := func(ctx context.Context) {
		mu.Lock()
		prios = append(prios, apilimit.PriorityOf(ctx))
		mu.Unlock()
	}
	r := startRegistry(t, func(c client.Client) client.Client {
		return interceptor.NewClient(noWatch{c}, interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
				note(ctx)
				return c.Patch(ctx, obj, p, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				note(ctx)
				return c.SubResource(sub).Patch(ctx, obj, p, opts...)
			},
		})
	})
	rd := newServerInDiscovery(t, r, "report-ahead", "e0e0e0e0-0000-0000-0000-0000000000a1")
	if code, body := post(t, r.url, "Bearer "+rd.token, encode(t, sampleReport(rd.server.Spec.SystemUUID))); code != http.StatusOK {
		t.Fatalf("got %d %s", code, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(prios) < 2 {
		t.Fatalf("%d patches seen, want the status and the reported annotation", len(prios))
	}
	for i, p := range prios {
		if p != apilimit.Ahead {
			t.Errorf("patch %d went out with priority %v, want Ahead", i, p)
		}
	}
}

// countingReader counts the live reads by kind.
type countingReader struct {
	client.Reader
	mu    sync.Mutex
	reads map[string]int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.mu.Lock()
	c.reads[fmt.Sprintf("%T", obj)]++
	c.mu.Unlock()
	return c.Reader.Get(ctx, key, obj, opts...)
}

func (c *countingReader) count(obj client.Object) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads[fmt.Sprintf("%T", obj)]
}

// A report for a server whose round is not recorded yet (its box powered on before the write
// that records the round) is refused on the cache's word, without reading the Server or the
// round Secret from the API server: a fleet's probes ask again and again while those writes
// wait.
func TestReportBeforeItsRoundReadsNoSecret(t *testing.T) {
	reads := &countingReader{reads: map[string]int{}}
	r := startRegistryReading(t, nil, func(rd client.Reader) client.Reader { reads.Reader = rd; return reads })
	rd := newServerInDiscovery(t, r, "no-round-yet", "e0e0e0e0-0000-0000-0000-0000000000b1")
	srv := patchRound(t, rd.server.Name, "")
	waitCached(t, r, srv.Name, func(s *metalv1alpha1.Server) bool { return s.Annotations[discovery.RoundAnnotation] == "" })
	secrets, servers := reads.count(&corev1.Secret{}), reads.count(&metalv1alpha1.Server{})
	if code, body := post(t, r.url, "Bearer "+rd.token, encode(t, sampleReport(rd.server.Spec.SystemUUID))); code != http.StatusUnauthorized {
		t.Fatalf("got %d %s, want 401", code, body)
	}
	if n := reads.count(&corev1.Secret{}) - secrets; n != 0 {
		t.Errorf("%d live reads of the round Secret, want none", n)
	}
	if n := reads.count(&metalv1alpha1.Server{}) - servers; n != 0 {
		t.Errorf("%d live reads of the Server, want none", n)
	}
	// Once the round is recorded and cached, the same report is accepted.
	patchRound(t, rd.server.Name, rd.id)
	waitCached(t, r, srv.Name, func(s *metalv1alpha1.Server) bool { return s.Annotations[discovery.RoundAnnotation] == rd.id })
	if code, body := post(t, r.url, "Bearer "+rd.token, encode(t, sampleReport(rd.server.Spec.SystemUUID))); code != http.StatusOK {
		t.Fatalf("after the round was recorded: got %d %s", code, body)
	}
}

// A report that comes before its round is recorded (the box powered on before the write that
// records it) waits for the round to show in the cache and is accepted then, with no refusal
// for the probe to back off from and nothing read from the API server.
func TestReportWaitsForItsRound(t *testing.T) {
	reads := &countingReader{reads: map[string]int{}}
	r := startRegistryWith(t, nil, func(rd client.Reader) client.Reader { reads.Reader = rd; return reads }, time.Minute)
	rd := newServerInDiscovery(t, r, "round-later", "e0e0e0e0-0000-0000-0000-0000000000b2")
	srv := patchRound(t, rd.server.Name, "")
	waitCached(t, r, srv.Name, func(s *metalv1alpha1.Server) bool { return s.Annotations[discovery.RoundAnnotation] == "" })
	servers := reads.count(&metalv1alpha1.Server{})
	type answer struct {
		code int
		body string
	}
	answered := make(chan answer, 1)
	go func() {
		code, body := post(t, r.url, "Bearer "+rd.token, encode(t, sampleReport(rd.server.Spec.SystemUUID)))
		answered <- answer{code, body}
	}()
	testenv.Eventually(t, 10*time.Second, "the report waiting for its round", func() (bool, string) {
		r.reg.mu.Lock()
		w := r.reg.rounds
		r.reg.mu.Unlock()
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.waiting[srv.Name]) == 1, fmt.Sprint(w.waiting)
	})
	select {
	case a := <-answered:
		t.Fatalf("answered %d %s before the round was recorded", a.code, a.body)
	default:
	}
	patchRound(t, rd.server.Name, rd.id)
	select {
	case a := <-answered:
		if a.code != http.StatusOK {
			t.Fatalf("got %d %s once the round was recorded, want 200", a.code, a.body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the report still waits after its round was recorded")
	}
	if n := reads.count(&metalv1alpha1.Server{}) - servers; n != 0 {
		t.Errorf("%d live reads of the Server, want none", n)
	}
	if !discovery.Fresh(get(t, rd.server.Name)) {
		t.Error("round not marked reported")
	}
}

// patchRound sets the round annotation of server name (round "": removes it), as the Server
// controller's write does, and returns the Server.
func patchRound(t *testing.T, name, round string) *metalv1alpha1.Server {
	t.Helper()
	srv := get(t, name)
	patch := client.MergeFrom(srv.DeepCopy())
	if round == "" {
		delete(srv.Annotations, discovery.RoundAnnotation)
	} else {
		if srv.Annotations == nil {
			srv.Annotations = map[string]string{}
		}
		srv.Annotations[discovery.RoundAnnotation] = round
	}
	if err := env.Client.Patch(context.Background(), srv, patch); err != nil {
		t.Fatal(err)
	}
	return srv
}

// A round restarted between authentication and write must not receive the old round's report.
func TestRoundRestartedMidWrite(t *testing.T) {
	var rd *round
	r := startRegistry(t, interceptFirstStatusPatch(func() { startNewRound(t, rd) }))
	rd = newServerInDiscovery(t, r, "race-new-round", "e0e0e0e0-0000-0000-0000-000000000002")
	if code, body := post(t, r.url, "Bearer "+rd.token, encode(t, sampleReport(rd.server.Spec.SystemUUID))); code != http.StatusUnauthorized {
		t.Fatalf("got %d %s", code, body)
	}
	s := get(t, rd.server.Name)
	if _, ok := s.Annotations[discovery.ReportedAnnotation]; ok || len(s.Status.Processors) != 0 {
		t.Fatalf("old round's report was written: annotations %v status %+v", s.Annotations, s.Status)
	}
}

func TestHealthz(t *testing.T) {
	r := startRegistry(t, nil)
	resp, err := http.Get(r.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %d", resp.StatusCode)
	}
}

func TestNewNeedsNamespace(t *testing.T) {
	if _, err := New(env.Client, Options{}); err == nil {
		t.Fatal("want an error without a discovery namespace")
	}
}

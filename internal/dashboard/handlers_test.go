package dashboard

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/telemetry/latest"
	"github.com/metalhub/metalhub/internal/testenv"
)

func getJSON(t testing.TB, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
	}
	return resp.StatusCode
}

func summaries(snap Snapshot) map[string]Summary {
	out := map[string]Summary{}
	for _, raw := range snap.Items[collServers] {
		var s Summary
		_ = json.Unmarshal(raw, &s)
		out[s.Name] = s
	}
	return out
}

// The snapshot, the stream and the details follow the cluster: a BMC's health reaches its
// servers' tiles, a change comes as a batch, a deletion as a key; details carry the server's
// events and its BMC's recorded actions.
func TestSnapshotStreamDetails(t *testing.T) {
	recorder := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/emulator/records" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, `[
			{"seq":1,"bmc":5,"address":"https://127.0.0.1:18005","systemId":"1","action":"Reset","resetType":"On"},
			{"seq":2,"bmc":6,"address":"https://127.0.0.1:18006","systemId":"1","action":"Reset","resetType":"ForceOff"},
			{"seq":3,"bmc":5,"address":"https://127.0.0.1:18005","systemId":"1","action":"BootOverride","boot":{"target":"Pxe"}}]`)
	}))
	defer recorder.Close()
	s := start(t, Options{RecorderURL: recorder.URL})

	bmc := &metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: "h-b1"}, Spec: metalv1alpha1.BMCSpec{
		Access:       &metalv1alpha1.InlineEndpoint{IP: "127.0.0.1", MACAddress: "aa:bb:cc:dd:ee:01"},
		BMCSecretRef: corev1.LocalObjectReference{Name: "h-secret"},
		Protocol:     metalv1alpha1.Protocol{Name: "Redfish", Port: 18005}}}
	srv := newServer("h-s1", map[string]string{LabelLocation: "DC9", LabelRack: "2-4", LabelShelf: "3", LabelHeight: "2"})
	srv.Spec.BMCRef = &corev1.LocalObjectReference{Name: "h-b1"}
	create(t, bmc, srv)
	bmc.Status.State = metalv1alpha1.BMCStateEnabled
	bmc.Status.Conditions = []metav1.Condition{{Type: metalv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(ctx(), bmc); err != nil {
		t.Fatal(err)
	}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "h-s1.1"},
		InvolvedObject: corev1.ObjectReference{Kind: "Server", APIVersion: "metal.ironcore.dev/v1alpha1", Name: "h-s1"},
		Type:           corev1.EventTypeNormal, Reason: "Discovered", Message: "inventory read", LastTimestamp: metav1.Now(), Count: 1,
		Source: corev1.EventSource{Component: "test"}}
	create(t, ev)

	testenv.Eventually(t, 10*time.Second, "snapshot shows h-s1 with a healthy BMC", func() (bool, string) {
		var snap Snapshot
		getJSON(t, s.URL()+"api/snapshot", &snap)
		sum := summaries(snap)["h-s1"]
		return sum.BMCHealth == "ok" && snap.Access[kindServers] == "ok", fmt.Sprintf("%+v access %v", sum, snap.Access)
	})
	var snap Snapshot
	getJSON(t, s.URL()+"api/snapshot", &snap)
	if got := summaries(snap)["h-s1"].Placement; got != (Placement{Placed: true, Location: "DC9", Row: "2", Rack: "2-4", Shelf: 3, Height: 2}) {
		t.Errorf("placement %+v", got)
	}
	if snap.Actions || snap.PowerVerbs != nil {
		t.Errorf("read-only snapshot offers actions: %v %v", snap.Actions, snap.PowerVerbs)
	}

	evs := stream(t, s)
	first := next(t, evs, 5*time.Second)
	if first.name != "snapshot" || !strings.Contains(first.data, `"h-s1"`) {
		t.Fatalf("first stream event %s: %.200s", first.name, first.data)
	}
	srv.Status.PowerState = metalv1alpha1.PowerStateOn
	srv.Status.State = metalv1alpha1.ServerStateAvailable
	if err := env.Client.Status().Update(ctx(), srv); err != nil {
		t.Fatal(err)
	}
	waitBatch(t, evs, func(b Batch) bool {
		d := b.Changes[collServers]
		if d == nil {
			return false
		}
		for _, raw := range d.Upsert {
			var sum Summary
			_ = json.Unmarshal(raw, &sum)
			if sum.Name == "h-s1" && sum.Power == "On" && sum.State == "Available" {
				return true
			}
		}
		return false
	})

	// Details: the whole server, its event, its BMC's records only, newest first.
	var d struct {
		Server       metalv1alpha1.Server `json:"server"`
		Events       []EventItem          `json:"events"`
		EventsAccess string               `json:"eventsAccess"`
		Records      []map[string]any     `json:"records"`
		Summary      Summary              `json:"summary"`
	}
	testenv.Eventually(t, 10*time.Second, "details with the event", func() (bool, string) {
		code := getJSON(t, s.URL()+"api/servers/h-s1", &d)
		return code == 200 && len(d.Events) == 1, fmt.Sprintf("%d %+v", code, d.Events)
	})
	if d.Server.Spec.SystemUUID != "uuid-h-s1" || d.Events[0].Reason != "Discovered" || d.EventsAccess != "ok" || d.Summary.Name != "h-s1" {
		t.Errorf("details: %+v", d)
	}
	if len(d.Records) != 2 || d.Records[0]["seq"] != float64(3) || d.Records[1]["seq"] != float64(1) {
		t.Errorf("records %v, want seq 3 then 1 (BMC 127.0.0.1:18005 only)", d.Records)
	}
	if code := getJSON(t, s.URL()+"api/servers/nope", nil); code != http.StatusNotFound {
		t.Errorf("unknown server: %d", code)
	}

	if err := env.Client.Delete(ctx(), srv); err != nil {
		t.Fatal(err)
	}
	waitBatch(t, evs, func(b Batch) bool {
		return b.Changes[collServers] != nil && fmt.Sprint(b.Changes[collServers].Delete) == "[h-s1]"
	})
}

// fakeTelemetry is a collector's readings, set by the test.
type fakeTelemetry struct {
	mu       sync.Mutex
	readings map[string]latest.Reading
}

func (f *fakeTelemetry) set(server string, r latest.Reading) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.readings == nil {
		f.readings = map[string]latest.Reading{}
	}
	f.readings[server] = r
}

func (f *fakeTelemetry) Latest(server string) (latest.Reading, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.readings[server]
	return r, ok
}

func watts(v float64) *float64 { return &v }

// A tile carries its server's latest telemetry reading (whole watts and degrees, the failed
// supplies and fans) and takes the next one without any watch event; a server without a
// reading, or a dashboard without telemetry, shows none.
func TestTileTelemetry(t *testing.T) {
	tel := &fakeTelemetry{}
	at := time.Unix(1700000000, 0)
	tel.set("tm-s1", latest.Reading{At: at, PowerWatts: watts(312.4), HottestCelsius: watts(61.6), HottestSensor: "CPU1 Temp",
		FailedPSUs: []string{"PSU2"}, FailedFans: []string{"Fan3"}})
	create(t, newServer("tm-s1", nil), newServer("tm-s2", nil))
	s := start(t, Options{Telemetry: tel, TelemetryRefresh: 50 * time.Millisecond})
	plain := start(t, Options{})

	want := TileTelemetry{At: at.Unix(), PowerWatts: watts(312), HottestCelsius: watts(62), HottestSensor: "CPU1 Temp",
		FailedPSUs: []string{"PSU2"}, FailedFans: []string{"Fan3"}}
	testenv.Eventually(t, 10*time.Second, "tm-s1's tile with its reading", func() (bool, string) {
		var snap Snapshot
		getJSON(t, s.URL()+"api/snapshot", &snap)
		got := summaries(snap)["tm-s1"].Telemetry
		return got != nil && reflect.DeepEqual(*got, want), fmt.Sprintf("%+v", got)
	})
	var snap Snapshot
	getJSON(t, s.URL()+"api/snapshot", &snap)
	if got, ok := summaries(snap)["tm-s2"]; !ok || got.Telemetry != nil {
		t.Errorf("tm-s2 (no reading): %+v, shown %t", got.Telemetry, ok)
	}

	// The next round: the power moved, the supply and the fan were replaced.
	evs := stream(t, s)
	if first := next(t, evs, 5*time.Second); first.name != "snapshot" {
		t.Fatalf("first stream event %s", first.name)
	}
	tel.set("tm-s1", latest.Reading{At: at.Add(time.Minute), PowerWatts: watts(401), HottestCelsius: watts(58), HottestSensor: "CPU2 Temp"})
	waitBatch(t, evs, func(b Batch) bool {
		d := b.Changes[collServers]
		if d == nil {
			return false
		}
		for _, raw := range d.Upsert {
			var sum Summary
			_ = json.Unmarshal(raw, &sum)
			if tm := sum.Telemetry; sum.Name == "tm-s1" && tm != nil && *tm.PowerWatts == 401 {
				if tm.FailedPSUs != nil || tm.FailedFans != nil || *tm.HottestCelsius != 58 {
					t.Errorf("after the repair: %+v", tm)
				}
				return true
			}
		}
		return false
	})

	testenv.Eventually(t, 10*time.Second, "the plain dashboard shows tm-s1", func() (bool, string) {
		var snap Snapshot
		getJSON(t, plain.URL()+"api/snapshot", &snap)
		_, ok := summaries(snap)["tm-s1"]
		return ok, ""
	})
	getJSON(t, plain.URL()+"api/snapshot", &snap)
	if got := summaries(snap)["tm-s1"].Telemetry; got != nil {
		t.Errorf("a dashboard without telemetry shows %+v", got)
	}
}

func waitBatch(t testing.TB, evs <-chan sseEvent, match func(Batch) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		ev := next(t, evs, time.Until(deadline))
		if ev.name != "batch" {
			t.Fatalf("unexpected %s event", ev.name)
		}
		if match(decodeBatch(t, []byte(ev.data))) {
			return
		}
	}
	t.Fatal("no matching batch within 5s")
}

func post(t testing.TB, url string, hdr map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, nil)
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct{ Error, Message string }
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Error + body.Message
}

func TestActionsRefusedWhenReadOnly(t *testing.T) {
	s := start(t, Options{})
	create(t, newServer("ro-s1", nil))
	for _, path := range []string{"cordon", "uncordon", "park", "unpark", "power/on", "power/restart"} {
		code, msg := post(t, s.URL()+"api/servers/ro-s1/"+path, map[string]string{ActionHeader: "1"})
		if code != http.StatusForbidden || !strings.Contains(msg, "read-only") {
			t.Errorf("%s: %d %q, want 403 read-only", path, code, msg)
		}
	}
	got := &metalv1alpha1.Server{}
	_ = env.Client.Get(ctx(), client.ObjectKey{Name: "ro-s1"}, got)
	if got.Spec.Unclaimable || len(got.Annotations) > 0 {
		t.Errorf("a read-only dashboard wrote: %+v %v", got.Spec, got.Annotations)
	}
}

// Writes need the header and, when the browser says where the request comes from, the
// page's own origin and host.
func TestActionsGuardCrossSite(t *testing.T) {
	s := start(t, Options{AllowActions: true})
	create(t, newServer("ac-s1", nil))
	origin := strings.TrimSuffix(s.URL(), "/")
	host := strings.TrimPrefix(origin, "http://")
	url := s.URL() + "api/servers/ac-s1/cordon"
	for name, hdr := range map[string]map[string]string{
		"no header":        {},
		"header not 1":     {ActionHeader: "yes"},
		"foreign origin":   {ActionHeader: "1", "Origin": "http://evil.example"},
		"rebinding host":   {ActionHeader: "1", "Origin": "http://evil.example:" + strings.Split(host, ":")[1], "Host": "evil.example:" + strings.Split(host, ":")[1]},
		"other local port": {ActionHeader: "1", "Origin": "http://127.0.0.1:1"},
	} {
		if code, msg := post(t, url, hdr); code != http.StatusForbidden {
			t.Errorf("%s: %d %q, want 403", name, code, msg)
		}
	}
	if code, msg := post(t, url, map[string]string{ActionHeader: "1", "Origin": origin}); code != http.StatusOK {
		t.Fatalf("same-origin cordon: %d %q", code, msg)
	}
	if code, msg := post(t, url, map[string]string{ActionHeader: "1"}); code != http.StatusOK || !strings.Contains(msg, "nothing to do") {
		t.Errorf("second cordon (no Origin, as curl): %d %q", code, msg)
	}
	got := &metalv1alpha1.Server{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Name: "ac-s1"}, got); err != nil || !got.Spec.Unclaimable {
		t.Errorf("not cordoned: %v %+v", err, got.Spec)
	}
	if code, msg := post(t, s.URL()+"api/servers/ac-s1/explode", map[string]string{ActionHeader: "1"}); code != http.StatusNotFound {
		t.Errorf("unknown action: %d %q", code, msg)
	}
	if code, msg := post(t, s.URL()+"api/servers/ac-s1/power/melt", map[string]string{ActionHeader: "1"}); code != http.StatusNotFound {
		t.Errorf("unknown power verb: %d %q", code, msg)
	}
	if code, _ := post(t, s.URL()+"api/servers/missing/cordon", map[string]string{ActionHeader: "1"}); code != http.StatusNotFound {
		t.Errorf("missing server: %d", code)
	}
	// Reads are host-checked too: a rebound name must not read the fleet.
	req, _ := http.NewRequest(http.MethodGet, s.URL()+"api/snapshot", nil)
	req.Host = "evil.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("foreign Host read: %v %v", err, resp.Status)
	}
}

// A power request while another operation is pending is a 409 with fleetops' message; with
// none pending, it is written under a token.
func TestPowerPendingConflict(t *testing.T) {
	s := start(t, Options{AllowActions: true})
	busy := newServer("pw-busy", nil)
	busy.Annotations = map[string]string{metalv1alpha1.OperationAnnotation: metalv1alpha1.OperationForceOffServer}
	create(t, busy, newServer("pw-free", nil))
	code, msg := post(t, s.URL()+"api/servers/pw-busy/power/restart", map[string]string{ActionHeader: "1"})
	if code != http.StatusConflict || !strings.Contains(msg, "pending") {
		t.Errorf("power restart on a busy server: %d %q, want 409 pending", code, msg)
	}
	code, msg = post(t, s.URL()+"api/servers/pw-free/power/restart", map[string]string{ActionHeader: "1"})
	if code != http.StatusOK {
		t.Fatalf("power restart: %d %q", code, msg)
	}
	got := &metalv1alpha1.Server{}
	_ = env.Client.Get(ctx(), client.ObjectKey{Name: "pw-free"}, got)
	if got.Annotations[metalv1alpha1.OperationAnnotation] != metalv1alpha1.OperationGracefulRestartServer {
		t.Errorf("operation annotation %v", got.Annotations)
	}
	var snap Snapshot
	getJSON(t, s.URL()+"api/snapshot", &snap)
	if !snap.Actions || len(snap.PowerVerbs) == 0 {
		t.Errorf("actions snapshot: %v %v", snap.Actions, snap.PowerVerbs)
	}
}

// A user who may list servers and nothing else gets the fleet and "forbidden" for the rest,
// promptly: a forbidden kind neither hangs the page nor hides what may be read.
func TestForbiddenKindsShowNoAccess(t *testing.T) {
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "dashboard-viewer"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"metal.ironcore.dev"}, Resources: []string{"servers"}, Verbs: []string{"get", "list", "watch"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "dashboard-viewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "dashboard-viewer"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "viewer"}}}
	create(t, role, binding, newServer("fb-s1", nil))
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "viewer"}
	s := start(t, Options{}, cfg)
	began := time.Now()
	testenv.Eventually(t, 10*time.Second, "servers readable, the rest forbidden", func() (bool, string) {
		var snap Snapshot
		getJSON(t, s.URL()+"api/snapshot", &snap)
		a := snap.Access
		ok := a[kindServers] == "ok" && summaries(snap)["fb-s1"].Name == "fb-s1"
		for _, k := range []string{kindClaims, kindMaintenances, kindBMCs, kindSyncs, kindResources, kindEvents} {
			ok = ok && a[k] == "forbidden"
		}
		return ok, fmt.Sprint(a)
	})
	t.Logf("access settled in %s", time.Since(began).Round(time.Millisecond))
	var d Details
	if code := getJSON(t, s.URL()+"api/servers/fb-s1", &d); code != 200 || d.EventsAccess != "forbidden" {
		t.Errorf("details without events access: %d %q", code, d.EventsAccess)
	}
}

func TestAssets(t *testing.T) {
	s := start(t, Options{})
	for path, ct := range map[string]string{"": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"} {
		resp, err := http.Get(s.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != ct || len(body) == 0 || resp.Header.Get("Cache-Control") != "no-cache" {
			t.Errorf("/%s: %s %q %q %d bytes", path, resp.Status, resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"), len(body))
		}
		if strings.Contains(string(body), "http://") || strings.Contains(string(body), "https://") {
			t.Errorf("/%s refers to an external URL", path)
		}
		req, _ := http.NewRequest(http.MethodGet, s.URL()+path, nil)
		req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNotModified {
			t.Errorf("/%s revalidation: %v %v", path, err, resp.Status)
		}
	}
	if code := getJSON(t, s.URL()+"nope.js", nil); code != http.StatusNotFound {
		// (decoding a 404's text body fails the helper; checked by status only)
		t.Errorf("unknown asset: %d", code)
	}
}

// metalhub dashboard runs apart from the operator: with --prometheus-url its tiles take the
// collector's readings from the Prometheus that scrapes the operator (a stand-in for its query
// API here, answering the collector's series).
func TestTileTelemetryFromPrometheus(t *testing.T) {
	series := map[string]string{
		"metalhub_server_telemetry_timestamp_seconds":               `{"metric":{"server":"pm-s1"},"value":[1700000000,"1700000000"]}`,
		"metalhub_server_power_watts":                               `{"metric":{"server":"pm-s1"},"value":[1700000000,"250"]}`,
		"topk by (server) (1, metalhub_server_temperature_celsius)": `{"metric":{"server":"pm-s1","sensor":"inlet"},"value":[1700000000,"31"]}`,
		"metalhub_server_psu_healthy == 0":                          `{"metric":{"server":"pm-s1","psu":"psu1"},"value":[1700000000,"0"]}`,
		"metalhub_server_fan_healthy == 0":                          ``,
	}
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok := series[r.URL.Query().Get("query")]
		if r.URL.Path != "/api/v1/query" || !ok {
			http.Error(w, `{"status":"error","error":"unexpected query"}`, http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[%s]}}`, res)
	}))
	t.Cleanup(prom.Close)
	create(t, newServer("pm-s1", nil))
	s := start(t, Options{PrometheusURL: prom.URL, TelemetryRefresh: 50 * time.Millisecond})
	want := TileTelemetry{At: 1700000000, PowerWatts: watts(250), HottestCelsius: watts(31), HottestSensor: "inlet", FailedPSUs: []string{"psu1"}}
	testenv.Eventually(t, 10*time.Second, "pm-s1's tile with the reading from Prometheus", func() (bool, string) {
		var snap Snapshot
		getJSON(t, s.URL()+"api/snapshot", &snap)
		got := summaries(snap)["pm-s1"].Telemetry
		return got != nil && reflect.DeepEqual(*got, want), fmt.Sprintf("%+v", got)
	})
}

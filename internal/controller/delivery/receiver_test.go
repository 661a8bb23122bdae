package delivery

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/receiver"
	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
	"github.com/metalhub/metalhub/internal/infrahub/webhook"
)

// startWithReceiver runs the delivery family with the webhook receiver on loopback, its key in a
// Secret, and returns the receiver's URL and the key.
func startWithReceiver(t testing.TB, o Options) (string, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("key-%d", time.Now().UnixNano())
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: "hook-"}, StringData: map[string]string{"key": key}}
	if err := env.Client.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), sec) })
	o.Receiver.Listener = ln
	o.Receiver.Secret = types.NamespacedName{Namespace: "default", Name: sec.Name}
	startManager(t, o)
	return "http://" + ln.Addr().String() + receiver.Path, key
}

func liveValue(t testing.TB, ns, name string) string {
	t.Helper()
	var cm corev1.ConfigMap
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cm); err != nil {
		return ""
	}
	return cm.Data["value"]
}

func waitValue(t testing.TB, ns, name, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for liveValue(t, ns, name) != want {
		if time.Now().After(deadline) {
			t.Fatalf("ConfigMap %s/%s never read %q (reads %q)", ns, name, want, liveValue(t, ns, name))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Issue 45, push: with the sync polling every 10 minutes, a changed artifact Infrahub announces
// through its signed webhook is applied at once; unsigned, wrongly signed, stale and replayed
// deliveries are refused with 401; a burst of 10,000 deliveries of one change costs one pass.
func TestWebhookAppliesAChangeAtOnce(t *testing.T) {
	o := fastOptions()
	o.Receiver.Interval = 5 * time.Second
	hook, key := startWithReceiver(t, o)
	e, url := startInfrahub(t, nil, "push-sync")
	ns := namespace(t)
	art, err := e.AddArtifact("main", "push-art", "application/yaml", []byte(configMapYAML("push-cm", "", "one")))
	if err != nil {
		t.Fatal(err)
	}
	newSync(t, "push-sync", url, "push-art", ns)
	waitSync(t, "push-sync", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
	waitValue(t, ns, "push-cm", "one", 30*time.Second)
	e.AddWebhook(emu.Webhook{URL: hook, SharedKey: key, EventType: emu.EventArtifactUpdated})

	start := time.Now()
	if _, err := e.UpdateArtifact("main", art.ID, []byte(configMapYAML("push-cm", "", "two"))); err != nil {
		t.Fatal(err)
	}
	waitValue(t, ns, "push-cm", "two", 30*time.Second)
	t.Logf("changed artifact applied %v after the change (poll interval %v)", time.Since(start).Round(time.Millisecond), o.Settings.RequeueSyncAfter)
	ds, _ := e.WebhookDeliveries()
	if len(ds) != 1 || ds[0].Status != http.StatusAccepted {
		t.Fatalf("deliveries %+v", ds)
	}
	// kubectl get infrahubsyncs -o wide tells when the sync was last woken.
	if cell := tableCell(t, "infrahubsyncs", "push-sync", "Requested"); cell == nil || cell == "" {
		t.Errorf("column Requested is %v after the webhook woke the sync", cell)
	}

	// Refusals. The body names a checksum the sync does not hold: accepted, it would wake it.
	body := []byte(fmt.Sprintf(`{"data":{"node_id":%q,"artifact_definition_id":"d","target_id":"t","target_kind":"InfraDevice","checksum":"forged","checksum_previous":null,"storage_id":"s","storage_id_previous":null},"id":"ev","branch":"main","account_id":null,"occured_at":"x","event":"infrahub.artifact.updated"}`, art.ID))
	post := func(h http.Header) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, hook, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	sign := func(k string, at time.Time) http.Header {
		h := http.Header{}
		if err := webhook.SignAsInfrahub(h, []byte(k), fmt.Sprintf("msg_%d", time.Now().UnixNano()), at, body); err != nil {
			t.Fatal(err)
		}
		return h
	}
	queries := e.Counters().Queries
	for name, h := range map[string]http.Header{
		"unsigned":  {},
		"other key": sign("not-the-key", time.Now()),
		"stale":     sign(key, time.Now().Add(-time.Hour)),
	} {
		if code := post(h); code != http.StatusUnauthorized {
			t.Errorf("%s delivery answered %d, want 401", name, code)
		}
	}
	// A replay of a valid delivery, headers and body as they were (of the checksum applied, so
	// the valid one wakes nothing either).
	body = bytes.ReplaceAll(body, []byte(`"forged"`), []byte(fmt.Sprintf("%q", mustChecksum(t, e, art.ID))))
	valid := sign(key, time.Now())
	if code := post(valid); code != http.StatusAccepted {
		t.Fatalf("a valid delivery answered %d", code)
	}
	if code := post(valid); code != http.StatusUnauthorized {
		t.Fatalf("a replayed delivery answered %d, want 401", code)
	}

	// A burst: one change, then 9,999 more deliveries of its event.
	if _, err := e.UpdateArtifact("main", art.ID, []byte(configMapYAML("push-cm", "", "three"))); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Redeliver(9_999); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := e.WaitDeliveries(ctx, 1+1+9_999); err != nil {
		t.Fatal(err)
	}
	waitValue(t, ns, "push-cm", "three", 30*time.Second)
	ds, total := e.WebhookDeliveries()
	for _, d := range ds {
		if d.Status != http.StatusAccepted {
			t.Fatalf("a delivery of the burst answered %d (%s)", d.Status, d.Error)
		}
	}
	// The last deliveries wait for the interval; past it, nothing more is queried.
	s := getSync(t, "push-sync")
	woken := s.Annotations[infrahubv1alpha1.RequestedAtAnnotation]
	// Not a wait for something to happen: the check that nothing does for the interval in which
	// the burst's last deliveries are looked at.
	time.Sleep(o.Receiver.Interval + time.Second)
	if got := e.Counters().Queries - queries; got != 1 {
		t.Errorf("%d deliveries caused %d queries of Infrahub, want 1", total, got)
	}
	if getSync(t, "push-sync").Annotations[infrahubv1alpha1.RequestedAtAnnotation] != woken {
		t.Error("the sync was woken again after the burst")
	}
}

func mustChecksum(t *testing.T, e *emu.Emulator, id string) string {
	t.Helper()
	arts, err := e.Artifacts("main", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range arts {
		if a.ID == id {
			return a.Checksum
		}
	}
	t.Fatalf("no artifact %s", id)
	return ""
}

// BenchmarkWebhookToApply measures a change in Infrahub to the changed object in the cluster
// through the webhook, with a sync that polls every 10 minutes. The interval between wakes is
// cut so that each change is the first of its interval, as a change after a quiet spell is.
func BenchmarkWebhookToApply(b *testing.B) {
	o := fastOptions()
	o.Receiver.Interval = time.Millisecond
	hook, key := startWithReceiver(b, o)
	e, url := startInfrahub(b, nil, "bench-push")
	ns := namespace(b)
	art, err := e.AddArtifact("main", "bench-push-art", "application/yaml", []byte(configMapYAML("bench-cm", "", "v0")))
	if err != nil {
		b.Fatal(err)
	}
	newSync(b, "bench-push", url, "bench-push-art", ns)
	waitValue(b, ns, "bench-cm", "v0", 30*time.Second)
	e.AddWebhook(emu.Webhook{URL: hook, SharedKey: key, EventType: emu.EventArtifactUpdated})
	b.ResetTimer()
	for i := range b.N {
		v := fmt.Sprintf("v%d", i+1)
		if _, err := e.UpdateArtifact("main", art.ID, []byte(configMapYAML("bench-cm", "", v))); err != nil {
			b.Fatal(err)
		}
		waitValue(b, ns, "bench-cm", v, 30*time.Second)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/change")
}

// tableCell is what kubectl get -o wide shows in column of the cluster-scoped object name: the
// API server's own table rendering of the CRD's printer columns.
func tableCell(t *testing.T, resource, name, column string) any {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.GroupVersion = &infrahubv1alpha1.GroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(runtime.NewScheme()).WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := rc.Get().Resource(resource).Name(name).Param("includeObject", "None").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	for i, c := range table.ColumnDefinitions {
		if c.Name == column && len(table.Rows) == 1 && i < len(table.Rows[0].Cells) {
			return table.Rows[0].Cells[i]
		}
	}
	t.Fatalf("no column %s in %+v", column, table.ColumnDefinitions)
	return nil
}

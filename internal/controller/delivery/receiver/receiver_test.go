package receiver

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/infrahub/webhook"
	"github.com/metalhub/metalhub/internal/scheme"
)

const key = "the-shared-key"

// fixture: sync s1 on main holds artifact art-1 at checksum c1; sync pinned follows no branch.
func fixture(t *testing.T) client.WithWatch {
	t.Helper()
	s1 := &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: "s1", UID: "u1"},
		Spec: infrahubv1alpha1.InfrahubSyncSpec{Source: infrahubv1alpha1.Source{TargetBranch: "main", ArtefactName: "a"}}}
	pinned := &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: "pinned", UID: "u2"},
		Spec: infrahubv1alpha1.InfrahubSyncSpec{Source: infrahubv1alpha1.Source{TargetBranch: "main", TargetDate: "now-1h", ArtefactName: "a"}}}
	vr := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "art-1",
		Annotations:     map[string]string{manifests.ChecksumAnnotation: "c1"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: infrahubv1alpha1.GroupVersion.String(), Kind: "InfrahubSync", Name: "s1", UID: "u1", Controller: ptr.To(true)}}}}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "hook"}, Data: map[string][]byte{"key": []byte(key + "\n")}}
	return fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(s1, pinned, vr, sec).
		WithIndex(&infrahubv1alpha1.InfrahubSync{}, BranchIndex, branchKeys).Build()
}

func newTestReceiver(c client.WithWatch, interval time.Duration) *Receiver {
	return New(c, c, c, logr.Discard(), Options{Secret: types.NamespacedName{Namespace: "ops", Name: "hook"}, Interval: interval})
}

func artifactEvent(node, checksum string) []byte {
	return []byte(fmt.Sprintf(`{"data":{"node_id":%q,"artifact_definition_id":"def-1","target_id":"t","target_kind":"InfraDevice","checksum":%q,"checksum_previous":null,"storage_id":"s","storage_id_previous":null},"id":"e","branch":"main","account_id":null,"occured_at":"x","event":"infrahub.artifact.updated"}`, node, checksum))
}

func deliver(t *testing.T, r *Receiver, body []byte, h http.Header) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
	for k, v := range h {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, req)
	return rec.Code
}

var msgSeq int

func signed(t *testing.T, k string, at time.Time, body []byte) http.Header {
	t.Helper()
	msgSeq++
	h := http.Header{}
	if err := webhook.SignAsInfrahub(h, []byte(k), fmt.Sprintf("msg_%032x", msgSeq), at, body); err != nil {
		t.Fatal(err)
	}
	return h
}

func requestedAt(t *testing.T, c client.Client, name string) string {
	t.Helper()
	var s infrahubv1alpha1.InfrahubSync
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, &s); err != nil {
		t.Fatal(err)
	}
	return s.Annotations[infrahubv1alpha1.RequestedAtAnnotation]
}

func TestRefusals(t *testing.T) {
	c := fixture(t)
	r := newTestReceiver(c, time.Hour) // no worker runs: nothing is woken here
	body := artifactEvent("art-1", "c2")
	now := time.Now()
	good := signed(t, key, now, body)
	cases := []struct {
		name   string
		body   []byte
		h      http.Header
		code   int
		result string
	}{
		{"unsigned", body, http.Header{}, http.StatusUnauthorized, "unsigned"},
		{"other key", body, signed(t, "not-the-key", now, body), http.StatusUnauthorized, "bad_signature"},
		{"body edited", artifactEvent("art-1", "c3"), good, http.StatusUnauthorized, "bad_signature"},
		{"stale", body, signed(t, key, now.Add(-10*time.Minute), body), http.StatusUnauthorized, "stale"},
		{"good", body, good, http.StatusAccepted, "accepted"},
		{"replayed", body, good, http.StatusUnauthorized, "replayed"},
		{"not an artifact event", []byte(`{"data":{},"id":"e","branch":"main","event":"infrahub.node.created"}`), nil, http.StatusAccepted, "ignored"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.h
			if h == nil {
				h = signed(t, key, now, tc.body)
			}
			before := testutil.ToFloat64(deliveries.WithLabelValues(tc.result))
			if code := deliver(t, r, tc.body, h); code != tc.code {
				t.Fatalf("answered %d, want %d", code, tc.code)
			}
			if d := testutil.ToFloat64(deliveries.WithLabelValues(tc.result)) - before; d != 1 {
				t.Fatalf("%s deliveries counted %v, want 1", tc.result, d)
			}
		})
	}
	if got := requestedAt(t, c, "s1"); got != "" {
		t.Fatalf("a sync was woken: %q", got)
	}
}

func TestNoKeyRefuses(t *testing.T) {
	c := fixture(t)
	r := New(c, c, c, logr.Discard(), Options{Secret: types.NamespacedName{Namespace: "ops", Name: "absent"}})
	body := artifactEvent("art-1", "c2")
	if code := deliver(t, r, body, signed(t, key, time.Now(), body)); code != http.StatusServiceUnavailable {
		t.Fatalf("answered %d", code)
	}
}

// step runs the waker's work the queue holds ready, as its workers would, and reports how
// many syncs it handled.
func step(ctx context.Context, r *Receiver) int {
	n := 0
	for r.wakes.queue.Len() > 0 {
		name, _ := r.wakes.queue.Get()
		r.wakes.process(ctx, name)
		r.wakes.queue.Done(name)
		n++
	}
	return n
}

// A burst of 10,000 deliveries of one change wakes the sync once: the first wakes it, and by the
// time the rest are looked at the woken pass delivered the checksum they name. An event naming
// the checksum already delivered wakes nothing; a sync pinned to a time never wakes.
func TestBurstWakesOnce(t *testing.T) {
	c := fixture(t)
	r := newTestReceiver(c, time.Nanosecond) // the interval is TestWakesSpaced's
	ctx := context.Background()
	wakes0, skipped0 := testutil.ToFloat64(wakes), testutil.ToFloat64(coalesced)
	send := func(body []byte) {
		t.Helper()
		if code := deliver(t, r, body, signed(t, key, time.Now(), body)); code != http.StatusAccepted {
			t.Fatalf("answered %d", code)
		}
	}

	send(artifactEvent("art-1", "c1")) // what s1 already delivered
	if step(ctx, r) != 1 || requestedAt(t, c, "s1") != "" || testutil.ToFloat64(coalesced) != skipped0+1 {
		t.Fatal("an event of the checksum delivered woke the sync")
	}

	send(artifactEvent("art-1", "c2"))
	step(ctx, r)
	first := requestedAt(t, c, "s1")
	if first == "" {
		t.Fatal("the first delivery of a new checksum did not wake the sync")
	}
	// The woken pass delivers c2 while the burst goes on.
	var vr infrahubv1alpha1.VidraResource
	if err := c.Get(ctx, client.ObjectKey{Name: "art-1"}, &vr); err != nil {
		t.Fatal(err)
	}
	vr.Annotations[manifests.ChecksumAnnotation] = "c2"
	if err := c.Update(ctx, &vr); err != nil {
		t.Fatal(err)
	}
	for range 9_999 {
		send(artifactEvent("art-1", "c2"))
	}
	if n := step(ctx, r); n != 1 {
		t.Fatalf("the burst queued %d looks at the sync, want 1", n)
	}
	if got := testutil.ToFloat64(wakes) - wakes0; got != 1 || requestedAt(t, c, "s1") != first {
		t.Fatalf("10,000 deliveries woke the sync %v times, want 1", got)
	}
	if requestedAt(t, c, "pinned") != "" {
		t.Fatal("a sync pinned to a time was woken")
	}

	// A new artifact of a definition learnt from art-1's events wakes s1.
	send(bytes.ReplaceAll(artifactEvent("art-2", "n1"), []byte("artifact.updated"), []byte("artifact.created")))
	step(ctx, r)
	if requestedAt(t, c, "s1") == first {
		t.Fatal("a new artifact of the sync's definition did not wake it")
	}
}

// Within the interval a second change waits: it is not looked at before the interval ends.
func TestWakesSpaced(t *testing.T) {
	c := fixture(t)
	r := newTestReceiver(c, time.Hour)
	ctx := context.Background()
	for i, sum := range []string{"c2", "c3"} {
		body := artifactEvent("art-1", sum)
		if code := deliver(t, r, body, signed(t, key, time.Now(), body)); code != http.StatusAccepted {
			t.Fatalf("answered %d", code)
		}
		if n := step(ctx, r); n != 1-i {
			t.Fatalf("delivery %d: %d syncs looked at, want %d", i, n, 1-i)
		}
	}
	r.wakes.mu.Lock()
	defer r.wakes.mu.Unlock()
	if p := r.wakes.syncs["s1"].pending; p["art-1"].checksum != "c3" {
		t.Fatalf("the waiting change is not kept: %+v", p)
	}
}

func TestSeen(t *testing.T) {
	s := newSeen(time.Minute)
	t0 := time.Unix(1_800_000_000, 0)
	if !s.first("a", t0, t0) || s.first("a", t0, t0.Add(30*time.Second)) {
		t.Fatal("a replay within the tolerance passed")
	}
	if !s.first("b", t0, t0) {
		t.Fatal("another id refused")
	}
	// Past its timestamp's tolerance the id is forgotten: the timestamp check refuses it then.
	if !s.first("a", t0, t0.Add(61*time.Second)) {
		t.Fatal("an expired id still remembered")
	}
}

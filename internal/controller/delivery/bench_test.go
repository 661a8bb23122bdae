package delivery

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

// BenchmarkSync500Artifacts delivers 500 artifacts of 3 objects each (ConfigMap, headless
// Service, Deployment) from the emulator into envtest and reports:
//   - s/first-sync: from creating the InfrahubSync to every VidraResource Succeeded (target ≤ 60 s);
//   - queries, downloads and API writes of an unchanged pass: a forced sync pass plus a round of
//     periodic VidraResource passes (target 1 query, 0 downloads, 0 writes but the sync's own
//     status, whose lastSyncTime moves on every successful pass).
//
// The Deployments have 0 replicas: the control plane runs kube-controller-manager but no kubelet,
// so pods never start, and a Deployment waiting for them stays InProgress (its health is
// reported, and its message changes, while the measurement runs).
//
// Run: go test -run '^$' -bench Sync500 -benchtime 1x ./internal/controller/delivery/
func BenchmarkSync500Artifacts(b *testing.B) {
	const vrInterval = 5 * time.Second
	n := 500
	if v, err := strconv.Atoi(os.Getenv("DELIVERY_BENCH_ARTIFACTS")); err == nil && v > 0 {
		n = v // smaller runs while profiling
	}
	o := fastOptions()
	o.Settings.RequeueResourcesAfter = vrInterval
	h := startManager(b, o)
	syncs := make([]string, 100) // the names the loop below gives its syncs
	for i := range syncs {
		syncs[i] = fmt.Sprintf("bench-%d", i)
	}
	e, url := startInfrahub(b, nil, syncs...)
	ns := namespace(b)
	for i := range n {
		name := fmt.Sprintf("app-%03d", i)
		// Headless Services: envtest's service range holds only 254 cluster IPs.
		manifest := docs(configMapYAML(name, "", "1"), serviceYAML(name)+"  clusterIP: None\n", deploymentYAML(name, 0))
		if _, err := e.AddArtifact("", "bench", "", []byte(manifest)); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		syncName := fmt.Sprintf("bench-%d", i)
		start := time.Now()
		newSync(b, syncName, url, "bench", ns)
		b.Cleanup(func() { deleteAllResources(b, syncName) })
		eventually(b, 5*time.Minute, func() error {
			var list infrahubv1alpha1.VidraResourceList
			if err := env.Client.List(ctx, &list, client.MatchingLabels{SyncLabel: syncName}); err != nil {
				return err
			}
			ok := 0
			for _, vr := range list.Items {
				if vr.Status.DeployState == infrahubv1alpha1.StateSucceeded {
					ok++
				}
			}
			if ok != n {
				return fmt.Errorf("%d of %d VidraResources succeeded", ok, n)
			}
			return nil
		})
		firstSync := time.Since(start)
		eventually(b, 2*time.Minute, func() error {
			var list infrahubv1alpha1.VidraResourceList
			if err := env.Client.List(ctx, &list, client.MatchingLabels{SyncLabel: syncName}); err != nil {
				return err
			}
			for _, vr := range list.Items {
				if vr.Status.Health != "Current" {
					return fmt.Errorf("%s: health %q", vr.Name, vr.Status.Health)
				}
			}
			return nil
		})
		waitSync(b, syncName, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, time.Minute)
		for _, l := range []client.ObjectList{&corev1.ConfigMapList{}, &corev1.ServiceList{}, &appsv1.DeploymentList{}} {
			if err := env.Client.List(ctx, l, client.InNamespace(ns), client.MatchingLabels{ManagedByLabel: ManagedByValue}); err != nil {
				b.Fatal(err)
			}
		}
		counts := e.Counters()
		b.Logf("first sync: %d artifacts, %d objects applied in %s (%d queries, %d downloads, %d API writes)",
			n, 3*n, firstSync.Round(time.Millisecond), counts.Queries, counts.Downloads, h.writes.n.Load())

		// The unchanged pass: a forced sync (requested-at, written by the test's own client) and
		// at least one periodic pass of every VidraResource.
		time.Sleep(2 * time.Second)
		e.ResetRequests()
		h.writes.reset()
		requestSync(b, getSync(b, syncName))
		eventually(b, 10*time.Second, func() error {
			if e.Counters().Queries == 0 {
				return fmt.Errorf("no sync pass")
			}
			return nil
		})
		time.Sleep(vrInterval + vrInterval/10 + time.Second)
		c := e.Counters()
		all := h.writes.n.Load()
		own := int64(h.writes.count("PUT", "/infrahubsyncs/"+syncName+"/status"))
		writes := all - own
		b.Logf("unchanged pass: %d queries, %d downloads, %d logins, %d API writes (%d of them the sync's status) %s", c.Queries, c.Downloads, c.Logins, all, own, h.writes)

		b.ReportMetric(firstSync.Seconds(), "s/first-sync")
		b.ReportMetric(float64(c.Queries), "queries/unchanged-pass")
		b.ReportMetric(float64(c.Downloads), "downloads/unchanged-pass")
		b.ReportMetric(float64(writes), "writes/unchanged-pass")
		b.ReportMetric(float64(own), "sync-status-writes/unchanged-pass")
		if c.Downloads != 0 || writes != 0 || own > 1 {
			b.Errorf("unchanged pass downloaded %d artifacts and wrote %d times besides the sync's status (written %d times)", c.Downloads, writes, own)
		}
	}
}

// deleteAllResources removes a sync's VidraResources at once and waits for their finalizers.
func deleteAllResources(t testing.TB, syncName string) {
	ctx := context.Background()
	_ = env.Client.Delete(ctx, &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: syncName}})
	_ = env.Client.DeleteAllOf(ctx, &infrahubv1alpha1.VidraResource{}, client.MatchingLabels{SyncLabel: syncName})
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var list infrahubv1alpha1.VidraResourceList
		if err := env.Client.List(ctx, &list, client.MatchingLabels{SyncLabel: syncName}); err != nil || len(list.Items) == 0 {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("VidraResources of %s not gone after 2 minutes", syncName)
}

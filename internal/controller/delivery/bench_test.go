package delivery

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/policy"
	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
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
			if err := env.Client.List(ctx, &list, client.MatchingLabels{manifests.SyncLabel: syncName}); err != nil {
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
			if err := env.Client.List(ctx, &list, client.MatchingLabels{manifests.SyncLabel: syncName}); err != nil {
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
			if err := env.Client.List(ctx, l, client.InNamespace(ns), client.MatchingLabels{manifests.ManagedByLabel: manifests.ManagedByValue}); err != nil {
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
	_ = env.Client.DeleteAllOf(ctx, &infrahubv1alpha1.VidraResource{}, client.MatchingLabels{manifests.SyncLabel: syncName})
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var list infrahubv1alpha1.VidraResourceList
		if err := env.Client.List(ctx, &list, client.MatchingLabels{manifests.SyncLabel: syncName}); err != nil || len(list.Items) == 0 {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("VidraResources of %s not gone after 2 minutes", syncName)
}

// BenchmarkTenantsBesideAHostileSync measures what one tenant's sync costs the others: half of
// DELIVERY_BENCH_SYNCS (default 500) syncs of 3 artifacts each are delivered alone, then a
// hostile sync is created and the other half is delivered beside it. It reports the time to
// deliver each half (their ratio: the others' latency beside the hostile sync), the process RSS
// and live heap after each phase, and what the hostile sync did. The hostile syncs:
//   - refused: an answer naming 10^4 artifacts, past --delivery-max-artifacts-per-sync;
//   - at-limits: as much as the default limits let one sync keep: 1000 artifacts of 32 KiB;
//   - slow-host: its own Infrahub, whose every query hangs until the client's timeout;
//   - hand-made: no sync but DELIVERY_BENCH_HOSTILE_VRS (default 200) VidraResources written by
//     hand, each with a manifest of 1 MiB (the CRD's bound; a small ConfigMap and a comment);
//   - many-kinds: no sync but 8 VidraResources (as many as the resource workers) whose manifest
//     names 25 kinds the identity they apply as, on their cluster, may not list (the local API
//     server reached through a kubeconfig that impersonates a user without rights).
//
// Run: go test -run '^$' -bench TenantsBesideAHostileSync -benchtime 1x ./internal/controller/delivery/
func BenchmarkTenantsBesideAHostileSync(b *testing.B) {
	for _, kind := range []string{"refused", "at-limits", "slow-host", "hand-made", "many-kinds"} {
		b.Run("hostile="+kind, func(b *testing.B) { benchTenantsBeside(b, kind) })
	}
}

func benchTenantsBeside(b *testing.B, kind string) {
	n := 500
	if v, err := strconv.Atoi(os.Getenv("DELIVERY_BENCH_SYNCS")); err == nil && v > 1 {
		n = v
	}
	names := make([]string, 0, n+1)
	for i := range n {
		names = append(names, fmt.Sprintf("tenant-%03d", i))
	}
	o := fastOptions()
	o.InfrahubTimeout = 10 * time.Second // how long each of the slow host's queries holds a worker
	h := startManager(b, o)
	bySync := kind != "hand-made" && kind != "many-kinds"
	served := names
	if kind != "slow-host" && bySync {
		served = append(slices.Clone(names), "hostile") // the hostile sync shares the tenants' Infrahub
	}
	e, url := startInfrahub(b, nil, served...)
	hostileURL, hostileState, hostileArtifacts := url, infrahubv1alpha1.StateFailed, 0
	switch kind {
	case "refused":
		hostileArtifacts = 10_000
	case "at-limits":
		hostileArtifacts, hostileState = policy.DefaultLimits().MaxArtifacts, infrahubv1alpha1.StateSucceeded
	}
	if kind == "slow-host" {
		slow, slowURL := startInfrahub(b, nil, "hostile")
		slow.SetFault(emu.ClassQuery, emu.Fault{Kind: emu.FaultHang})
		hostileURL = slowURL
	}
	ns := namespace(b)
	for i := range n {
		for j := range 3 {
			if _, err := e.AddArtifact("", names[i], "", []byte(configMapYAML(fmt.Sprintf("%s-%d", names[i], j), "", "1"))); err != nil {
				b.Fatal(err)
			}
		}
	}
	filler := strings.Repeat("x", 32<<10-512) // 32 KiB a manifest, with the ConfigMap around it
	for j := range hostileArtifacts {
		value := "1"
		if kind == "at-limits" {
			value = filler
		}
		if _, err := e.AddArtifact("", "hostile", "", []byte(configMapYAML(fmt.Sprintf("hostile-%d", j), "", value))); err != nil {
			b.Fatal(err)
		}
	}
	startHostile, waitHostile := func() {
		newSync(b, "hostile", hostileURL, "hostile", ns)
	}, func() string {
		hostile := waitSync(b, "hostile", hostileState, "", 10*time.Minute)
		return fmt.Sprintf("%s %q", hostile.Status.SyncState, hostile.Status.LastError)
	}
	if !bySync {
		// Waited for through the manager's cache: a list from the API server would hold the
		// 200 MiB of manifests in this process, which the figures are of.
		startHostile, waitHostile = handMadeHostile(b, kind, ns, h.mgr.GetClient())
	}
	ctx := context.Background()
	deliver := func(from, to int) time.Duration {
		start := time.Now()
		for i := from; i < to; i++ {
			newSync(b, names[i], url, names[i], ns)
		}
		eventually(b, 10*time.Minute, func() error {
			var list infrahubv1alpha1.InfrahubSyncList
			if err := env.Client.List(ctx, &list); err != nil {
				return err
			}
			done := 0
			for _, s := range list.Items {
				if strings.HasPrefix(s.Name, "tenant-") && s.Status.SyncState == infrahubv1alpha1.StateSucceeded {
					done++
				}
			}
			if done < to {
				return fmt.Errorf("%d of %d tenant syncs succeeded", done, to)
			}
			return nil
		})
		return time.Since(start)
	}
	for i := 0; i < b.N; i++ {
		alone := deliver(0, n/2)
		rssAlone, heapAlone := memoryNow()
		peak := sampleRSS()
		startHostile()
		b.Cleanup(func() { deleteAllResources(b, "hostile") })
		beside := deliver(n/2, n)
		hostile := waitHostile()
		rssPeak := peak()
		rssBeside, heapBeside := memoryNow()
		var vrs infrahubv1alpha1.VidraResourceList
		if err := env.Client.List(ctx, &vrs, client.MatchingLabels{manifests.SyncLabel: "hostile"}); err != nil {
			b.Fatal(err)
		}
		b.Logf("%d tenant syncs x 3 artifacts: first half alone in %s, second half beside the %s sync in %s (x%.2f); "+
			"RSS %d MiB -> %d MiB (at most %d MiB beside the hostile one), live heap %d MiB -> %d MiB; the hostile sync: %s, %d VidraResources; %d API writes",
			n, alone.Round(time.Millisecond), kind, beside.Round(time.Millisecond), beside.Seconds()/alone.Seconds(),
			rssAlone>>20, rssBeside>>20, rssPeak>>20, heapAlone>>20, heapBeside>>20, hostile, len(vrs.Items), h.writes.n.Load())
		b.ReportMetric(alone.Seconds(), "s/half-alone")
		b.ReportMetric(beside.Seconds(), "s/half-beside-hostile")
		b.ReportMetric(beside.Seconds()/alone.Seconds(), "latency-ratio")
		b.ReportMetric(float64(rssBeside>>20), "MiB-rss")
		b.ReportMetric(float64(rssPeak>>20), "MiB-rss-peak")
		b.ReportMetric(float64(heapBeside>>20), "MiB-heap")
		b.ReportMetric(float64(len(vrs.Items)), "hostile-vidraresources")
	}
}

// sampleRSS samples the process's resident set every 50 ms until the returned function is
// called, which returns the largest seen.
func sampleRSS() (stop func() uint64) {
	done, out := make(chan struct{}), make(chan uint64, 1)
	go func() {
		var peak uint64
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, rssNow())
			select {
			case <-done:
				out <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 { close(done); return <-out }
}

// rssNow is the process's resident set, from /proc.
func rssNow() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// memoryNow is the process's resident set (from /proc) and its live heap after a collection.
func memoryNow() (rss, heap uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return rssNow(), ms.HeapAlloc
}

// BenchmarkCachedVidraResources reports the live heap a cache of DELIVERY_BENCH_VRS (default
// 100) VidraResources of 512 KiB holds, with the whole object cached (as before) and with
// CacheByObject's transform (the manager's): MiB-heap/whole and MiB-heap/stripped.
//
// Run: go test -run '^$' -bench CachedVidraResources -benchtime 1x ./internal/controller/delivery/
func BenchmarkCachedVidraResources(b *testing.B) {
	n := 100
	if v, err := strconv.Atoi(os.Getenv("DELIVERY_BENCH_VRS")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	manifest := "# " + strings.Repeat("x", 512<<10) + "\n"
	for i := range n {
		vr := &infrahubv1alpha1.VidraResource{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cached-%03d", i), Labels: map[string]string{"bench": "cached"}},
			Spec:       infrahubv1alpha1.VidraResourceSpec{Manifest: manifest},
		}
		if err := env.Client.Create(ctx, vr); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		_ = env.Client.DeleteAllOf(ctx, &infrahubv1alpha1.VidraResource{}, client.MatchingLabels{"bench": "cached"})
	})
	heapOf := func(by map[client.Object]cache.ByObject) uint64 {
		_, before := memoryNow()
		c, err := cache.New(env.Config, cache.Options{Scheme: env.Client.Scheme(), ByObject: by})
		if err != nil {
			b.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if _, err := c.GetInformer(cctx, &infrahubv1alpha1.VidraResource{}); err != nil {
			b.Fatal(err)
		}
		go func() { _ = c.Start(cctx) }()
		if !c.WaitForCacheSync(cctx) {
			b.Fatal("cache not synced")
		}
		if got, err := cachedCount(cctx, c); err != nil || got != n {
			b.Fatalf("cached %d of %d VidraResources: %v", got, n, err)
		}
		_, after := memoryNow()
		runtime.KeepAlive(c)
		return (after - min(after, before)) >> 20
	}
	for i := 0; i < b.N; i++ {
		whole := heapOf(nil)
		stripped := heapOf(manifests.CacheByObject())
		b.Logf("%d VidraResources of 512 KiB: the cache holds %d MiB whole, %d MiB without manifests", n, whole, stripped)
		b.ReportMetric(float64(whole), "MiB-heap/whole")
		b.ReportMetric(float64(stripped), "MiB-heap/stripped")
	}
}

// cachedCount counts the benchmark's VidraResources in c (the list, deep copies, is dropped
// before the heap is measured).
func cachedCount(ctx context.Context, c cache.Cache) (int, error) {
	var list infrahubv1alpha1.VidraResourceList
	err := c.List(ctx, &list, client.MatchingLabels{"bench": "cached"})
	return len(list.Items), err
}

// handMadeHostile prepares the hostile VidraResources written by hand (kind hand-made or
// many-kinds) in ns: start creates them, wait waits until each has been through a pass and
// says how they ended. They carry the hostile sync's label only for deleteAllResources.
func handMadeHostile(b *testing.B, kind, ns string, reader client.Reader) (start func(), wait func() string) {
	ctx := context.Background()
	var server string
	count, manifest, want := 200, "", infrahubv1alpha1.StateSucceeded
	if v, err := strconv.Atoi(os.Getenv("DELIVERY_BENCH_HOSTILE_VRS")); err == nil && v > 0 {
		count = v
	}
	switch kind {
	case "hand-made":
		cm := configMapYAML("hand-made-%d", "", "1")
		manifest = "# " + strings.Repeat("x", infrahubv1alpha1.MaxManifestLength-len(cm)-8) + "\n" + cm
	case "many-kinds":
		count, want = 8, infrahubv1alpha1.StateFailed
		var parts []string
		for i, gvk := range unlistableKinds {
			parts = append(parts, fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata:\n  name: many-kinds-%d\n", gvk.GroupVersion().String(), gvk.Kind, i))
		}
		manifest = docs(parts...)
		// This API server, reached as a remote cluster by a user who may list nothing.
		data, url := kubeconfigOf(b, env.Kubeconfig)
		kc, err := clientcmd.Load(data)
		if err != nil {
			b.Fatal(err)
		}
		for _, a := range kc.AuthInfos {
			a.Impersonate = "may-list-nothing"
		}
		if data, err = clientcmd.Write(*kc); err != nil {
			b.Fatal(err)
		}
		server = url
		var names []string
		for i := range count {
			names = append(names, fmt.Sprintf("many-kinds-%d", i))
		}
		createAnnotatedSecret(b, "default", infrahubv1alpha1.ClusterKubeconfigLabel, labelFor(b, server), kubeconfigFor(names...), map[string]string{"kubeconfig": string(data)})
	}
	start = func() {
		for i := range count {
			m := manifest
			if kind == "hand-made" {
				m = strings.Replace(manifest, "hand-made-%d", fmt.Sprintf("hand-made-%d", i), 1)
			}
			vr := &infrahubv1alpha1.VidraResource{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", kind, i), Labels: map[string]string{manifests.SyncLabel: "hostile"}},
				Spec: infrahubv1alpha1.VidraResourceSpec{Manifest: m,
					Destination: infrahubv1alpha1.Destination{Server: server, Namespace: ns}},
			}
			if err := env.Client.Create(ctx, vr); err != nil {
				b.Fatal(err)
			}
		}
	}
	wait = func() string {
		var last string
		eventually(b, 10*time.Minute, func() error {
			var list infrahubv1alpha1.VidraResourceList
			if err := reader.List(ctx, &list, client.MatchingLabels{manifests.SyncLabel: "hostile"}); err != nil {
				return err
			}
			done := 0
			for _, vr := range list.Items {
				if vr.Status.DeployState == want {
					done++
					last = vr.Status.LastError
				}
			}
			if done < count {
				return fmt.Errorf("%d of %d hostile VidraResources %s", done, count, want)
			}
			return nil
		})
		if len(last) > 160 {
			last = last[:160] + "…"
		}
		return fmt.Sprintf("%d hand-made VidraResources %s %q", count, want, last)
	}
	return start, wait
}

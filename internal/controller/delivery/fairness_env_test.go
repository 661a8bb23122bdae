package delivery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
)

// A slow Infrahub host holds no more than its share of the sync workers: while every query to
// it hangs, a sync on another host is delivered at once, and the syncs turned away from the
// busy host wait without writing anything.
func TestSlowHostLeavesWorkersForOthers(t *testing.T) {
	o := fastOptions()
	o.SyncConcurrency = 2 // one pass per host
	// A hanging query holds its worker this long: past every wait below, so only a worker the
	// slow host never had can deliver the other host's sync.
	o.InfrahubTimeout = time.Minute
	startManager(t, o)
	ns := namespace(t)

	slowSyncs := []string{"fair-slow-1", "fair-slow-2", "fair-slow-3"}
	slow, slowURL := startInfrahub(t, nil, slowSyncs...)
	if _, err := slow.AddArtifact("", "web", "", []byte(configMapYAML("fair-slow", "", "1"))); err != nil {
		t.Fatal(err)
	}
	slow.SetFault(emu.ClassQuery, emu.Fault{Kind: emu.FaultHang})
	for _, name := range slowSyncs {
		newSync(t, name, slowURL, "web", ns)
	}
	eventually(t, 10*time.Second, func() error {
		if slow.InFlight(emu.ClassQuery) == 0 {
			return fmt.Errorf("no query on the slow host yet")
		}
		return nil
	})

	fast, fastURL := startInfrahub(t, nil, "fair-fast")
	if _, err := fast.AddArtifact("", "web", "", []byte(configMapYAML("fair-fast", "", "1"))); err != nil {
		t.Fatal(err)
	}
	newSync(t, "fair-fast", fastURL, "web", ns)
	waitSync(t, "fair-fast", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 15*time.Second)
	if p := slow.PeakInFlight(emu.ClassQuery); p != 1 {
		t.Fatalf("%d queries on the slow host at once, want 1 (--delivery-sync-concurrency-per-host)", p)
	}

	// The passes turned away come back every second or two and write nothing.
	versions := map[string]string{}
	for _, name := range slowSyncs {
		versions[name] = getSync(t, name).ResourceVersion
	}
	consistently(t, 3*time.Second, func() error {
		for _, name := range slowSyncs {
			if s := getSync(t, name); s.ResourceVersion != versions[name] {
				return fmt.Errorf("sync %s written while its host was busy: %+v", name, s.Status)
			}
		}
		if p := slow.PeakInFlight(emu.ClassQuery); p != 1 {
			return fmt.Errorf("%d queries on the slow host at once, want 1", p)
		}
		return nil
	})
}

// A sync delivering many artifacts keeps at most its apply window of VidraResources written and
// not yet applied, so the shared VidraResource workers never have its thousand applies queued
// ahead of every other tenant's; it goes on as they apply and ends with every artifact
// delivered. Judged from a watch, which sees every change of every VidraResource in order.
func TestApplyWindowBoundsWhatOneSyncQueues(t *testing.T) {
	const window, artifacts = 3, 12
	o := fastOptions()
	o.Limits.ApplyWindow = window
	startManager(t, o)
	ns := namespace(t)
	e, url := startInfrahub(t, nil, "window")
	for i := range artifacts {
		if _, err := e.AddArtifact("", "many", "", []byte(configMapYAML(fmt.Sprintf("window-%02d", i), "", "1"))); err != nil {
			t.Fatal(err)
		}
	}
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := wc.Watch(ctx, &infrahubv1alpha1.VidraResourceList{}, client.MatchingLabels{manifests.SyncLabel: "window"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	peak := make(chan int, 1)
	go func() {
		open, most := map[string]bool{}, 0
		for ev := range w.ResultChan() {
			vr, ok := ev.Object.(*infrahubv1alpha1.VidraResource)
			if !ok {
				continue
			}
			open[vr.Name] = ev.Type != watch.Deleted && vr.DeletionTimestamp.IsZero() && vr.Status.ObservedGeneration < vr.Generation
			n := 0
			for _, o := range open {
				if o {
					n++
				}
			}
			most = max(most, n)
		}
		peak <- most
	}()

	newSync(t, "window", url, "many", ns)
	s := waitSync(t, "window", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
	if s.Status.Resources.Total != artifacts {
		t.Fatalf("%d VidraResources, want %d", s.Status.Resources.Total, artifacts)
	}
	w.Stop()
	if most := <-peak; most > window {
		t.Fatalf("%d VidraResources of the sync written and not yet applied at once, more than its window of %d", most, window)
	} else if most == 0 {
		t.Fatal("the watch saw no VidraResource waiting for its apply: it judged nothing")
	}
}

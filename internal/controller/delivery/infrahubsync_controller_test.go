package delivery

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
)

// Defect 1: status.checksums is kept, and a pass over unchanged artifacts downloads nothing and
// writes nothing; a changed artifact reaches the cluster within one sync interval, and only it
// is downloaded.
func TestDefect01_ChecksumsKeptNothingDownloadedWhenUnchanged(t *testing.T) {
	const interval = 2 * time.Second
	o := fastOptions()
	o.Settings.RequeueSyncAfter = interval
	h := startManager(t, o)
	e, url := startInfrahub(t, nil)
	if err := e.LoadSample(); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t)
	newSync(t, "d01", url, emu.SampleArtifactName, ns)

	s := waitSync(t, "d01", infrahubv1alpha1.StateSucceeded, ReasonSynced, 30*time.Second)
	arts, _ := e.Artifacts("main", time.Time{})
	if len(arts) != 2 {
		t.Fatalf("sample has %d artifacts", len(arts))
	}
	var want []string
	for _, a := range arts {
		want = append(want, a.ID+":"+a.Checksum)
	}
	slices.Sort(want)
	if !slices.Equal(s.Status.Checksums, want) {
		t.Fatalf("status.checksums = %v, want %v", s.Status.Checksums, want)
	}
	for _, a := range arts {
		waitResource(t, a.ID, infrahubv1alpha1.StateSucceeded, ReasonDeployed, 30*time.Second)
	}
	eventually(t, 10*time.Second, func() error { return exists(t, env.Client, &appsv1.Deployment{}, ns, "web-b") })
	eventually(t, 10*time.Second, func() error { return exists(t, env.Client, &corev1.Service{}, ns, "web-b") })

	// Unchanged passes: queries, nothing else.
	before := e.Counters()
	h.writes.reset()
	syncRV := getSync(t, "d01").ResourceVersion
	time.Sleep(2*interval + interval/2)
	after := e.Counters()
	if q := after.Queries - before.Queries; q < 2 {
		t.Fatalf("%d queries in %s, want at least 2 (one per interval)", q, 2*interval+interval/2)
	}
	if d := after.Downloads - before.Downloads; d != 0 {
		t.Fatalf("%d downloads over unchanged artifacts", d)
	}
	if h.writes.n.Load() != 0 {
		t.Fatalf("unchanged passes wrote: %s", h.writes)
	}
	if rv := getSync(t, "d01").ResourceVersion; rv != syncRV {
		t.Fatalf("sync rewritten by an unchanged pass (%s -> %s)", syncRV, rv)
	}
	if after.Logins > 1 {
		t.Fatalf("%d logins: the client must be kept across passes", after.Logins)
	}

	// A change reaches the cluster within one sync interval, downloading only that artifact.
	webA := arts[0]
	if !strings.Contains(string(webA.Content), "web-a") {
		webA = arts[1]
	}
	before = e.Counters()
	changed := time.Now()
	updated, err := e.UpdateArtifact("main", webA.ID, []byte(configMapYAML("web-a", "", "v3")))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, interval+interval/10+3*time.Second, func() error {
		cm := &corev1.ConfigMap{}
		if err := exists(t, env.Client, cm, ns, "web-a"); err != nil {
			return err
		}
		if cm.Data["value"] != "v3" {
			return fmt.Errorf("web-a data %v", cm.Data)
		}
		return nil
	})
	t.Logf("artifact change reached the cluster after %s (sync interval %s)", time.Since(changed).Round(10*time.Millisecond), interval)
	if d := e.Counters().Downloads - before.Downloads; d != 1 {
		t.Fatalf("%d downloads for one changed artifact", d)
	}
	eventually(t, 5*time.Second, func() error {
		if s := getSync(t, "d01"); !slices.Contains(s.Status.Checksums, updated.ID+":"+updated.Checksum) {
			return fmt.Errorf("status.checksums %v lacks the new checksum %s", s.Status.Checksums, updated.Checksum)
		}
		return nil
	})
}

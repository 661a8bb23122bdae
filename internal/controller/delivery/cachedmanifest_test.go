package delivery

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
)

// The cache holds no manifest; a pass reads it when it applies: a large one is applied whole,
// and a new one replaces it.
func TestApplyReadsTheManifestTheCacheDrops(t *testing.T) {
	h := startManager(t, fastOptions())
	ns := namespace(t)
	big := strings.Repeat("v", 128<<10)
	newResource(t, "cache-drops-manifest", ns, configMapYAML("big", "", big))
	waitResource(t, "cache-drops-manifest", infrahubv1alpha1.StateSucceeded, "", 30*time.Second)
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "big"}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["value"] != big {
		t.Fatalf("applied %d bytes of the value, want %d", len(cm.Data["value"]), len(big))
	}
	cached := &infrahubv1alpha1.VidraResource{}
	if err := h.mgr.GetClient().Get(context.Background(), client.ObjectKey{Name: "cache-drops-manifest"}, cached); err != nil {
		t.Fatal(err)
	}
	if cached.Spec.Manifest != "" {
		t.Fatalf("the cache holds the manifest (%d bytes)", len(cached.Spec.Manifest))
	}
	updateResourceManifest(t, "cache-drops-manifest", configMapYAML("big", "", "small"))
	eventually(t, 30*time.Second, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "big"}, cm); err != nil {
			return err
		}
		if cm.Data["value"] != "small" {
			return fmt.Errorf("value still %d bytes", len(cm.Data["value"]))
		}
		return nil
	})
}

// The digest the sync compares comes from the cache's own record, which an annotation written
// on the API server cannot pass for; without a record it is the manifest's.
func TestManifestDigest(t *testing.T) {
	t.Parallel()
	vr := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: infrahubv1alpha1.VidraResourceSpec{Manifest: "kind: X\n"}}
	want := manifests.Hash("kind: X\n")
	if h, n := manifests.Digest(vr); h != want || n != 8 {
		t.Fatalf("uncached: %s %d", h, n)
	}
	obj, err := manifests.Strip(vr.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	cached := obj.(*infrahubv1alpha1.VidraResource)
	if cached.Spec.Manifest != "" {
		t.Fatal("the transform kept the manifest")
	}
	if h, n := manifests.Digest(cached); h != want || n != 8 {
		t.Fatalf("cached: %s %d", h, n)
	}
	forged := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "f", Annotations: map[string]string{
		manifests.CachedManifestAnnotation: want + " 8 guessed"}}}
	if h, n := manifests.Digest(forged); h != manifests.Hash("") || n != 0 {
		t.Fatalf("a forged record was trusted: %s %d", h, n)
	}
}

// The sync rewrites what was edited by hand from the cached copy, which holds no manifest: a
// label put back leaves the manifest as it is, and a manifest emptied by hand is written again.
func TestSyncRestoresHandEditsWithoutTheCachedManifest(t *testing.T) {
	startManager(t, fastOptions())
	e, url := startInfrahub(t, nil, "hand-edits")
	ns := namespace(t)
	manifest := configMapYAML("edited", "", "1")
	a, _ := e.AddArtifact("", "edited", "", []byte(manifest))
	newSync(t, "hand-edits", url, "edited", ns)
	waitResource(t, a.ID, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	live := func() *infrahubv1alpha1.VidraResource {
		vr := &infrahubv1alpha1.VidraResource{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: a.ID}, vr); err != nil {
			t.Fatal(err)
		}
		return vr
	}

	patchObject(t, env.Client, &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: a.ID}},
		func(vr *infrahubv1alpha1.VidraResource) { delete(vr.Labels, manifests.SyncLabel) })
	requestSync(t, getSync(t, "hand-edits"))
	eventually(t, 30*time.Second, func() error {
		if vr := live(); vr.Labels[manifests.SyncLabel] != "hand-edits" {
			return fmt.Errorf("label not put back: %v", vr.Labels)
		}
		return nil
	})
	if got := live().Spec.Manifest; got != manifest {
		t.Fatalf("putting the label back changed the manifest to %q", got)
	}

	patchObject(t, env.Client, &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: a.ID}},
		func(vr *infrahubv1alpha1.VidraResource) { vr.Spec.Manifest = "" })
	requestSync(t, getSync(t, "hand-edits"))
	eventually(t, 30*time.Second, func() error {
		if got := live().Spec.Manifest; got != manifest {
			return fmt.Errorf("manifest %q, want the artifact's", got)
		}
		return nil
	})
}

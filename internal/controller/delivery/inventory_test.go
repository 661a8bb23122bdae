package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/apply"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
)

// compactConfigMaps is a manifest of n ConfigMaps c-0 … c-(n-1), one JSON document each.
func compactConfigMaps(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString("---\n")
		}
		fmt.Fprintf(&b, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c-%d"}}`+"\n", i)
	}
	return b.String()
}

// managedConfigMaps counts the ConfigMaps in ns the operator applied.
func managedConfigMaps(t *testing.T, ns string) int {
	t.Helper()
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	if err := env.Client.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{manifests.ManagedByLabel: manifests.ManagedByValue}); err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// Issue 42 finding 6: an artifact of thousands of small objects records its inventory (an
// annotation caps at 256 KiB, some 4,000 entries), and removing them from it prunes them.
// 1,000 objects here, in chunks of 16 KiB; DELIVERY_LARGE_OBJECTS=10000 runs the acceptance's
// 10,000 with the default chunk size.
func TestLargeArtifactInventoryAppliesAndPrunes(t *testing.T) {
	n, o := 1000, fastOptions()
	o.inventoryChunkBytes = 16 << 10
	if v, err := strconv.Atoi(os.Getenv("DELIVERY_LARGE_OBJECTS")); err == nil && v > 0 {
		n, o.inventoryChunkBytes = v, 0
	}
	startManager(t, o)
	ns := namespace(t)
	start := time.Now()
	newResource(t, "d-large", ns, compactConfigMaps(n))
	timeout := 60*time.Second + time.Duration(n)*60*time.Millisecond
	vr := waitResource(t, "d-large", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, timeout)
	t.Logf("%d objects applied in %s", n, time.Since(start).Round(time.Millisecond))
	if int(vr.Status.ManagedResourceCount) != n {
		t.Fatalf("managedResourceCount %d, want %d", vr.Status.ManagedResourceCount, n)
	}
	if got := len(inventoryFor(t, "d-large").Objects); got != n {
		t.Fatalf("inventory records %d objects, want %d", got, n)
	}
	if got := managedConfigMaps(t, ns); got != n {
		t.Fatalf("%d ConfigMaps applied, want %d", got, n)
	}
	if v, ok := getResource(t, "d-large").Annotations[infrahubv1alpha1.InventoryAnnotation]; ok {
		t.Fatalf("the inventory is still in the annotation (%d bytes)", len(v))
	}

	start = time.Now()
	updateResourceManifest(t, "d-large", compactConfigMaps(10))
	eventually(t, timeout, func() error {
		if got := managedConfigMaps(t, ns); got != 10 {
			return fmt.Errorf("%d ConfigMaps left, want 10", got)
		}
		return nil
	})
	t.Logf("%d objects pruned in %s", n-10, time.Since(start).Round(time.Millisecond))
	waitResource(t, "d-large", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	if got := len(inventoryFor(t, "d-large").Objects); got != 10 {
		t.Fatalf("inventory records %d objects after the prune, want 10", got)
	}
}

// A VidraResource an earlier version recorded in its annotation: the annotation is read (what
// it lists is pruned when it leaves the manifest), then moved to the store and removed.
func TestAnnotationInventoryIsReadAndMoved(t *testing.T) {
	startManager(t, fastOptions())
	ns := namespace(t)
	// What the earlier version applied: an object marked as the VidraResource's (by name, as
	// Vidra and the first versions marked them) and listed in its annotation.
	old := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "earlier",
		Labels: map[string]string{manifests.ManagedByLabel: manifests.ManagedByValue}, Annotations: map[string]string{manifests.OwnedByAnnotation: "d-migrate"}}}
	if err := env.Client.Create(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	recorded, err := json.Marshal(apply.Inventory{Objects: []string{"/v1/ConfigMap/" + ns + "/earlier", "/v1/ConfigMap/" + ns + "/kept"}})
	if err != nil {
		t.Fatal(err)
	}
	newResource(t, "d-migrate", ns, configMapYAML("kept", "", "1"), func(vr *infrahubv1alpha1.VidraResource) {
		vr.Annotations = map[string]string{infrahubv1alpha1.InventoryAnnotation: string(recorded)}
	})
	waitResource(t, "d-migrate", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	eventually(t, 10*time.Second, func() error {
		if exists(t, env.Client, &corev1.ConfigMap{}, ns, "earlier") == nil {
			return fmt.Errorf("the object the annotation recorded was not pruned")
		}
		if _, ok := getResource(t, "d-migrate").Annotations[infrahubv1alpha1.InventoryAnnotation]; ok {
			return fmt.Errorf("the annotation is still there")
		}
		return nil
	})
	if inv := inventoryFor(t, "d-migrate"); len(inv.Objects) != 1 || inv.Objects[0] != "/v1/ConfigMap/"+ns+"/kept" {
		t.Fatalf("stored inventory %+v", inv)
	}
}

package manager

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/testenv"
)

// The manager's cache holds every VidraResource of the cluster: it must not hold their
// manifests (up to 1 MiB each), or a few hundred of them exhaust the operator's memory.
func TestCacheHoldsNoManifest(t *testing.T) {
	o := DefaultOptions()
	o.Controllers = Families{FamilyDelivery}
	o.MetricsAddr, o.HealthAddr = "0", "0"
	l, err := Listen(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	o.Listeners, o.ManyPerProcess = l, true
	mgr, err := New(env.Config, o, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The cache alone: no controller acts on the VidraResource.
	go func() { _ = mgr.GetCache().Start(ctx) }()
	vr := &infrahubv1alpha1.VidraResource{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "cached-"},
		Spec:       infrahubv1alpha1.VidraResourceSpec{Manifest: "# " + strings.Repeat("x", 64<<10) + "\n"},
	}
	if err := env.Client.Create(ctx, vr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), vr) })
	got := &infrahubv1alpha1.VidraResource{}
	testenv.Eventually(t, 30*time.Second, "the VidraResource in the cache", func() (bool, string) {
		err := mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(vr), got)
		return err == nil, errString(err)
	})
	if n := len(got.Spec.Manifest); n != 0 {
		t.Fatalf("the cached VidraResource holds its manifest (%d bytes)", n)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

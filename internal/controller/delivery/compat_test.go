package delivery

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
	"github.com/metalhub/metalhub/internal/testenv"
)

// vidraSamples is shared/compat/samples/vidra beside the checkout (METALHUB_COMPAT_SAMPLES
// overrides, as for the CRD tests). A checkout without them skips the test, but CI lays them
// out, so there a missing directory is a failure: a skip would pass unnoticed.
func vidraSamples(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("METALHUB_COMPAT_SAMPLES")
	if dir == "" {
		dir = filepath.Join(testenv.RepoRoot(), "..", "shared", "compat", "samples")
	}
	dir = filepath.Join(dir, "vidra")
	if _, err := os.Stat(dir); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("compat samples not found at %s (CI is set; set METALHUB_COMPAT_SAMPLES): %v", dir, err)
		}
		t.Skipf("compat samples not found at %s: %v", dir, err)
	}
	return dir
}

// readSample decodes one sample file into obj, replacing old with new in its text first.
func readSample(t testing.TB, path string, obj client.Object, replace ...string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.NewReplacer(replace...).Replace(string(data))
	if err := yaml.Unmarshal([]byte(text), obj); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func createSample(t testing.TB, obj client.Object) {
	t.Helper()
	if obj.GetNamespace() == "" {
		if _, ok := obj.(*corev1.Secret); ok {
			obj.SetNamespace("default")
		}
		if _, ok := obj.(*corev1.ConfigMap); ok {
			obj.SetNamespace("default")
		}
	}
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
}

// Users' manifests work unchanged but for one addition: the against-fake samples (credentials
// labelled with the bare host, the settings ConfigMap, the main and time-travel syncs) and the
// reference's own VidraResource sample with a JSON manifest. The addition (issue 24 item 4): the
// credentials Secret names the syncs it serves and, the fake being plain HTTP on its own port,
// the URL it is for.
func TestReferenceSamplesWork(t *testing.T) {
	dir := vidraSamples(t)
	startManager(t, fastOptions())
	e := emu.New(emu.Options{})
	if err := e.LoadSample(); err != nil {
		t.Fatal(err)
	}
	url, err := e.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	hostPort := strings.TrimPrefix(url, "http://")
	fake := filepath.Join(dir, "against-fake")

	main, at := &infrahubv1alpha1.InfrahubSync{}, &infrahubv1alpha1.InfrahubSync{}
	readSample(t, filepath.Join(fake, "infrahubsync-main.yaml"), main, "127.0.0.1:8300", hostPort)
	readSample(t, filepath.Join(fake, "infrahubsync-at.yaml"), at, "127.0.0.1:8300", hostPort)
	creds := readInto(t, filepath.Join(fake, "infrahub-credentials.yaml"), &corev1.Secret{})
	creds.Annotations = credsFor(url, main.Name, at.Name)
	createSample(t, creds)
	createSample(t, readInto(t, filepath.Join(fake, "vidra-config.yaml"), &corev1.ConfigMap{}))

	createSample(t, main)
	t.Cleanup(func() { deleteSync(t, main.Name) })
	s := waitSync(t, main.Name, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
	if len(s.Status.Checksums) != 2 {
		t.Fatalf("checksums %v", s.Status.Checksums)
	}
	eventually(t, 15*time.Second, func() error {
		cm := &corev1.ConfigMap{}
		if err := exists(t, env.Client, cm, "default", "web-a"); err != nil {
			return err
		}
		if cm.Data["version"] != "v2" {
			return fmt.Errorf("web-a version %q, want v2", cm.Data["version"])
		}
		return exists(t, env.Client, &appsv1.Deployment{}, "default", "web-b")
	})

	// The same artifacts as of 2025-04-09: only web-a, in v1. VidraResources are named after
	// artifact ids, so the main sync gives them up first.
	deleteSync(t, main.Name)
	createSample(t, at)
	t.Cleanup(func() { deleteSync(t, at.Name) })
	s = waitSync(t, at.Name, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
	if len(s.Status.Checksums) != 1 {
		t.Fatalf("time travel checksums %v", s.Status.Checksums)
	}
	eventually(t, 15*time.Second, func() error {
		cm := &corev1.ConfigMap{}
		if err := exists(t, env.Client, cm, "default", "web-a"); err != nil {
			return err
		}
		if cm.Data["version"] != "v1" {
			return fmt.Errorf("web-a version %q, want v1", cm.Data["version"])
		}
		return nil
	})

	vr := &infrahubv1alpha1.VidraResource{}
	readSample(t, filepath.Join(dir, "firstTest.yaml"), vr)
	createSample(t, vr)
	t.Cleanup(func() { deleteResource(t, vr.Name) })
	waitResource(t, vr.Name, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	cm := &corev1.ConfigMap{}
	if err := exists(t, env.Client, cm, "default", "example"); err != nil || cm.Data["key"] != "value" {
		t.Fatalf("sample VidraResource's ConfigMap: %v %v", err, cm.Data)
	}
}

func readInto[T client.Object](t testing.TB, path string, obj T) T {
	t.Helper()
	readSample(t, path, obj)
	return obj
}

package delivery

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
)

// startBareInfrahub runs an emulator with one artifact and no credentials Secret.
func startBareInfrahub(t testing.TB, artifact string) (*emu.Emulator, string) {
	t.Helper()
	e := emu.New(emu.Options{})
	url, err := e.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	if _, err := e.AddArtifact("", "web", "", []byte(configMapYAML(artifact, "", "1"))); err != nil {
		t.Fatal(err)
	}
	return e, url
}

var loginData = map[string]string{"username": emu.DefaultUsername, "password": emu.DefaultPassword}

// wantNothingSent fails if the emulator received any request: credentials refused before use.
func wantNothingSent(t testing.TB, e *emu.Emulator) {
	t.Helper()
	if c := e.Counters(); c.Total != 0 {
		t.Fatalf("%d requests reached Infrahub (%+v): the credentials were used", c.Total, c)
	}
}

// Issue 24 item 4: a credentials Secret serves only the syncs it names, only for the exact
// scheme, host and port it is for, and never over plain HTTP off the node or the cluster network
// unless the admin allows it (issue 42 finding 7: loopback and *.svc need no flag). Every
// refusal says why and sends nothing. The operator runs with the default flags.
func TestCredentialsBoundToSync(t *testing.T) {
	o := fastOptions()
	o.AllowPlainHTTPCredentials = false // the default
	startManager(t, o)
	ns := namespace(t)
	const syncs = infrahubv1alpha1.SyncsAnnotation

	t.Run("another team's Secret for the host", func(t *testing.T) {
		e, url := startBareInfrahub(t, "team-b")
		s := createAnnotatedSecret(t, "default", infrahubv1alpha1.InfrahubAPIURLLabel, labelFor(t, url),
			map[string]string{syncs: "creds-team-a", infrahubv1alpha1.URLAnnotation: url}, loginData)
		newSync(t, "creds-team-b", url, "web", ns)
		got := waitSync(t, "creds-team-b", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonCredentialsNotBound, 15*time.Second)
		for _, want := range []string{s.Name, syncs} {
			if !strings.Contains(got.Status.LastError, want) {
				t.Errorf("lastError %q does not name %q", got.Status.LastError, want)
			}
		}
		wantNothingSent(t, e)
	})
	t.Run("scheme mismatch: a legacy label means https", func(t *testing.T) {
		e, url := startBareInfrahub(t, "scheme")
		createAnnotatedSecret(t, "default", infrahubv1alpha1.InfrahubAPIURLLabel, labelFor(t, url),
			map[string]string{syncs: "creds-scheme"}, loginData)
		newSync(t, "creds-scheme", url, "web", ns)
		got := waitSync(t, "creds-scheme", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonCredentialsURLMismatch, 15*time.Second)
		if want := "https://" + strings.TrimPrefix(url, "http://"); !strings.Contains(got.Status.LastError, want) || !strings.Contains(got.Status.LastError, url) {
			t.Errorf("lastError %q does not name both %s and %s", got.Status.LastError, want, url)
		}
		wantNothingSent(t, e)
	})
	t.Run("port mismatch", func(t *testing.T) {
		e, url := startBareInfrahub(t, "port")
		other := closedURL(t)
		host := strings.Split(strings.TrimPrefix(url, "http://"), ":")[0]
		createAnnotatedSecret(t, "default", infrahubv1alpha1.InfrahubAPIURLLabel, host,
			map[string]string{syncs: "creds-port", infrahubv1alpha1.URLAnnotation: other}, loginData)
		newSync(t, "creds-port", url, "web", ns)
		got := waitSync(t, "creds-port", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonCredentialsURLMismatch, 15*time.Second)
		if !strings.Contains(got.Status.LastError, other) {
			t.Errorf("lastError %q does not name the Secret's URL %s", got.Status.LastError, other)
		}
		wantNothingSent(t, e)
	})
	t.Run("plain HTTP off the node without the flag", func(t *testing.T) {
		// Refused before anything is sent, so the address need not answer (TEST-NET-1).
		const url = "http://192.0.2.1:8300"
		createAnnotatedSecret(t, "default", infrahubv1alpha1.InfrahubAPIURLLabel, labelFor(t, url),
			map[string]string{syncs: "creds-plain", infrahubv1alpha1.URLAnnotation: url}, loginData)
		newSync(t, "creds-plain", url, "web", ns)
		got := waitSync(t, "creds-plain", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonPlainHTTPCredentials, 15*time.Second)
		if !strings.Contains(got.Status.LastError, "--delivery-allow-plain-http-credentials") {
			t.Errorf("lastError %q does not name the flag", got.Status.LastError)
		}
	})
	t.Run("plain HTTP on loopback without the flag", func(t *testing.T) {
		_, url := startBareInfrahub(t, "plain-loopback")
		createAnnotatedSecret(t, "default", infrahubv1alpha1.InfrahubAPIURLLabel, labelFor(t, url),
			map[string]string{syncs: "creds-plain-loopback", infrahubv1alpha1.URLAnnotation: url}, loginData)
		newSync(t, "creds-plain-loopback", url, "web", ns)
		waitSync(t, "creds-plain-loopback", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 15*time.Second)
	})
	t.Run("a Vidra-style Secret naming the sync", func(t *testing.T) {
		e := emu.New(emu.Options{})
		if _, err := e.AddArtifact("", "web", "", []byte(configMapYAML("named", "", "1"))); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewTLSServer(e)
		t.Cleanup(srv.Close)
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
		// The legacy host_port label (https on that port), two syncs named.
		createAnnotatedSecret(t, "default", infrahubv1alpha1.InfrahubAPIURLLabel, labelFor(t, srv.URL),
			map[string]string{syncs: "creds-someone-else, creds-named"},
			map[string]string{"username": emu.DefaultUsername, "password": emu.DefaultPassword, "ca.crt": string(ca)})
		newSync(t, "creds-named", srv.URL, "web", ns)
		waitSync(t, "creds-named", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 15*time.Second)
	})
}

// Issue 24 item 4, kubeconfigs: a kubeconfig Secret for a cluster serves only the VidraResources
// it names and those of the syncs it names; another VidraResource aimed at that cluster fails
// and says why.
func TestKubeconfigBoundToResource(t *testing.T) {
	startManager(t, fastOptions())
	ns := namespace(t)
	kubeconfig, server := kubeconfigOf(t, env.Kubeconfig) // not a local name: reached as a remote cluster
	secret := createAnnotatedSecret(t, "default", infrahubv1alpha1.ClusterKubeconfigLabel, labelFor(t, server),
		map[string]string{infrahubv1alpha1.SyncsAnnotation: "kc-sync", infrahubv1alpha1.VidraResourcesAnnotation: "kc-someone-else"},
		map[string]string{"kubeconfig": string(kubeconfig)})

	newResource(t, "kc-unbound", ns, configMapYAML("kc-unbound", "", "1"), func(vr *infrahubv1alpha1.VidraResource) {
		vr.Spec.Destination.Server = server
	})
	vr := waitResource(t, "kc-unbound", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonKubeconfigNotBound, 15*time.Second)
	for _, want := range []string{secret.Name, infrahubv1alpha1.VidraResourcesAnnotation} {
		if !strings.Contains(vr.Status.LastError, want) {
			t.Errorf("lastError %q does not name %q", vr.Status.LastError, want)
		}
	}
	if exists(t, env.Client, &corev1.ConfigMap{}, ns, "kc-unbound") == nil {
		t.Fatal("applied through a kubeconfig Secret that does not name the VidraResource")
	}

	// Named: the Secret's change alone brings the pass that applies.
	patchAnnotation(t, secret, infrahubv1alpha1.VidraResourcesAnnotation, "kc-someone-else,kc-unbound")
	waitResource(t, "kc-unbound", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 15*time.Second)

	// A sync the Secret names: its VidraResources reach the cluster.
	e, url := startInfrahub(t, nil, "kc-sync")
	a, err := e.AddArtifact("", "web", "", []byte(configMapYAML("kc-synced", "", "1")))
	if err != nil {
		t.Fatal(err)
	}
	newSync(t, "kc-sync", url, "web", ns, func(s *infrahubv1alpha1.InfrahubSync) { s.Spec.Destination.Server = server })
	waitResource(t, a.ID, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
}

// patchAnnotation merge-patches one annotation of an object, leaving the rest as the server has it.
func patchAnnotation(t testing.TB, obj client.Object, key, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
	if err := env.Client.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// The hook left for the admission webhook: with --delivery-trust-admitted-credentials, the
// Secret a sync's admitted-credentials annotation names serves it although it names no sync.
func TestAdmittedCredentialsHonouredWhenTrusted(t *testing.T) {
	o := fastOptions()
	o.TrustAdmittedCredentials = true
	startManager(t, o)
	ns := namespace(t)
	_, url := startBareInfrahub(t, "admitted")
	s := createAnnotatedSecret(t, "default", infrahubv1alpha1.InfrahubAPIURLLabel, labelFor(t, url),
		map[string]string{infrahubv1alpha1.URLAnnotation: url}, loginData)
	newSync(t, "creds-admitted", url, "web", ns, func(sync *infrahubv1alpha1.InfrahubSync) {
		sync.Annotations = map[string]string{infrahubv1alpha1.AdmittedCredentialsAnnotation: "default/" + s.Name + "-not-this"}
	})
	waitSync(t, "creds-admitted", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonCredentialsNotBound, 15*time.Second)
	patchAnnotation(t, getSync(t, "creds-admitted"), infrahubv1alpha1.AdmittedCredentialsAnnotation, "default/"+s.Name)
	waitSync(t, "creds-admitted", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 15*time.Second)
}

// Issue 42 finding 7: the binding admission records for a Vidra sync (BindCredentials) is
// honoured as Vidra's label means it — the bare host, whatever the scheme and port — also when
// the Secret lies in the sync's destination namespace, outside the Secret scope; in any other
// namespace it is not. The operator runs with the defaults the manager sets with webhooks on
// (trust admitted credentials, no plain-http flag: the emulator is on loopback).
func TestAdmittedVidraSecretHonoured(t *testing.T) {
	o := fastOptions()
	o.TrustAdmittedCredentials = true
	o.AllowPlainHTTPCredentials = false
	startManager(t, o)
	ns, elsewhere := namespace(t), namespace(t)
	_, url := startBareInfrahub(t, "vidra-bound")
	host := strings.Split(strings.TrimPrefix(url, "http://"), ":")[0]

	inDest := createSecret(t, ns, infrahubv1alpha1.InfrahubAPIURLLabel, host, loginData)
	newSync(t, "vidra-bound", url, "web", ns, func(s *infrahubv1alpha1.InfrahubSync) {
		s.Annotations = map[string]string{infrahubv1alpha1.AdmittedCredentialsAnnotation: ns + "/" + inDest.Name}
	})
	waitSync(t, "vidra-bound", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 15*time.Second)

	e, url2 := startBareInfrahub(t, "vidra-elsewhere")
	other := createSecret(t, elsewhere, infrahubv1alpha1.InfrahubAPIURLLabel, host, loginData)
	newSync(t, "vidra-elsewhere", url2, "web", ns, func(s *infrahubv1alpha1.InfrahubSync) {
		s.Annotations = map[string]string{infrahubv1alpha1.AdmittedCredentialsAnnotation: elsewhere + "/" + other.Name}
	})
	got := waitSync(t, "vidra-elsewhere", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonCredentialsNotBound, 15*time.Second)
	if !strings.Contains(got.Status.LastError, other.Name) {
		t.Errorf("lastError %q does not name the Secret", got.Status.LastError)
	}
	wantNothingSent(t, e)
}

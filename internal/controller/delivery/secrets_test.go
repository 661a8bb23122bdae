package delivery

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/scheme"
)

// Which Secret names the credentials of a URL: only the operator's namespace by default; widened,
// the operator's namespace still first; within a namespace tier host_port before host; a tie an
// error.
func TestSecretPrecedence(t *testing.T) {
	t.Parallel()
	const (
		key = infrahubv1alpha1.InfrahubAPIURLLabel
		url = "https://infrahub.example.net:8443"
		op  = "metalhub-system"
	)
	secret := func(ns, name, value string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{key: value},
			Annotations: map[string]string{infrahubv1alpha1.SyncsAnnotation: "s"}}}
	}
	unbound := func(s *corev1.Secret) *corev1.Secret {
		s = s.DeepCopy()
		s.Name += "-unbound"
		s.Annotations[infrahubv1alpha1.SyncsAnnotation] = "another"
		return s
	}
	admin := secret(op, "admin", "infrahub.example.net")
	adminPort := secret(op, "admin-port", "infrahub.example.net_8443")
	tenant := secret("tenant-a", "tenant", "infrahub.example.net_8443")
	tenantB := secret("tenant-b", "tenant", "infrahub.example.net_8443")
	cases := []struct {
		name    string
		flag    string
		secrets []client.Object
		want    string // namespace/name, or the reason of the error
	}{
		{"default: the operator's namespace only", "", []client.Object{admin, tenant}, op + "/admin"},
		{"default: a tenant's Secret alone is not found", "", []client.Object{tenant}, infrahubv1alpha1.ReasonCredentialsNotFound},
		{"widened: the operator's namespace first, even less specific", target.AnyNamespace, []client.Object{admin, tenant}, op + "/admin"},
		{"widened: another namespace when the operator's has none", target.AnyNamespace, []client.Object{tenant}, "tenant-a/tenant"},
		{"widened: two other namespaces on one value are ambiguous", target.AnyNamespace, []client.Object{tenant, tenantB}, infrahubv1alpha1.ReasonSecretAmbiguous},
		{"host_port before host", "", []client.Object{admin, adminPort}, op + "/admin-port"},
		{"two on one value are ambiguous", "", []client.Object{adminPort, secret(op, "again", "infrahub.example.net_8443")}, infrahubv1alpha1.ReasonSecretAmbiguous},
		{"a named namespace is the only one", "tenant-a", []client.Object{admin, tenant}, "tenant-a/tenant"},
		{"a Secret for another sync is no candidate, even more specific", "", []client.Object{admin, unbound(adminPort)}, op + "/admin"},
		{"a Secret for another sync does not make a tie", "", []client.Object{adminPort, unbound(adminPort)}, op + "/admin-port"},
		{"widened: another sync's Secret in the operator's namespace does not shadow", target.AnyNamespace, []client.Object{unbound(admin), tenant}, "tenant-a/tenant"},
		{"only Secrets for other syncs: not bound, not not-found", "", []client.Object{unbound(admin), unbound(adminPort)}, infrahubv1alpha1.ReasonCredentialsNotBound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(tc.secrets...).Build()
			s, err := target.FindLabelledSecret(context.Background(), c, target.NewSecretScope(tc.flag, op), target.SecretQuery{Key: key, RawURL: url,
				Who:      target.Claimant{Kind: "InfrahubSync", Name: "s", Syncs: []string{"s"}},
				NotFound: infrahubv1alpha1.ReasonCredentialsNotFound, NotBound: infrahubv1alpha1.ReasonCredentialsNotBound})
			got := ""
			if err != nil {
				got, _ = lifecycle.ReasonOf(err)
			} else {
				got = s.Namespace + "/" + s.Name
			}
			if got != tc.want {
				t.Errorf("got %s (%v), want %s", got, err, tc.want)
			}
		})
	}
}

// A kubeconfig that would run a program or read a file in the operator's pod is refused, unless
// the insecure flag allows it; embedded data is fine.
func TestKubeconfigReachingOutsideIsRefused(t *testing.T) {
	t.Parallel()
	kubeconfig := func(mutate func(*clientcmdapi.Cluster, *clientcmdapi.AuthInfo)) []byte {
		cl := &clientcmdapi.Cluster{Server: "https://remote.example.net:6443", CertificateAuthorityData: []byte("ca")}
		u := &clientcmdapi.AuthInfo{Token: "t"}
		mutate(cl, u)
		data, err := clientcmd.Write(clientcmdapi.Config{
			Clusters: map[string]*clientcmdapi.Cluster{"c": cl}, AuthInfos: map[string]*clientcmdapi.AuthInfo{"u": u},
			Contexts: map[string]*clientcmdapi.Context{"c": {Cluster: "c", AuthInfo: "u"}}, CurrentContext: "c",
		})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	cases := []struct {
		name   string
		mutate func(*clientcmdapi.Cluster, *clientcmdapi.AuthInfo)
		refuse string // what the error names; "" accepted
	}{
		{"embedded token and CA", func(*clientcmdapi.Cluster, *clientcmdapi.AuthInfo) {}, ""},
		{"exec plugin", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.Exec = "", &clientcmdapi.ExecConfig{Command: "sh", APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
		}, "exec plugin"},
		{"auth-provider plugin", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.AuthProvider = "", &clientcmdapi.AuthProviderConfig{Name: "oidc"}
		}, "auth-provider plugin"},
		{"tokenFile", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.TokenFile = "", "/var/run/secrets/kubernetes.io/serviceaccount/token"
		}, "tokenFile"},
		{"client certificate file", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.ClientCertificate = "/etc/cert.pem" }, "client-certificate file"},
		{"client key file", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.ClientKey = "/etc/key.pem" }, "client-key file"},
		{"CA file", func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			c.CertificateAuthorityData, c.CertificateAuthority = nil, "/etc/ca.pem"
		}, "certificate-authority file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := kubeconfig(tc.mutate)
			_, err := target.RestConfigFromKubeconfig(data, false)
			switch {
			case tc.refuse == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refuse != "" && (err == nil || !strings.Contains(err.Error(), tc.refuse)):
				t.Fatalf("error %v, want one naming %q", err, tc.refuse)
			}
			if tc.refuse != "" {
				// The admin's explicit choice: not refused by us (client-go may still fail to
				// read a path that does not exist here).
				if _, err := target.RestConfigFromKubeconfig(data, true); err != nil && strings.Contains(err.Error(), "refused") {
					t.Errorf("insecure: %v", err)
				}
			}
		})
	}
}

// #16 scenario 3, credentials: a tenant's Secret in the tenant's own namespace, labelled with the
// more specific host_port, does not take over the sync from the admin's Secret.
func TestTenantSecretCannotRedirectSync(t *testing.T) {
	startManager(t, fastOptions())
	ns := namespace(t)
	e := emu.New(emu.Options{})
	url, err := e.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	if _, err := e.AddArtifact("", "web", "", []byte(configMapYAML("tenant-web", "", "1"))); err != nil {
		t.Fatal(err)
	}
	values, err := target.HostLabelValues(url)
	if err != nil {
		t.Fatal(err)
	}
	createAnnotatedSecret(t, "default", infrahubv1alpha1.InfrahubAPIURLLabel, values[len(values)-1], credsFor(url, "tenant-redirect"),
		map[string]string{"username": emu.DefaultUsername, "password": emu.DefaultPassword})
	// The tenant names the sync too: naming is not enough to win over the admin's namespace.
	createAnnotatedSecret(t, ns, infrahubv1alpha1.InfrahubAPIURLLabel, labelFor(t, url), credsFor(url, "tenant-redirect"),
		map[string]string{"username": emu.DefaultUsername, "password": "the tenant's"})
	newSync(t, "tenant-redirect", url, "web", ns)
	waitSync(t, "tenant-redirect", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 15*time.Second)
}

// #16 scenario 3, kubeconfigs: an exec plugin in a cluster Secret is refused with a reason, and
// the program never runs in the operator's process.
func TestKubeconfigExecPluginNeverRuns(t *testing.T) {
	startManager(t, fastOptions())
	ns := namespace(t)
	server := strings.TrimSuffix(env.Config.Host, "/") // not a local name: reached as a remote cluster
	marker := filepath.Join(t.TempDir(), "ran")
	data, err := clientcmd.Write(clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"c": {Server: server, InsecureSkipTLSVerify: true}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{"u": {Exec: &clientcmdapi.ExecConfig{
			Command: "sh", Args: []string{"-c", "touch " + marker + "; exit 1"},
			APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}}},
		Contexts:       map[string]*clientcmdapi.Context{"c": {Cluster: "c", AuthInfo: "u"}},
		CurrentContext: "c",
	})
	if err != nil {
		t.Fatal(err)
	}
	createAnnotatedSecret(t, "default", infrahubv1alpha1.ClusterKubeconfigLabel, labelFor(t, server), kubeconfigFor("tenant-exec"), map[string]string{"kubeconfig": string(data)})
	newResource(t, "tenant-exec", ns, configMapYAML("exec-cm", "", "1"), func(vr *infrahubv1alpha1.VidraResource) {
		vr.Spec.Destination.Server = server
	})
	vr := waitResource(t, "tenant-exec", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonKubeconfigInvalid, 15*time.Second)
	if !strings.Contains(vr.Status.LastError, "exec plugin") {
		t.Errorf("lastError %q does not name the exec plugin", vr.Status.LastError)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the kubeconfig's exec plugin ran in the operator's process")
	}
}

// What a credentials Secret states it is for, and whether a sync's URL is that: the exact
// scheme, host and port, a legacy label meaning https.
func TestCredentialsEndpointMatch(t *testing.T) {
	t.Parallel()
	secret := func(label, url string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{infrahubv1alpha1.InfrahubAPIURLLabel: label}}}
		if url != "" {
			s.Annotations = map[string]string{infrahubv1alpha1.URLAnnotation: url}
		}
		return s
	}
	cases := []struct {
		name    string
		secret  *corev1.Secret
		syncURL string
		want    string // "" matches, else what endpointMismatch says, or "error"
	}{
		{"legacy host label: https on 443", secret("infrahub.example", ""), "https://infrahub.example", ""},
		{"legacy host label, explicit default port", secret("infrahub.example", ""), "https://infrahub.example:443/graphql", ""},
		{"legacy host label refuses http", secret("infrahub.example", ""), "http://infrahub.example", "scheme and port differ"},
		{"legacy host label refuses another port", secret("infrahub.example", ""), "https://infrahub.example:8443", "port differ"},
		{"legacy host_port label: https on that port", secret("infrahub.example_8443", ""), "https://infrahub.example:8443", ""},
		{"legacy host_port label refuses http on that port", secret("infrahub.example_8443", ""), "http://infrahub.example:8443", "scheme differ"},
		{"annotation: exact", secret("infrahub.example", "http://infrahub.example:8080"), "http://infrahub.example:8080/", ""},
		{"annotation: host case does not matter", secret("infrahub.example", "https://Infrahub.Example"), "https://infrahub.EXAMPLE:443", ""},
		{"annotation: default http port", secret("infrahub.example", "http://infrahub.example"), "http://infrahub.example:80", ""},
		{"annotation wins over the label's port", secret("infrahub.example_8443", "https://infrahub.example:9443"), "https://infrahub.example:8443", "port differ"},
		{"annotation for another host", secret("infrahub.example", "https://other.example"), "https://infrahub.example", "host differ"},
		{"annotation with another scheme", secret("infrahub.example", "ftp://infrahub.example"), "https://infrahub.example", "error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, err := target.ParseEndpoint(tc.syncURL)
			if err != nil {
				t.Fatal(err)
			}
			have, how, err := target.SecretEndpoint(tc.secret)
			got := ""
			switch {
			case err != nil:
				got = "error"
			default:
				got = target.EndpointMismatch(have, want)
			}
			if got != tc.want {
				t.Errorf("Secret for %s (%s), sync %s: got %q, want %q", have, how, want, got, tc.want)
			}
		})
	}
}

// Which Secrets serve whom: those that name the object (or its sync), and the one its admission
// named, only when that annotation is trusted (credentials.syncClaimant decides).
func TestSecretBinding(t *testing.T) {
	t.Parallel()
	secret := func(ns, name string, ann map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann}}
	}
	sync := func(ann map[string]string) *infrahubv1alpha1.InfrahubSync {
		return &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: "team-b", Annotations: ann}}
	}
	const syncs, resources = infrahubv1alpha1.SyncsAnnotation, infrahubv1alpha1.VidraResourcesAnnotation
	admitted := map[string]string{infrahubv1alpha1.AdmittedCredentialsAnnotation: "team-b/creds"}
	cases := []struct {
		name   string
		secret *corev1.Secret
		who    target.Claimant
		want   bool
	}{
		{"no annotation serves nobody", secret("ns", "creds", nil), (&target.Credentials{}).SyncClaimant(sync(nil)), false},
		{"names another sync", secret("ns", "creds", map[string]string{syncs: "team-a"}), (&target.Credentials{}).SyncClaimant(sync(nil)), false},
		{"names the sync in a list with spaces", secret("ns", "creds", map[string]string{syncs: "team-a, team-b ,x"}), (&target.Credentials{}).SyncClaimant(sync(nil)), true},
		{"a prefix is not a name", secret("ns", "creds", map[string]string{syncs: "team-b2,team"}), (&target.Credentials{}).SyncClaimant(sync(nil)), false},
		{"a sync name in the resources list does not serve the sync", secret("ns", "creds", map[string]string{resources: "team-b"}), (&target.Credentials{}).SyncClaimant(sync(nil)), false},
		{"admitted, not trusted", secret("team-b", "creds", nil), (&target.Credentials{}).SyncClaimant(sync(admitted)), false},
		{"admitted and trusted", secret("team-b", "creds", nil), (&target.Credentials{TrustAdmitted: true}).SyncClaimant(sync(admitted)), true},
		{"admitted another Secret", secret("team-b", "other", nil), (&target.Credentials{TrustAdmitted: true}).SyncClaimant(sync(admitted)), false},
		{"VidraResource named", secret("ns", "kc", map[string]string{resources: "vr-1"}), target.Claimant{Kind: "VidraResource", Name: "vr-1", Resources: []string{"vr-1"}}, true},
		{"VidraResource through its sync", secret("ns", "kc", map[string]string{syncs: "team-b"}), target.Claimant{Kind: "VidraResource", Name: "vr-1", Resources: []string{"vr-1"}, Syncs: []string{"team-b"}}, true},
		{"VidraResource of no sync, Secret names a sync", secret("ns", "kc", map[string]string{syncs: "team-b"}), target.Claimant{Kind: "VidraResource", Name: "vr-1", Resources: []string{"vr-1"}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.who.Binds(tc.secret); got != tc.want {
				t.Errorf("binds = %v, want %v", got, tc.want)
			}
		})
	}
}

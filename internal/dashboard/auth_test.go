package dashboard

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/logr/testr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

// port is the port s listens on.
func port(s *Server) string { return strconv.Itoa(s.ln.Addr().(*net.TCPAddr).Port) }

// Off loopback, --allow-actions without authentication would let anyone on the network power
// servers off as the dashboard's user: it must not start, and must say which flags fix it.
func TestOffLoopbackActionsNeedAuth(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		s, err := New(env.Config, Options{Address: addr, AllowActions: true}, testr.New(t))
		if err == nil {
			_ = s.ln.Close()
			t.Errorf("%s: started with actions and no authentication", addr)
			continue
		}
		for _, flag := range []string{"--allow-actions", "--token-file", "--token-review"} {
			if !strings.Contains(err.Error(), flag) {
				t.Errorf("%s: error %q does not name %s", addr, err, flag)
			}
		}
	}
	// Read-only off loopback starts, as before.
	s := start(t, Options{Address: "0.0.0.0:0"})
	if code := getJSON(t, s.URL()+"api/snapshot", &Snapshot{}); code != http.StatusOK {
		t.Errorf("read-only snapshot off loopback: %d", code)
	}
}

// Off loopback the Host header is checked too: a page whose name an attacker points at this
// machine (DNS rebinding) must neither read the fleet nor reach the buttons.
func TestOffLoopbackHostAllowlist(t *testing.T) {
	s := start(t, Options{Address: "0.0.0.0:0"})
	p := port(s)
	for host, want := range map[string]int{
		"evil.example:" + p: http.StatusForbidden,
		"evil.example":      http.StatusForbidden,
		"127.0.0.1:" + p:    http.StatusOK,
		"localhost:" + p:    http.StatusOK,
		"LOCALHOST:" + p:    http.StatusOK,
	} {
		checkHost(t, s, host, want)
	}
}

// tokenFile writes tok to a file of its own and returns its path.
func tokenFile(t *testing.T, tok string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// postWith posts with hdr, the page's action header included.
func postWith(t testing.TB, url string, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, nil)
	req.Header.Set(ActionHeader, "1")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

func unclaimable(t *testing.T, name string) bool {
	t.Helper()
	got := &metalv1alpha1.Server{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, got); err != nil {
		t.Fatal(err)
	}
	return got.Spec.Unclaimable
}

// With --token-file, an action goes through only with that token in the Authorization header:
// none, another, a prefix of it, the same in a cookie or as Basic is a 401 that changes
// nothing, and the token shows in no answer and no log line.
func TestTokenFileAuthorizesActions(t *testing.T) {
	const tok = "s3cret-0123456789-abcdef"
	var logs bytes.Buffer
	var mu sync.Mutex
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 1})
	s := startLogged(t, Options{Address: "0.0.0.0:0", AllowActions: true, TokenFile: tokenFile(t, "\n"+tok+"\n")}, log, env.Config)
	create(t, newServer("tf-s1", nil))
	url := s.URL() + "api/servers/tf-s1/cordon"
	for name, hdr := range map[string]map[string]string{
		"no token":        {},
		"wrong token":     {"Authorization": "Bearer wrong-0123456789-abcdef"},
		"prefix":          {"Authorization": "Bearer " + tok[:12]},
		"longer":          {"Authorization": "Bearer " + tok + "x"},
		"basic":           {"Authorization": "Basic " + tok},
		"empty bearer":    {"Authorization": "Bearer "},
		"cookie":          {"Cookie": "token=" + tok},
		"token as header": {"X-Token": tok},
	} {
		code, body, h := postWith(t, url, hdr)
		if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: %d %q, want 401 with a Bearer challenge", name, code, body)
		}
		if strings.Contains(body, tok[:12]) {
			t.Errorf("%s: the answer shows the token: %q", name, body)
		}
	}
	if unclaimable(t, "tf-s1") {
		t.Fatal("cordoned without the token")
	}
	// The right token still needs the page's header: it is no way around the CSRF guard.
	req, _ := http.NewRequest(http.MethodPost, url, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("right token without %s: %v %v", ActionHeader, err, resp.Status)
	}
	if code, body, _ := postWith(t, url, map[string]string{"Authorization": "Bearer " + tok}); code != http.StatusOK {
		t.Fatalf("right token: %d %q", code, body)
	}
	if !unclaimable(t, "tf-s1") {
		t.Error("not cordoned with the right token")
	}
	if code, body, _ := postWith(t, s.URL()+"api/servers/tf-s1/power/on", map[string]string{"authorization": "bearer " + tok}); code != http.StatusOK {
		t.Errorf("power on with the right token: %d %q", code, body)
	}
	var snap Snapshot
	getJSON(t, s.URL()+"api/snapshot", &snap)
	if !strings.Contains(snap.Auth, "--token-file") {
		t.Errorf("snapshot does not tell the page to ask for the token: %q", snap.Auth)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), tok[:12]) {
		t.Errorf("the log shows the token:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "dashboard action refused") || !strings.Contains(logs.String(), `"by"="token-file"`) {
		t.Errorf("the log does not say who acted and who was refused:\n%s", logs.String())
	}
}

// A token file that cannot hold a good token stops the start, naming the file, not its content.
func TestTokenFileRefused(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"empty":      " \n",
		"short":      "short-secret",
		"two tokens": "first-0123456789abcdef\nsecond-0123456789abcdef",
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := New(env.Config, Options{Address: "0.0.0.0:0", AllowActions: true, TokenFile: path}, testr.New(t))
		if err == nil {
			_ = s.ln.Close()
			t.Errorf("%s: started", name)
			continue
		}
		if !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "0123456789") {
			t.Errorf("%s: error %q should name the file and nothing in it", name, err)
		}
	}
	if _, err := New(env.Config, Options{Address: "0.0.0.0:0", AllowActions: true, TokenFile: filepath.Join(dir, "missing")}, testr.New(t)); err == nil {
		t.Error("started with a missing token file")
	}
}

// On loopback without authentication, actions work as before and the page is not told to ask
// for a token; with --token-file there, the token is needed all the same.
func TestLoopbackActions(t *testing.T) {
	create(t, newServer("lb-s1", nil), newServer("lb-s2", nil))
	s := start(t, Options{AllowActions: true})
	var snap Snapshot
	getJSON(t, s.URL()+"api/snapshot", &snap)
	if snap.Auth != "" {
		t.Errorf("loopback without authentication asks for a token: %q", snap.Auth)
	}
	if code, body, _ := postWith(t, s.URL()+"api/servers/lb-s1/cordon", nil); code != http.StatusOK {
		t.Errorf("loopback cordon: %d %q", code, body)
	}
	const tok = "loopback-0123456789-abcdef"
	s = start(t, Options{AllowActions: true, TokenFile: tokenFile(t, tok)})
	if code, body, _ := postWith(t, s.URL()+"api/servers/lb-s2/cordon", nil); code != http.StatusUnauthorized {
		t.Errorf("loopback with --token-file, no token: %d %q", code, body)
	}
	if code, body, _ := postWith(t, s.URL()+"api/servers/lb-s2/cordon", map[string]string{"Authorization": "Bearer " + tok}); code != http.StatusOK {
		t.Errorf("loopback with --token-file and the token: %d %q", code, body)
	}
}

// --allowed-hosts adds names to the listen address's own: a name on any port, name:port on
// that port only.
func TestAllowedHosts(t *testing.T) {
	s := start(t, Options{Address: "0.0.0.0:0", AllowedHosts: []string{"Dash.Example", "proxy.example:8443"}})
	p := port(s)
	for host, want := range map[string]int{
		"dash.example:" + p:  http.StatusOK,
		"dash.example":       http.StatusOK,
		"DASH.example:443":   http.StatusOK,
		"proxy.example:8443": http.StatusOK,
		"proxy.example:" + p: http.StatusForbidden,
		"evil.example:" + p:  http.StatusForbidden,
		"127.0.0.1:" + p:     http.StatusOK,
	} {
		checkHost(t, s, host, want)
	}
	if _, err := New(env.Config, Options{Address: "127.0.0.1:0", AllowedHosts: []string{"http://dash.example/"}}, testr.New(t)); err == nil {
		t.Error("a URL in --allowed-hosts was taken")
	}
}

// Which Host headers each kind of listen address accepts, as the pure function decides.
func TestAddresses(t *testing.T) {
	for _, tc := range []struct {
		addr   net.TCPAddr
		extra  []string
		url    string
		allow  []string
		refuse []string
	}{
		{addr: net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8090}, url: "http://127.0.0.1:8090/",
			allow:  []string{"127.0.0.1:8090", "localhost:8090", "[::1]:8090"},
			refuse: []string{"evil.example:8090", "localhost:8091", "localhost", "10.0.0.5:8090"}},
		{addr: net.TCPAddr{IP: net.IPv6loopback, Port: 8090}, url: "http://[::1]:8090/",
			allow: []string{"[::1]:8090", "localhost:8090"}, refuse: []string{"[::1]:1"}},
		{addr: net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 8090}, url: "http://10.0.0.5:8090/",
			allow:  []string{"10.0.0.5:8090"},
			refuse: []string{"localhost:8090", "127.0.0.1:8090", "evil.example:8090", "10.0.0.5:1"}},
		{addr: net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 80}, url: "http://10.0.0.5:80/",
			allow: []string{"10.0.0.5", "10.0.0.5:80"}},
		{addr: net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 8090}, extra: []string{"dash.example", "[fd00::1]", "proxy.example:443"},
			url:    "http://10.0.0.5:8090/",
			allow:  []string{"dash.example:8090", "dash.example", "[fd00::1]:8090", "proxy.example", "proxy.example:443"},
			refuse: []string{"proxy.example:8090", "example:8090"}},
		{addr: net.TCPAddr{IP: net.IPv4zero, Port: 8090}, url: "http://127.0.0.1:8090/",
			allow: []string{"127.0.0.1:8090", "localhost:8090"}, refuse: []string{"evil.example:8090"}},
	} {
		url, l, err := addresses(&tc.addr, tc.extra)
		if err != nil || url != tc.url {
			t.Errorf("%s: %q %v, want %q", &tc.addr, url, err, tc.url)
		}
		for _, h := range tc.allow {
			if !l.allows(h) {
				t.Errorf("%s %v: refuses Host %s", &tc.addr, tc.extra, h)
			}
		}
		for _, h := range tc.refuse {
			if l.allows(h) {
				t.Errorf("%s %v: allows Host %s", &tc.addr, tc.extra, h)
			}
		}
	}
}

// serviceAccountToken creates a ServiceAccount in default and returns a real token of it.
func serviceAccountToken(t *testing.T, name string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	create(t, sa)
	exp := int64(600)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}
	if err := env.Client.SubResource("token").Create(ctx(), sa, tr); err != nil {
		t.Fatalf("token for %s: %v", name, err)
	}
	return tr.Status.Token
}

// With --token-review, the requester's own Kubernetes token decides: the API server says who
// it is (TokenReview) and whether they may patch that server (SubjectAccessReview). A token
// the API server does not know is a 401; a user without the right, or with it on another
// server only, a 403; the --token-file token works beside it.
func TestTokenReviewAuthorizesActions(t *testing.T) {
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "tr-patch-one"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"metal.ironcore.dev"}, Resources: []string{"servers"}, Verbs: []string{"patch"}, ResourceNames: []string{"tr-s1"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tr-patch-one"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "tr-patch-one"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "tr-operator"}}}
	create(t, role, binding, newServer("tr-s1", nil), newServer("tr-s2", nil))
	operator := serviceAccountToken(t, "tr-operator")
	viewer := serviceAccountToken(t, "tr-viewer")
	const fileTok = "review-file-0123456789-abcdef"
	s := start(t, Options{Address: "0.0.0.0:0", AllowActions: true, TokenReview: true, TokenFile: tokenFile(t, fileTok)})

	cordon := func(server, tok string) (int, string) {
		hdr := map[string]string{}
		if tok != "" {
			hdr["Authorization"] = "Bearer " + tok
		}
		code, body, _ := postWith(t, s.URL()+"api/servers/"+server+"/cordon", hdr)
		return code, body
	}
	for name, tc := range map[string]struct {
		server, tok string
		want        int
	}{
		"no token":                   {"tr-s1", "", http.StatusUnauthorized},
		"unknown token":              {"tr-s1", "not-a-kubernetes-token-0123456789", http.StatusUnauthorized},
		"viewer may not patch":       {"tr-s1", viewer, http.StatusForbidden},
		"operator on another server": {"tr-s2", operator, http.StatusForbidden},
		"operator token cut short":   {"tr-s1", operator[:len(operator)-4], http.StatusUnauthorized},
	} {
		code, body := cordon(tc.server, tc.tok)
		if code != tc.want {
			t.Errorf("%s: %d %q, want %d", name, code, body, tc.want)
		}
		if tc.tok != "" && strings.Contains(body, tc.tok) {
			t.Errorf("%s: the answer shows the token", name)
		}
	}
	if unclaimable(t, "tr-s1") || unclaimable(t, "tr-s2") {
		t.Fatal("cordoned without an allowed token")
	}
	if code, body := cordon("tr-s1", operator); code != http.StatusOK {
		t.Fatalf("operator cordons tr-s1: %d %q", code, body)
	}
	if !unclaimable(t, "tr-s1") {
		t.Error("tr-s1 not cordoned by the operator")
	}
	if code, body := cordon("tr-s2", fileTok); code != http.StatusOK || !unclaimable(t, "tr-s2") {
		t.Errorf("the --token-file token beside --token-review: %d %q", code, body)
	}
	var snap Snapshot
	getJSON(t, s.URL()+"api/snapshot", &snap)
	if !strings.Contains(snap.Auth, "Kubernetes") || !strings.Contains(snap.Auth, "--token-file") {
		t.Errorf("snapshot's prompt %q names neither way in", snap.Auth)
	}
}

// checkHost asks s for its snapshot with the Host header host and wants the status want.
func checkHost(t *testing.T, s *Server, host string, want int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.URL()+"api/snapshot", nil)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != want {
		t.Errorf("Host %s: %s, want %d", host, resp.Status, want)
	}
}

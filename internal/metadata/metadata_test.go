package metadata_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/metadata"
	"github.com/metalhub/metalhub/internal/scheme"
)

func server(name, ip string, claim *metalv1alpha1.ImmutableObjectReference, labels map[string]string) *metalv1alpha1.Server {
	return &metalv1alpha1.Server{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       metalv1alpha1.ServerSpec{SystemUUID: name + "-uuid", ServerClaimRef: claim},
		Status: metalv1alpha1.ServerStatus{NetworkInterfaces: []metalv1alpha1.NetworkInterface{
			{Name: "eth0", MACAddress: "aa:bb:cc:dd:ee:ff", IP: ip, IPs: []string{ip}}}},
	}
}

// TestIPIdentification is the compatibility mode: without a token, the server is the one whose
// reported interfaces hold the source address (metal-operator's behaviour).
func TestIPIdentification(t *testing.T) {
	claimRef := &metalv1alpha1.ImmutableObjectReference{Namespace: "tenant", Name: "web"}
	objs := []client.Object{
		server("claimed", "10.0.0.5", claimRef, map[string]string{metadata.Prefix + "rack": "r1", "other": "x"}),
		server("free", "10.0.0.6", nil, nil),
		server("dup-a", "10.0.0.7", nil, nil),
		server("dup-b", "10.0.0.7", nil, nil),
		&metalv1alpha1.ServerClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "web", Annotations: map[string]string{metadata.Prefix + "role": "frontend"}},
			Spec: metalv1alpha1.ServerClaimSpec{Image: "img", ServerRef: &corev1.LocalObjectReference{Name: "claimed"},
				UserDataRef: &corev1.LocalObjectReference{Name: "web-userdata"}},
		},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "web-userdata"}, Type: "metal.ironcore.dev/user-data",
			Data: map[string][]byte{metadata.UserDataKey: []byte("#cloud-config\nhostname: web\n")}},
	}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).
		WithIndex(&metalv1alpha1.Server{}, metadata.ServerIPIndex, func(o client.Object) []string {
			s := o.(*metalv1alpha1.Server)
			var out []string
			for _, n := range s.Status.NetworkInterfaces {
				out = append(out, n.IPs...)
			}
			return out
		}).Build()
	h := metadata.Handler(c, c, testLogger(t), metadata.Options{IPIdentification: true})
	get := func(path, from string, flavor bool) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = from + ":40000"
		if flavor {
			req.Header.Set(metadata.FlavorHeader, metadata.Flavor)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	for _, tc := range []struct {
		name, path, from string
		flavor           bool
		code             int
		body             string
	}{
		{"user data of the claim", "/user-data", "10.0.0.5", true, 200, "#cloud-config\nhostname: web\n"},
		{"no header", "/user-data", "10.0.0.5", false, http.StatusForbidden, ""},
		{"unknown address", "/user-data", "10.9.9.9", true, http.StatusNotFound, ""},
		{"unclaimed server", "/user-data", "10.0.0.6", true, http.StatusNotFound, ""},
		{"address of two servers", "/metadata", "10.0.0.7", true, http.StatusConflict, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := get(tc.path, tc.from, tc.flavor)
			if w.Code != tc.code || (tc.body != "" && w.Body.String() != tc.body) {
				t.Fatalf("%d %q, want %d %q", w.Code, w.Body.String(), tc.code, tc.body)
			}
		})
	}
	w := get("/metadata", "10.0.0.5", true)
	var doc metadata.Document
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || w.Code != 200 {
		t.Fatalf("metadata: %d %s", w.Code, w.Body.String())
	}
	if doc.Server.Name != "claimed" || doc.Claim == nil || doc.Claim.Name != "web" || doc.Labels["rack"] != "r1" ||
		doc.Labels["other"] != "" || doc.Annotations["role"] != "frontend" {
		t.Fatalf("metadata %+v", doc)
	}
	if got := w.Header().Get(metadata.FlavorHeader); got != metadata.Flavor {
		t.Fatalf("answer flavor %q", got)
	}
}

const (
	tokenA = "token-of-a-0123456789abcdefghijklmnopqrstuv"
	tokenB = "token-of-b-0123456789abcdefghijklmnopqrstuv"
	userA  = "#cloud-config\njoin-token: a-secret\n"
	userB  = "#cloud-config\njoin-token: b-secret\n"
)

// fleet is two claimed servers a and b (claims web-a and web-b, user data each) and a server
// "stale" whose token record is of a claim that has since let it go; ip is where the address
// a reported at discovery is now leased, to another machine.
func fleet(t *testing.T) client.Client {
	t.Helper()
	var objs []client.Object
	for _, x := range []struct{ server, ip, claim, uid, token, user string }{
		{"a", "10.0.0.5", "web-a", "uid-a", tokenA, userA},
		{"b", "10.0.0.6", "web-b", "uid-b", tokenB, userB},
	} {
		s := server(x.server, x.ip, &metalv1alpha1.ImmutableObjectReference{Namespace: "tenant", Name: x.claim}, nil)
		s.Annotations = map[string]string{metadata.TokenAnnotation: metadata.TokenRecord(types.UID(x.uid), x.token)}
		objs = append(objs, s,
			&metalv1alpha1.ServerClaim{
				ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: x.claim, UID: types.UID(x.uid)},
				Spec: metalv1alpha1.ServerClaimSpec{Image: "img", ServerRef: &corev1.LocalObjectReference{Name: x.server},
					UserDataRef: &corev1.LocalObjectReference{Name: x.claim + "-userdata"}},
			},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: x.claim + "-userdata"},
				Data: map[string][]byte{metadata.UserDataKey: []byte(x.user)}})
	}
	stale := server("stale", "10.0.0.8", nil, nil)
	stale.Annotations = map[string]string{metadata.TokenAnnotation: metadata.TokenRecord("uid-gone", "token-of-a-released-claim")}
	// Claimed again, by web-c, before web-c's token was recorded: the old record's token is
	// not web-c's.
	again := server("again", "10.0.0.9", &metalv1alpha1.ImmutableObjectReference{Namespace: "tenant", Name: "web-c"}, nil)
	again.Annotations = map[string]string{metadata.TokenAnnotation: metadata.TokenRecord("uid-gone-too", "token-of-the-claim-before")}
	objs = append(objs, stale, again, &metalv1alpha1.ServerClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "web-c", UID: "uid-c"},
		Spec: metalv1alpha1.ServerClaimSpec{Image: "img", ServerRef: &corev1.LocalObjectReference{Name: "again"},
			UserDataRef: &corev1.LocalObjectReference{Name: "web-a-userdata"}},
	})
	return fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).
		WithIndex(&metalv1alpha1.Server{}, metadata.ServerIPIndex, func(o client.Object) []string {
			return []string{o.(*metalv1alpha1.Server).Status.NetworkInterfaces[0].IP}
		}).
		WithIndex(&metalv1alpha1.Server{}, metadata.ServerTokenIndex, metadata.ServerTokenHash).Build()
}

type request struct {
	path, from, header, query string
}

func serve(h http.Handler, rq request) *httptest.ResponseRecorder {
	u := rq.path
	if rq.query != "" {
		u += "?" + url.Values{metadata.TokenParam: {rq.query}}.Encode()
	}
	req := httptest.NewRequest(http.MethodGet, u, nil)
	req.RemoteAddr = rq.from + ":40000"
	req.Header.Set(metadata.FlavorHeader, metadata.Flavor)
	if rq.header != "" {
		req.Header.Set(metadata.TokenHeader, rq.header)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// TestReleasedAddressGetsNothing: server a reported 10.0.0.5 at discovery and is claimed with
// user data; the address was later leased to another machine, which asks with the flavor
// header and nothing else. It must get nothing of a's (before tokens it got a's join token).
func TestReleasedAddressGetsNothing(t *testing.T) {
	c := fleet(t)
	h := metadata.Handler(c, c, testLogger(t), metadata.Options{})
	for _, path := range []string{"/user-data", "/metadata"} {
		w := serve(h, request{path: path, from: "10.0.0.5"})
		if w.Code != http.StatusForbidden || strings.Contains(w.Body.String(), "a-secret") || strings.Contains(w.Body.String(), `"a"`) {
			t.Errorf("%s from the re-leased address: %d %q, want 403 and nothing of server a", path, w.Code, w.Body.String())
		}
	}
}

// TestTokenIdentification: the token alone names the server, from whatever address; a missing,
// wrong or stale token gets the same refusal, naming no server.
func TestTokenIdentification(t *testing.T) {
	c := fleet(t)
	refused := []string{"a-secret", "b-secret", `"a"`, `"b"`, "stale", "again", "web-"}
	for _, ipMode := range []bool{false, true} {
		h := metadata.Handler(c, c, testLogger(t), metadata.Options{IPIdentification: ipMode})
		for _, tc := range []struct {
			name string
			rq   request
			code int
			body string
		}{
			{"right token in the header", request{path: "/user-data", from: "10.0.0.5", header: tokenA}, 200, userA},
			{"right token as query parameter", request{path: "/user-data", from: "10.0.0.5", query: tokenA}, 200, userA},
			{"token of a from any address", request{path: "/user-data", from: "192.0.2.1", header: tokenA}, 200, userA},
			{"token of a from b's address", request{path: "/user-data", from: "10.0.0.6", header: tokenA}, 200, userA},
			{"token of b from a's address", request{path: "/user-data", from: "10.0.0.5", query: tokenB}, 200, userB},
			{"wrong token from a's address", request{path: "/user-data", from: "10.0.0.5", header: "guess"}, http.StatusForbidden, ""},
			{"wrong token for metadata", request{path: "/metadata", from: "10.0.0.5", query: "guess"}, http.StatusForbidden, ""},
			{"token of a released claim", request{path: "/metadata", from: "10.0.0.8", header: "token-of-a-released-claim"}, http.StatusForbidden, ""},
			{"token of the claim before", request{path: "/user-data", from: "10.0.0.9", header: "token-of-the-claim-before"}, http.StatusForbidden, ""},
		} {
			t.Run(fmt.Sprintf("ipMode=%v/%s", ipMode, tc.name), func(t *testing.T) {
				w := serve(h, tc.rq)
				got := w.Body.String()
				if w.Code != tc.code || (tc.body != "" && got != tc.body) {
					t.Fatalf("%d %q, want %d %q", w.Code, got, tc.code, tc.body)
				}
				if tc.code != 200 {
					for _, leak := range refused {
						if strings.Contains(got, leak) {
							t.Fatalf("refusal %q reveals %q", got, leak)
						}
					}
				}
			})
		}
	}
	// A refusal does not tell a wrong token from a stale one.
	h := metadata.Handler(c, c, testLogger(t), metadata.Options{})
	wrong, stale := serve(h, request{path: "/metadata", from: "10.0.0.8", header: "guess"}), serve(h, request{path: "/metadata", from: "10.0.0.8", header: "token-of-a-released-claim"})
	if wrong.Code != stale.Code || wrong.Body.String() != stale.Body.String() {
		t.Fatalf("wrong token %d %q, stale token %d %q", wrong.Code, wrong.Body.String(), stale.Code, stale.Body.String())
	}
	// The metadata a's token gets is a's.
	w := serve(h, request{path: "/metadata", from: "10.0.0.6", header: tokenA})
	var doc metadata.Document
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || doc.Server.Name != "a" || doc.Claim == nil || doc.Claim.Name != "web-a" {
		t.Fatalf("metadata with a's token: %d %s", w.Code, w.Body.String())
	}
}

// TestAddressWithoutToken: the address alone gets nothing unless IP mode is on.
func TestAddressWithoutToken(t *testing.T) {
	c := fleet(t)
	for _, tc := range []struct {
		ipMode bool
		code   int
		body   string
	}{
		{false, http.StatusForbidden, ""},
		{true, 200, userA},
	} {
		w := serve(metadata.Handler(c, c, testLogger(t), metadata.Options{IPIdentification: tc.ipMode}), request{path: "/user-data", from: "10.0.0.5"})
		if w.Code != tc.code || (tc.body != "" && w.Body.String() != tc.body) {
			t.Errorf("ipMode=%v: %d %q, want %d %q", tc.ipMode, w.Code, w.Body.String(), tc.code, tc.body)
		}
	}
}

func TestTokenSecretName(t *testing.T) {
	long := strings.Repeat("a", 250)
	for _, tc := range []struct{ claim, want string }{
		{"web", "web-metadata-token"},
		{long, ""},
	} {
		got := metadata.TokenSecretName(tc.claim)
		if tc.want != "" && got != tc.want {
			t.Errorf("%s: %s, want %s", tc.claim, got, tc.want)
		}
		if len(got) > 253 || !strings.HasSuffix(got, "-metadata-token") {
			t.Errorf("%d-character claim: %q", len(tc.claim), got)
		}
	}
	if metadata.TokenSecretName(long) == metadata.TokenSecretName(long[:249]+"b") {
		t.Error("two long claims share a token Secret")
	}
}

func TestNewToken(t *testing.T) {
	a, err := metadata.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := metadata.NewToken()
	if a == b || len(a) < 43 || strings.ContainsAny(a, " +/=") {
		t.Fatalf("tokens %q %q", a, b)
	}
}

func testLogger(t *testing.T) logr.Logger { return testr.New(t) }

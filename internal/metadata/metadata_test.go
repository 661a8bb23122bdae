package metadata_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

func TestMetadataService(t *testing.T) {
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
	h := metadata.Handler(c, c, testLogger(t))
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

func testLogger(t *testing.T) logr.Logger { return testr.New(t) }

package metal

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/metadata"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// A claim's boot configuration names its metadata token Secret; the metadata service serves the
// claim's user data for that token and nothing without it; the token is on no object but the
// Secret; deleting the Secret rotates it; the Secret goes with the claim.
func TestClaimMetadataToken(t *testing.T) {
	const ns, name = "default", "mdtoken"
	names, _ := availableServers(t, name, 1, func(int) map[string]string { return map[string]string{"pool": name} })
	const userData = "#cloud-config\njoin-token: mdtoken-secret\n"
	if err := env.Client.Create(ctx(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-userdata"},
		Type: "metal.ironcore.dev/user-data", Data: map[string][]byte{metadata.UserDataKey: []byte(userData)}}); err != nil {
		t.Fatal(err)
	}
	c := selectorClaim(ns, name, metalv1alpha1.PowerOff, &metav1.LabelSelector{MatchLabels: map[string]string{"pool": name}})
	c.Spec.UserDataRef = &corev1.LocalObjectReference{Name: name + "-userdata"}
	if err := env.Client.Create(ctx(), c); err != nil {
		t.Fatal(err)
	}
	waitClaim(t, ns, name, "Bound/Bound", 20*time.Second)

	sbc := getObject(ns, name, &metalv1alpha1.ServerBootConfiguration{})
	if sbc == nil || sbc.Spec.MetadataTokenSecretRef == nil || sbc.Spec.MetadataTokenSecretRef.Name != metadata.TokenSecretName(name) {
		t.Fatalf("boot configuration names no metadata token Secret: %+v", sbc)
	}
	tokenOf := func() string {
		sec := getObject(ns, sbc.Spec.MetadataTokenSecretRef.Name, &corev1.Secret{})
		if sec == nil {
			return ""
		}
		return string(sec.Data[metadata.TokenKey])
	}
	token := tokenOf()
	if len(token) < 43 {
		t.Fatalf("token Secret holds %d bytes", len(token))
	}

	srv := httptest.NewServer(metadata.Handler(mgrClient, env.Client, logr.Discard(), metadata.Options{}))
	defer srv.Close()
	get := func(token string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx(), http.MethodGet, srv.URL+"/user-data", nil)
		req.Header.Set(metadata.FlavorHeader, metadata.Flavor)
		if token != "" {
			req.Header.Set(metadata.TokenHeader, token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	served := func(token string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, "user data served for the token", func() (bool, string) {
			code, body := get(token)
			return code == http.StatusOK && body == userData, fmt.Sprintf("%d %q", code, body)
		})
	}
	served(token)
	if code, body := get(""); code != http.StatusForbidden || strings.Contains(body, "mdtoken-secret") {
		t.Fatalf("without a token: %d %q", code, body)
	}
	s := suite.Server(env, names[0])
	for _, o := range []metav1.Object{s, getClaim(ns, name), sbc} {
		for k, v := range o.GetAnnotations() {
			if strings.Contains(v, token) {
				t.Fatalf("%s: annotation %s holds the token", o.GetName(), k)
			}
		}
	}
	if got, want := s.Annotations[metadata.TokenAnnotation], metadata.TokenRecord(getClaim(ns, name).UID, token); got != want {
		t.Fatalf("server's token record %q, want %q", got, want)
	}

	// Rotation: the Secret deleted, a new token is made and recorded; the old one is refused.
	if err := env.Client.Delete(ctx(), getObject(ns, metadata.TokenSecretName(name), &corev1.Secret{})); err != nil {
		t.Fatal(err)
	}
	var rotated string
	testenv.Eventually(t, 10*time.Second, "a new token", func() (bool, string) {
		rotated = tokenOf()
		return rotated != "" && rotated != token, rotated
	})
	served(rotated)
	if code, _ := get(token); code != http.StatusForbidden {
		t.Fatalf("the rotated-out token: %d, want 403", code)
	}

	// The claim gone, its token Secret is gone with it (not only once a garbage collector
	// comes by), and the token no longer serves anything.
	if err := env.Client.Delete(ctx(), getClaim(ns, name)); err != nil {
		t.Fatal(err)
	}
	waitClaimGone(t, ns, name, 20*time.Second)
	if sec := getObject(ns, metadata.TokenSecretName(name), &corev1.Secret{}); sec != nil {
		t.Fatalf("token Secret %s outlived its claim", sec.Name)
	}
	testenv.Eventually(t, 10*time.Second, "the token of the gone claim refused", func() (bool, string) {
		code, body := get(rotated)
		return code == http.StatusForbidden, fmt.Sprintf("%d %q", code, body)
	})
	checkNoDoubleWrites(t)
}

package target

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
)

func TestHostLabelValues(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string
		err  bool
	}{
		{url: "https://infrahub-server.infrahub.orb.local", want: "infrahub-server.infrahub.orb.local"},
		{url: "http://127.0.0.1:8300", want: "127.0.0.1_8300,127.0.0.1"},
		{url: "https://K8S.example.com:6443/prefix", want: "k8s.example.com_6443,k8s.example.com"},
		{url: "not a url", err: true},
	} {
		got, err := HostLabelValues(tc.url)
		if (err != nil) != tc.err || strings.Join(got, ",") != tc.want {
			t.Errorf("%s: %v %v, want %s (err %v)", tc.url, got, err, tc.want, tc.err)
		}
	}
	if !IsLocal("") || !IsLocal("https://kubernetes.default.svc") || IsLocal("https://10.0.0.1:6443") {
		t.Fatal("isLocal")
	}
}

func configMapObject(ownedBy string) metav1.Object {
	m := &metav1.ObjectMeta{Name: "cm"}
	if ownedBy != "" {
		m.Annotations = map[string]string{manifests.OwnedByAnnotation: ownedBy}
	}
	return m
}

func TestOwnersOf(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  string
	}{
		{"vr", "vr"},
		{"vr,vr,vr", "vr"}, // grown by the reference (defect 6): still one owner
		{"", ""},
		{"other", "other"},
		{"vr, other,vr", "vr,other"}, // shared
	} {
		cm := configMapObject(tc.value)
		if got := strings.Join(OwnersOf(cm), ","); got != tc.want {
			t.Errorf("owned-by %q: owners %q, want %q", tc.value, got, tc.want)
		}
	}
}

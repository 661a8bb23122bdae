package fleetops

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
)

func withAnnotations(a map[string]string) *metalv1alpha1.Server {
	return &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Annotations: a}}
}

func TestPending(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    map[string]string
		want string
	}{
		{"nothing", nil, ""},
		{"asked for", map[string]string{metalv1alpha1.OperationAnnotation: "force-off-server"}, "force-off-server"},
		{"taken up", map[string]string{intent.Annotation: "graceful-restart-server/issuing@17 by=cli-1"}, "graceful-restart-server"},
		{"being checked", map[string]string{intent.Annotation: "hard-restart-server/checking@17"}, "hard-restart-server"},
		{"only a result", map[string]string{intent.ResultAnnotation: "cli-1 done"}, ""},
	} {
		if got := Pending(withAnnotations(tc.a)); got != tc.want {
			t.Errorf("%s: Pending = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestOutcome(t *testing.T) {
	s := withAnnotations(map[string]string{intent.ResultAnnotation: "fw-a done, cli-1 refused,cli-12 uncertain"})
	for _, tc := range []struct {
		token, want string
		ok          bool
	}{
		{"cli-1", "refused", true},
		{"cli-12", "uncertain", true},
		{"fw-a", "done", true},
		{"cli", "", false},
		{"cli-2", "", false},
	} {
		got, ok := Outcome(s, tc.token)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Outcome(%q) = %q %v, want %q %v", tc.token, got, ok, tc.want, tc.ok)
		}
	}
}

package delivery

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/policy"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

func TestLimitsPerSync(t *testing.T) {
	t.Parallel()
	flags := policy.Limits{MaxArtifacts: 100, MaxSyncBytes: 1 << 20}.WithDefaults()
	for _, tc := range []struct {
		ann       map[string]string
		wantArts  int
		wantBytes int64
	}{
		{nil, 100, 1 << 20},
		{map[string]string{infrahubv1alpha1.MaxArtifactsAnnotation: "10", infrahubv1alpha1.MaxSyncBytesAnnotation: "4096"}, 10, 4096},
		// An annotation never raises what the admin set.
		{map[string]string{infrahubv1alpha1.MaxArtifactsAnnotation: "100000", infrahubv1alpha1.MaxSyncBytesAnnotation: "99999999999"}, 100, 1 << 20},
		{map[string]string{infrahubv1alpha1.MaxArtifactsAnnotation: "-1", infrahubv1alpha1.MaxSyncBytesAnnotation: "lots"}, 100, 1 << 20},
	} {
		s := &infrahubv1alpha1.InfrahubSync{}
		s.Annotations = tc.ann
		got := flags.ForSync(s)
		if got.MaxArtifacts != tc.wantArts || got.MaxSyncBytes != tc.wantBytes {
			t.Errorf("annotations %v: %d artifacts, %d bytes; want %d, %d", tc.ann, got.MaxArtifacts, got.MaxSyncBytes, tc.wantArts, tc.wantBytes)
		}
	}
	if err := policy.TooManyArtifacts(100, flags); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	if reason, _ := lifecycle.ReasonOf(policy.TooManyArtifacts(101, flags)); reason != infrahubv1alpha1.ReasonTooManyArtifacts {
		t.Fatalf("past the limit: reason %q", reason)
	}
	b := policy.NewByteBudget(10)
	if b.Take("a", 6) != nil || b.Take("b", 4) != nil {
		t.Fatal("within the budget refused")
	}
	if reason, _ := lifecycle.ReasonOf(b.Take("c", 1)); reason != infrahubv1alpha1.ReasonSyncTooLarge {
		t.Fatalf("past the budget: reason %q", reason)
	}
}

// Issue 24, finding 3: one tenant's sync cannot make the operator keep an unbounded number of
// artifacts or bytes: past the limits it fails, says which, and changes nothing.
func TestSyncLimitsRefuseAndSayWhy(t *testing.T) {
	startManager(t, fastOptions())
	e, url := startInfrahub(t, nil, "many", "heavy")
	ns := namespace(t)
	for i := range 5 {
		_, _ = e.AddArtifact("", "many", "", []byte(configMapYAML(fmt.Sprintf("many-%d", i), "", "1")))
	}
	newSync(t, "many", url, "many", ns, func(s *infrahubv1alpha1.InfrahubSync) {
		s.Annotations = map[string]string{infrahubv1alpha1.MaxArtifactsAnnotation: "4"}
	})
	s := waitSync(t, "many", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonTooManyArtifacts, 30*time.Second)
	if !strings.Contains(s.Status.LastError, "names 5 artifacts, more than the 4") {
		t.Fatalf("lastError %q", s.Status.LastError)
	}
	var list infrahubv1alpha1.VidraResourceList
	if err := env.Client.List(context.Background(), &list, client.MatchingLabels{manifests.SyncLabel: "many"}); err != nil || len(list.Items) != 0 {
		t.Fatalf("%d VidraResources made past the limit (%v)", len(list.Items), err)
	}

	big := strings.Repeat("x", 3000)
	for i := range 2 {
		_, _ = e.AddArtifact("", "heavy", "", []byte(configMapYAML(fmt.Sprintf("heavy-%d", i), "", big)))
	}
	newSync(t, "heavy", url, "heavy", ns, func(s *infrahubv1alpha1.InfrahubSync) {
		s.Annotations = map[string]string{infrahubv1alpha1.MaxSyncBytesAnnotation: "4000"}
	})
	s = waitSync(t, "heavy", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonSyncTooLarge, 30*time.Second)
	if !strings.Contains(s.Status.LastError, "past 4000 bytes") {
		t.Fatalf("lastError %q", s.Status.LastError)
	}
}

package discovery

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

func TestFresh(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		want        bool
	}{
		{"no round", nil, false},
		{"round, nothing reported", map[string]string{RoundAnnotation: "r2"}, false},
		{"report of an earlier round", map[string]string{RoundAnnotation: "r2", ReportedAnnotation: "r1"}, false},
		{"report of this round", map[string]string{RoundAnnotation: "r2", ReportedAnnotation: "r2"}, true},
		{"report without a round", map[string]string{ReportedAnnotation: ""}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations}}
			if got := Fresh(s); got != tc.want {
				t.Fatalf("Fresh = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNewRoundIsUnique(t *testing.T) {
	r1, t1, err := NewRound()
	if err != nil {
		t.Fatal(err)
	}
	r2, t2, _ := NewRound()
	if r1 == r2 || t1 == t2 || len(t1) < 32 {
		t.Fatalf("rounds not unique or token too short: %s/%s %s/%s", r1, t1, r2, t2)
	}
}

package bmcuser

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

// What a BMCUser made: its record; without one, the account a BMCUser from before the record
// set (it has AccountAppliedAnnotation); else nothing.
func TestMadeAccounts(t *testing.T) {
	applied := appliedRecord{bmcUID: "uid-1", secretUID: "s", secretVersion: "1", role: "ReadOnly", at: time.Unix(1700000000, 0)}.String()
	spec := metalv1alpha1.BMCUserSpec{UserName: "now", BMCRef: &corev1.LocalObjectReference{Name: "b"}}
	for _, tc := range []struct {
		name     string
		ann      map[string]string
		want     string
		recorded bool
	}{
		{"new BMCUser", nil, "[]", false},
		{"recorded", map[string]string{AccountsAnnotation: `[{"bmc":"a","uid":"u","user":"x"},{"bmc":"b","uid":"v","user":"now"}]`, AccountAppliedAnnotation: applied},
			"[{a u x} {b v now}]", true},
		{"recorded empty", map[string]string{AccountsAnnotation: `[]`, AccountAppliedAnnotation: applied}, "[]", true},
		{"from before the record", map[string]string{AccountAppliedAnnotation: applied}, "[{b uid-1 now}]", false},
		{"unreadable record", map[string]string{AccountsAnnotation: `{`, AccountAppliedAnnotation: applied}, "[{b uid-1 now}]", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &metalv1alpha1.BMCUser{ObjectMeta: metav1.ObjectMeta{Annotations: tc.ann}, Spec: spec}
			made, recorded := madeAccounts(u)
			if got := fmt.Sprint(made); got != tc.want || recorded != tc.recorded {
				t.Errorf("got %s %v, want %s %v", got, recorded, tc.want, tc.recorded)
			}
		})
	}
}

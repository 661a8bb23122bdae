package server

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
)

// A deleted Server wakes the Servers that share its system UUID (however it is spelt), and no
// other: they stopped acting because of it, and go on at once rather than at their next resync.
func TestTwinsOfGone(t *testing.T) {
	uuid := func(u string) func(*metalv1alpha1.Server) {
		return func(s *metalv1alpha1.Server) { s.Spec.SystemUUID = u }
	}
	uid := func(u string) func(*metalv1alpha1.Server) {
		return func(s *metalv1alpha1.Server) { s.UID = types.UID(u) }
	}
	gone := metaltest.FreeServer("gone", nil, uuid("aaaa-1111"), uid("g"))
	c := metaltest.FakeClient(
		metaltest.FreeServer("twin", nil, uuid("{AAAA-1111}"), uid("t")),
		metaltest.FreeServer("other", nil, uuid("bbbb-2222"), uid("o")),
	)
	for _, tc := range []struct {
		name   string
		server *metalv1alpha1.Server
		want   []string
	}{
		{"a twin is woken", gone, []string{"twin"}},
		{"no twin, nothing", metaltest.FreeServer("alone", nil, uuid("cccc-3333"), uid("a")), nil},
		{"no UUID, nothing", metaltest.FreeServer("blank", nil, uuid(""), uid("b")), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range twinsOfGone(c)(ctx(), tc.server) {
				got = append(got, r.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("woken %v, want %v", got, tc.want)
			}
		})
	}
}

package claim

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// The in-memory bind lock: a server one claim is binding is skipped by every other claim's
// pass (on the same lagging cache) until that claim lets go or its binding is recorded; the
// claim itself may take it again.
func TestBindLock(t *testing.T) {
	const a, b types.UID = "claim-a", "claim-b"
	type step struct {
		do     func(r *Reconciler) bool
		want   bool
		detail string
	}
	lock := func(server string, c types.UID) func(*Reconciler) bool {
		return func(r *Reconciler) bool { return r.lock(server, c) }
	}
	other := func(server string, c types.UID) func(*Reconciler) bool {
		return func(r *Reconciler) bool { return r.lockedByOther(server, c) }
	}
	unlock := func(server string, c types.UID) func(*Reconciler) bool {
		return func(r *Reconciler) bool { r.unlock(server, c); return true }
	}
	record := func(server string, c types.UID) func(*Reconciler) bool {
		return func(r *Reconciler) bool { r.recordBind(c, server, "41"); return true }
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"one claim at a time", []step{
			{lock("s1", a), true, "a locks s1"},
			{other("s1", b), true, "b sees s1 taken"},
			{lock("s1", b), false, "b cannot lock s1"},
			{other("s1", a), false, "a does not block itself"},
			{lock("s1", a), true, "a may lock s1 again"},
			{lock("s2", b), true, "b locks another server"},
		}},
		{"only the holder unlocks", []step{
			{lock("s1", a), true, "a locks s1"},
			{unlock("s1", b), true, "b unlocks s1 (no effect)"},
			{lock("s1", b), false, "b still cannot lock s1"},
			{unlock("s1", a), true, "a unlocks s1"},
			{lock("s1", b), true, "b locks s1"},
		}},
		{"a recorded binding holds the server", []step{
			{record("s1", a), true, "a's binding of s1 recorded"},
			{other("s1", b), true, "b sees s1 taken"},
			{lock("s1", b), false, "b cannot lock s1"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{}
			r.init()
			for _, s := range tc.steps {
				if got := s.do(r); got != s.want {
					t.Fatalf("%s: got %v, want %v", s.detail, got, s.want)
				}
			}
		})
	}
}

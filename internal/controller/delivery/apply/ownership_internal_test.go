package apply

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

func TestOwnedBy(t *testing.T) {
	s := &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: "s", UID: "u1"}}
	ref := func(mutate func(*metav1.OwnerReference)) []metav1.OwnerReference {
		r := metav1.OwnerReference{APIVersion: "infrahub.operators.com/v1alpha1", Kind: "InfrahubSync", Name: "s", UID: "u1", Controller: ptr.To(true)}
		mutate(&r)
		return []metav1.OwnerReference{r}
	}
	for _, tc := range []struct {
		name  string
		refs  []metav1.OwnerReference
		refOK bool // SyncRefOf reads a sync's reference
		want  bool // and it is s's
	}{
		{"the sync's controller reference", ref(func(*metav1.OwnerReference) {}), true, true},
		{"no owner", nil, false, false},
		{"another version of the group", ref(func(r *metav1.OwnerReference) { r.APIVersion = "infrahub.operators.com/v1beta1" }), false, false},
		{"another group", ref(func(r *metav1.OwnerReference) { r.APIVersion = "evil.example/v1" }), false, false},
		{"no group", ref(func(r *metav1.OwnerReference) { r.APIVersion = "v1alpha1" }), false, false},
		{"another kind", ref(func(r *metav1.OwnerReference) { r.Kind = "VidraResource" }), false, false},
		{"kind in another case", ref(func(r *metav1.OwnerReference) { r.Kind = "infrahubsync" }), false, false},
		{"another UID", ref(func(r *metav1.OwnerReference) { r.UID = "u2" }), true, false},
		{"another name, same UID", ref(func(r *metav1.OwnerReference) { r.Name = "t" }), true, false},
		{"not the controller", ref(func(r *metav1.OwnerReference) { r.Controller = nil }), false, false},
		{"controller false", ref(func(r *metav1.OwnerReference) { r.Controller = ptr.To(false) }), false, false},
		{"a plain owner beside another controller", append(ref(func(r *metav1.OwnerReference) { r.Controller = nil }),
			metav1.OwnerReference{APIVersion: "evil.example/v1", Kind: "InfrahubSync", Name: "s", UID: "u1", Controller: ptr.To(true)}), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vr := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "vr", OwnerReferences: tc.refs}}
			if got := OwnedBy(vr, s); got != tc.want {
				t.Errorf("OwnedBy = %v, want %v", got, tc.want)
			}
			if _, _, ok := SyncRefOf(vr); ok != tc.refOK {
				t.Errorf("SyncRefOf ok = %v, want %v", ok, tc.refOK)
			}
		})
	}
	if OwnedBy(&infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{OwnerReferences: ref(func(r *metav1.OwnerReference) { r.UID = "" })}},
		&infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: "s"}}) {
		t.Error("an empty UID on both sides counted as ownership")
	}
	if OwnedBy(&infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{OwnerReferences: ref(func(*metav1.OwnerReference) {})}}, nil) {
		t.Error("a nil sync owns something")
	}
}

func TestHandoverRefusal(t *testing.T) {
	s := &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: "s", UID: "su"}}
	other := &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: "o", UID: "ou"}}
	of := func(sync *infrahubv1alpha1.InfrahubSync, apiVersion string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: "InfrahubSync", Name: sync.Name, UID: sync.UID, Controller: ptr.To(true)}}
	}
	const gv = "infrahub.operators.com/v1alpha1"
	vr := func(name, uid string, refs []metav1.OwnerReference) *infrahubv1alpha1.VidraResource {
		return &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid), OwnerReferences: refs,
			Annotations: map[string]string{infrahubv1alpha1.HandoverAnnotation: "old:ou1"}}}
	}
	for _, tc := range []struct {
		name     string
		next     *infrahubv1alpha1.VidraResource
		from     *infrahubv1alpha1.VidraResource
		sync     *infrahubv1alpha1.InfrahubSync
		uid      string
		refusing string // "" for honoured
	}{
		{"both of the sync", vr("new", "n1", of(s, gv)), vr("old", "ou1", of(s, gv)), s, "ou1", ""},
		{"made by hand", vr("new", "n1", nil), vr("old", "ou1", of(s, gv)), nil, "ou1", "this one is of none"},
		{"its sync is gone", vr("new", "n1", of(s, gv)), vr("old", "ou1", of(s, gv)), nil, "ou1", "this one is of none"},
		{"a reference of another version", vr("new", "n1", of(s, "infrahub.operators.com/v1beta1")), vr("old", "ou1", of(s, gv)), s, "ou1", "this one is of none"},
		{"the source of another sync", vr("new", "n1", of(s, gv)), vr("old", "ou1", of(other, gv)), s, "ou1", "not of InfrahubSync s"},
		{"the source made by hand", vr("new", "n1", of(s, gv)), vr("old", "ou1", nil), s, "ou1", "not of InfrahubSync s"},
		{"the source's reference of another group", vr("new", "n1", of(s, gv)), vr("old", "ou1", of(s, "evil.example/v1")), s, "ou1", "not of InfrahubSync s"},
		{"the source gone", vr("new", "n1", of(s, gv)), nil, s, "ou1", "which is gone"},
		{"a namesake of the source", vr("new", "n1", of(s, gv)), vr("old", "ou2", of(s, gv)), s, "ou1", "it has uid ou2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := HandoverRefusal(tc.next, tc.from, tc.sync, tc.uid)
			switch {
			case tc.refusing == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refusing != "" && (err == nil || !strings.Contains(err.Error(), tc.refusing)):
				t.Errorf("got %v, want a refusal saying %q", err, tc.refusing)
			}
		})
	}
}

package apply

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/infrahub"
)

func TestDecidePrune(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const settle = time.Minute
	doomed, survivors := []string{"b", "c", "d"}, []string{"a"}
	token := pruneToken(doomed, survivors)
	sync := func(ann map[string]string) *infrahubv1alpha1.InfrahubSync {
		return &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: "s", Annotations: ann}}
	}
	pending := func(tok string, ago time.Duration) string { return tok + "@" + now.Add(-ago).Format(time.RFC3339) }
	cases := []struct {
		name       string
		ann        map[string]string
		doomed     []string
		total      int
		hold       bool
		wantRecord bool
		noAgree    bool // --delivery-prune-auto-release off: settle 0
	}{
		{"nothing to delete", nil, nil, 4, false, false, false},
		{"within the fraction", nil, []string{"b", "c"}, 4, false, false, false},
		{"beyond: first answer held and recorded", nil, doomed, 4, true, true, false},
		{"beyond: exact confirmation releases", map[string]string{infrahubv1alpha1.ConfirmPruneAnnotation: token}, doomed, 4, false, false, false},
		{"beyond: confirmation of another prune does not", map[string]string{infrahubv1alpha1.ConfirmPruneAnnotation: pruneToken([]string{"b", "c"}, []string{"a", "d"})}, doomed, 4, true, true, false},
		{"beyond: same count, other resources, does not", map[string]string{infrahubv1alpha1.ConfirmPruneAnnotation: pruneToken([]string{"a", "b", "c"}, []string{"d"})}, doomed, 4, true, true, false},
		{"beyond: second agreeing answer after settle releases", map[string]string{infrahubv1alpha1.PrunePendingAnnotation: pending(token, settle)}, doomed, 4, false, false, false},
		{"beyond: agreeing too soon holds, not rewritten", map[string]string{infrahubv1alpha1.PrunePendingAnnotation: pending(token, settle/2)}, doomed, 4, true, false, false},
		{"beyond: another answer recorded is rewritten", map[string]string{infrahubv1alpha1.PrunePendingAnnotation: pending("3-000000000000", time.Hour)}, doomed, 4, true, true, false},
		{"beyond: malformed record is rewritten", map[string]string{infrahubv1alpha1.PrunePendingAnnotation: token}, doomed, 4, true, true, false},
		{"beyond, no auto-release: an agreeing answer an hour on holds", map[string]string{infrahubv1alpha1.PrunePendingAnnotation: pending(token, time.Hour)}, doomed, 4, true, false, true},
		{"beyond, no auto-release: exact confirmation releases", map[string]string{infrahubv1alpha1.ConfirmPruneAnnotation: token}, doomed, 4, false, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := settle
			if c.noAgree {
				st = 0
			}
			d := DecidePrune(sync(c.ann), PruneStake{Doomed: c.doomed, Total: c.total}, survivors, 0.5, now, st)
			if d.Hold != c.hold || (d.Record != "") != c.wantRecord {
				t.Fatalf("decision %+v, want hold %v record %v", d, c.hold, c.wantRecord)
			}
			if d.Record != "" && d.Record != token+"@"+now.Format(time.RFC3339) {
				t.Fatalf("record %q", d.Record)
			}
		})
	}
	// Objects count as well as VidraResources: one VidraResource of four holding most of the
	// objects, or artifacts re-issued without their objects (no VidraResource deleted at all).
	for _, c := range []struct {
		name  string
		stake PruneStake
		hold  bool
	}{
		{"few resources, few objects", PruneStake{Doomed: []string{"b"}, Total: 4, Objects: 1, ObjectsTotal: 4}, false},
		{"few resources, most objects", PruneStake{Doomed: []string{"b"}, Total: 4, Objects: 90, ObjectsTotal: 100}, true},
		{"re-issued without their objects", PruneStake{Lossy: []string{"a", "b"}, Total: 4, Objects: 2, ObjectsTotal: 2}, true},
		{"re-issued, one object of many lost", PruneStake{Lossy: []string{"a"}, Total: 4, Objects: 1, ObjectsTotal: 100}, false},
	} {
		if d := DecidePrune(sync(nil), c.stake, survivors, 0.5, now, settle); d.Hold != c.hold {
			t.Errorf("%s: decision %+v, want hold %v", c.name, d, c.hold)
		}
	}
	if got := MaxFraction(0.5, sync(map[string]string{infrahubv1alpha1.PruneMaxFractionAnnotation: "0.1"})); got != 0.1 {
		t.Errorf("lowered fraction %g", got)
	}
	if got := MaxFraction(0.5, sync(map[string]string{infrahubv1alpha1.PruneMaxFractionAnnotation: "0.9"})); got != 0.5 {
		t.Errorf("a sync raised the fraction to %g", got)
	}
}

func TestPairRenamed(t *testing.T) {
	vr := func(name, artifact, sum string) *infrahubv1alpha1.VidraResource {
		return &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name),
			Annotations: map[string]string{manifests.ArtifactNameAnnotation: artifact, manifests.ChecksumAnnotation: sum}}}
	}
	art := func(id, name, sum string) infrahub.Artifact {
		return infrahub.Artifact{ID: id, Name: name, Checksum: sum}
	}
	cases := []struct {
		name  string
		owned []*infrahubv1alpha1.VidraResource
		arts  []infrahub.Artifact
		want  map[string]string // new id -> old VidraResource
	}{
		{"same name and checksum", []*infrahubv1alpha1.VidraResource{vr("old", "web", "s1")}, []infrahub.Artifact{art("new", "web", "s1")}, map[string]string{"new": "old"}},
		{"only one of the name on both sides", []*infrahubv1alpha1.VidraResource{vr("old", "web", "s1")}, []infrahub.Artifact{art("new", "web", "s2")}, map[string]string{"new": "old"}},
		{"other name", []*infrahubv1alpha1.VidraResource{vr("old", "web", "s1")}, []infrahub.Artifact{art("new", "db", "s1")}, map[string]string{}},
		{"still in the result", []*infrahubv1alpha1.VidraResource{vr("old", "web", "s1")}, []infrahub.Artifact{art("old", "web", "s1"), art("new", "web", "s1")}, map[string]string{}},
		{"shared name: paired by checksum", []*infrahubv1alpha1.VidraResource{vr("o1", "web", "s1"), vr("o2", "web", "s2")},
			[]infrahub.Artifact{art("n2", "web", "s2"), art("n1", "web", "s1")}, map[string]string{"n1": "o1", "n2": "o2"}},
		{"shared name, new content: ambiguous, not paired", []*infrahubv1alpha1.VidraResource{vr("o1", "web", "s1"), vr("o2", "web", "s2")},
			[]infrahub.Artifact{art("n1", "web", "x1"), art("n2", "web", "x2")}, map[string]string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			owned := map[string]*infrahubv1alpha1.VidraResource{}
			for _, v := range c.owned {
				owned[v.Name] = v
			}
			got := PairRenamed(c.arts, owned)
			if len(got) != len(c.want) {
				t.Fatalf("pairs %v, want %v", got, c.want)
			}
			for id, old := range c.want {
				if got[id] == nil || got[id].Name != old {
					t.Fatalf("pairs %v, want %v", got, c.want)
				}
			}
		})
	}
}

func TestOwnerMarks(t *testing.T) {
	self := OwnerMark{Name: "web", UID: "u2"}
	cases := []struct {
		name            string
		ownedBy, uids   string
		want            bool
		wantParsedCount int
	}{
		{"name and UID", "web", "web=u2", true, 1},
		{"name only (Vidra's mark)", "web", "", true, 0},
		{"namesake predecessor", "web", "web=u1", false, 1},
		{"shared, ours recorded", "db,web", "db=u9,web=u2", true, 2},
		{"shared, ours by name only", "db,web", "db=u9", true, 1},
		{"another's", "db", "db=u9", false, 1},
		{"malformed uids ignored", "web", "web,=x,y=", true, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
				manifests.OwnedByAnnotation: c.ownedBy, infrahubv1alpha1.OwnerUIDsAnnotation: c.uids}}}
			if got := MarksOwner(o, self); got != c.want {
				t.Errorf("marksOwner = %v, want %v", got, c.want)
			}
			if got := len(OwnerUIDsOf(o)); got != c.wantParsedCount {
				t.Errorf("ownerUIDsOf = %v", OwnerUIDsOf(o))
			}
		})
	}
	names, uids := markAnnotations([]OwnerMark{{"a", "1"}, {"b", ""}, {"c", "3"}})
	if names != "a,b,c" || uids != "a=1,c=3" {
		t.Errorf("markAnnotations = %q, %q", names, uids)
	}
}

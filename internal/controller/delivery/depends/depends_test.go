package depends

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

func deps(names ...string) []infrahubv1alpha1.Dependency {
	out := make([]infrahubv1alpha1.Dependency, len(names))
	for i, n := range names {
		out[i] = infrahubv1alpha1.Dependency{Name: n}
	}
	return out
}

func sync(name string, gen, observed int64, state infrahubv1alpha1.State, healthy, total int32, on ...string) *infrahubv1alpha1.InfrahubSync {
	s := &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: gen}}
	s.Spec.DependsOn = deps(on...)
	s.Status = infrahubv1alpha1.InfrahubSyncStatus{ObservedGeneration: observed, SyncState: state,
		Resources: infrahubv1alpha1.ResourcesSummary{Total: total, Succeeded: total, Healthy: healthy}}
	return s
}

func reader(t *testing.T, objs ...client.Object) client.Reader {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := infrahubv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

// A dependency is ready once it reports on its generation, Succeeded, every VidraResource
// healthy; the first that is not is named with why.
func TestCheck(t *testing.T) {
	r := reader(t,
		sync("crds", 2, 2, infrahubv1alpha1.StateSucceeded, 3, 3),
		sync("unhealthy", 1, 1, infrahubv1alpha1.StateSucceeded, 1, 2),
		sync("behind", 3, 2, infrahubv1alpha1.StateSucceeded, 1, 1),
		sync("running", 1, 1, infrahubv1alpha1.StateRunning, 0, 1),
		sync("fresh", 1, 0, "", 0, 0),
	)
	for _, tc := range []struct {
		on   []string
		name string // "" when ready
		why  string
	}{
		{on: []string{"crds"}},
		{on: nil},
		{on: []string{"crds", "unhealthy"}, name: "unhealthy", why: "has 1 of 2 VidraResources healthy"},
		{on: []string{"behind"}, name: "behind", why: "has not reported on its generation 3 yet"},
		{on: []string{"running", "crds"}, name: "running", why: "is Running"},
		{on: []string{"missing"}, name: "missing", why: "does not exist"},
		{on: []string{"fresh"}, name: "fresh", why: "has not reported on its generation 1 yet"},
	} {
		nr, err := Check(context.Background(), r, deps(tc.on...))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case tc.name == "" && nr != nil:
			t.Errorf("%v: not ready %v", tc.on, nr)
		case tc.name != "" && (nr == nil || nr.Name != tc.name || !strings.HasPrefix(nr.Why, tc.why)):
			t.Errorf("%v: %v, want %s %s", tc.on, nr, tc.name, tc.why)
		}
	}
}

// A cycle through the sync is found and named in order, whether the sync's own new
// dependencies close it or not; one among other syncs is theirs.
func TestCycle(t *testing.T) {
	g := Graph{"a": {"b"}, "b": {"c"}, "c": nil, "x": {"y"}, "y": {"x"}, "d": {"a", "c"}}
	for _, tc := range []struct {
		start string
		on    []string
		want  string
	}{
		{"c", []string{"a"}, "c → a → b → c"},
		{"c", nil, ""},
		{"a", []string{"a"}, "a → a"},
		{"b", []string{"c", "d"}, "b → d → a → b"},
		{"a", []string{"x"}, ""},
		{"new", []string{"a", "d"}, ""},
	} {
		if got := Describe(g.Cycle(tc.start, deps(tc.on...))); got != tc.want {
			t.Errorf("%s on %v: cycle %q, want %q", tc.start, tc.on, got, tc.want)
		}
	}
	if got := g.Dependents("a"); strings.Join(got, ",") != "d" {
		t.Errorf("dependents of a %v", got)
	}
}

// Package depends decides whether the InfrahubSyncs an object depends on (spec.dependsOn) are
// ready for it, and finds dependency cycles. A sync is ready for its dependents once its status
// reports on its current generation, it is Succeeded, and every one of its VidraResources is
// Healthy: a CRD its artifact carries is Established, a Deployment available, before anything
// that needs it is applied.
//
// It reads InfrahubSyncs through the reader it is given (the manager's cache) and writes
// nothing. The sync and VidraResource controllers gate on Check; the admission webhook refuses
// a cycle with Cycle, and the controllers report one all the same where no webhook runs.
package depends

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

// NotReady is why a dependency holds its dependent back.
type NotReady struct {
	// Name is the dependency's.
	Name string
	// Why says what it lacks, for people.
	Why string
}

func (n *NotReady) Error() string { return "InfrahubSync " + n.Name + " " + n.Why }

// Check reports the first dependency of deps that is not ready (nil when all are). An error is
// a read that failed, not a dependency that is not ready.
func Check(ctx context.Context, r client.Reader, deps []infrahubv1alpha1.Dependency) (*NotReady, error) {
	for _, d := range deps {
		s := &infrahubv1alpha1.InfrahubSync{}
		err := r.Get(ctx, client.ObjectKey{Name: d.Name}, s)
		if apierrors.IsNotFound(err) {
			return &NotReady{Name: d.Name, Why: "does not exist"}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading InfrahubSync %s that this depends on: %w", d.Name, err)
		}
		if why := notReady(s); why != "" {
			return &NotReady{Name: d.Name, Why: why}, nil
		}
	}
	return nil, nil
}

// notReady says why a sync is not ready for its dependents ("" when it is).
func notReady(s *infrahubv1alpha1.InfrahubSync) string {
	st := s.Status
	switch {
	case !s.DeletionTimestamp.IsZero():
		return "is being deleted"
	case st.ObservedGeneration != s.Generation:
		return fmt.Sprintf("has not reported on its generation %d yet", s.Generation)
	case st.SyncState != infrahubv1alpha1.StateSucceeded:
		why := "is " + string(cmpOr(st.SyncState, infrahubv1alpha1.StatePending))
		if c := meta.FindStatusCondition(st.Conditions, infrahubv1alpha1.ConditionReady); c != nil && c.Message != "" {
			why += ": " + c.Message
		}
		return why
	case st.Resources.Healthy < st.Resources.Total:
		return fmt.Sprintf("has %d of %d VidraResources healthy", st.Resources.Healthy, st.Resources.Total)
	}
	return ""
}

func cmpOr(s, def infrahubv1alpha1.State) infrahubv1alpha1.State {
	if s == "" {
		return def
	}
	return s
}

// Graph is every InfrahubSync's dependencies, by name.
type Graph map[string][]string

// Load reads the graph of all InfrahubSyncs.
func Load(ctx context.Context, r client.Reader) (Graph, error) {
	var list infrahubv1alpha1.InfrahubSyncList
	if err := r.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing InfrahubSyncs for their dependencies: %w", err)
	}
	g := Graph{}
	for _, s := range list.Items {
		g[s.Name] = names(s.Spec.DependsOn)
	}
	return g, nil
}

func names(deps []infrahubv1alpha1.Dependency) []string {
	out := make([]string, len(deps))
	for i, d := range deps {
		out[i] = d.Name
	}
	return out
}

// Cycle returns a cycle through start, as start → … → start, if following deps (start's own,
// which replace what g holds for it) leads back to start; nil when none does. A cycle among
// other syncs that does not pass through start is theirs to report.
func (g Graph) Cycle(start string, deps []infrahubv1alpha1.Dependency) []string {
	next := func(n string) []string {
		if n == start {
			return names(deps)
		}
		return g[n]
	}
	seen := map[string]bool{}
	var path []string
	var walk func(n string) bool
	walk = func(n string) bool {
		for _, m := range next(n) {
			if m == start {
				path = append(path, m)
				return true
			}
			if seen[m] {
				continue
			}
			seen[m] = true
			path = append(path, m)
			if walk(m) {
				return true
			}
			path = path[:len(path)-1]
		}
		return false
	}
	if walk(start) {
		return append([]string{start}, path...)
	}
	return nil
}

// Describe writes a cycle as people read it.
func Describe(cycle []string) string { return strings.Join(cycle, " → ") }

// Dependents names the syncs whose spec.dependsOn names name, sorted.
func (g Graph) Dependents(name string) []string {
	var out []string
	for n, deps := range g {
		if slices.Contains(deps, name) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

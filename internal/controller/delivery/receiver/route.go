package receiver

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/apply"
	"github.com/metalhub/metalhub/internal/infrahub"
)

// BranchIndex indexes InfrahubSyncs by the branch they follow; a sync pinned to a time
// (spec.source.targetDate) follows none: its artifacts never change.
const BranchIndex = ".spec.source.followedBranch"

func branchKeys(o client.Object) []string {
	s, ok := o.(*infrahubv1alpha1.InfrahubSync)
	if !ok || s.Spec.Source.TargetDate != "" {
		return nil
	}
	return []string{branchOf(s)}
}

func branchOf(s *infrahubv1alpha1.InfrahubSync) string {
	if s.Spec.Source.TargetBranch == "" {
		return infrahub.DefaultBranch
	}
	return s.Spec.Source.TargetBranch
}

// route finds the syncs an artifact event concerns and hands them to the waker; it returns how
// many. The VidraResource named for the artifact (they are named by artifact id) names its sync.
// An artifact no VidraResource holds yet is new: the syncs that hold another artifact of its
// definition, learnt from earlier events, else every sync following the event's branch.
func (r *Receiver) route(ctx context.Context, ev event, now time.Time) (int, error) {
	var names []string
	var vr infrahubv1alpha1.VidraResource
	err := r.reader.Get(ctx, client.ObjectKey{Name: ev.Data.NodeID}, &vr)
	switch {
	case err == nil:
		if name, _, ok := apply.SyncRefOf(&vr); ok {
			names = []string{name}
			r.learnt.add(ev.Data.ArtifactDefinitionID, name)
		}
	case apierrors.IsNotFound(err):
		names = r.learnt.get(ev.Data.ArtifactDefinitionID)
		if len(names) == 0 && ev.Branch != nil {
			var l infrahubv1alpha1.InfrahubSyncList
			if err := r.reader.List(ctx, &l, client.MatchingFields{BranchIndex: *ev.Branch}); err != nil {
				return 0, fmt.Errorf("listing the syncs of branch %q: %w", *ev.Branch, err)
			}
			for i := range l.Items {
				names = append(names, l.Items[i].Name)
			}
		}
	default:
		return 0, fmt.Errorf("reading VidraResource %s: %w", ev.Data.NodeID, err)
	}
	n := 0
	for _, name := range names {
		var s infrahubv1alpha1.InfrahubSync
		if err := r.reader.Get(ctx, client.ObjectKey{Name: name}, &s); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return n, fmt.Errorf("reading InfrahubSync %s: %w", name, err)
		}
		// A sync pinned in time, on another branch or being deleted has nothing to fetch.
		if s.Spec.Source.TargetDate != "" || !s.DeletionTimestamp.IsZero() ||
			ev.Branch != nil && *ev.Branch != branchOf(&s) {
			continue
		}
		r.wakes.add(name, ev.Data.NodeID, ev.Data.Checksum, now)
		n++
	}
	return n, nil
}

// Bounds of what the receiver learns from deliveries; past them it learns nothing more.
const (
	maxDefinitions     = 4096
	maxSyncsPerDefined = 64
)

// definitions remembers which syncs held artifacts of each artifact definition, so that a new
// artifact of a definition wakes those syncs rather than every sync on the branch.
type definitions struct {
	mu sync.Mutex
	m  map[string][]string
}

func newDefinitions() *definitions { return &definitions{m: map[string][]string{}} }

func (d *definitions) add(def, sync string) {
	if def == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, ok := d.m[def]
	if !ok && len(d.m) >= maxDefinitions {
		return
	}
	for _, s := range cur {
		if s == sync {
			return
		}
	}
	if len(cur) < maxSyncsPerDefined {
		d.m[def] = append(cur, sync)
	}
}

func (d *definitions) get(def string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.m[def]...)
}

// maxSeen bounds the message ids remembered; each is kept only for the tolerance, after which
// its timestamp refuses it anyway.
const maxSeen = 100_000

// seen remembers the message ids of verified deliveries within the tolerance: a second delivery
// with one is a replay.
type seen struct {
	mu        sync.Mutex
	tolerance time.Duration
	ids       map[string]time.Time // id → when it stops mattering
	swept     time.Time
}

func newSeen(tolerance time.Duration) *seen {
	return &seen{tolerance: tolerance, ids: map[string]time.Time{}}
}

// first reports whether id is new, and remembers it.
func (s *seen) first(id string, sent, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if until, ok := s.ids[id]; ok && now.Before(until) {
		return false
	}
	if len(s.ids) >= maxSeen || now.Sub(s.swept) > s.tolerance {
		for k, until := range s.ids {
			if !now.Before(until) {
				delete(s.ids, k)
			}
		}
		s.swept = now
	}
	if len(s.ids) < maxSeen {
		// Full of live ids only under a flood of validly signed deliveries; the wake they
		// cause is bounded all the same.
		s.ids[id] = sent.Add(s.tolerance)
	}
	return true
}

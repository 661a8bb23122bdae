package delivery

import (
	"context"
	"fmt"
	"time"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/apply"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/policy"
)

// shrinkOf counts the objects vr's inventory records that manifest, its new content, no longer
// names (by group, kind and name: the namespace a manifest leaves out is the destination's).
// A manifest that does not decode names none of them: applying it fails and removes nothing,
// but it is weighed as the loss it announces.
func (r *InfrahubSyncReconciler) shrinkOf(ctx context.Context, vr *infrahubv1alpha1.VidraResource, manifest string) (int, error) {
	st, err := r.inventories.Load(ctx, vr)
	if err != nil {
		return 0, fmt.Errorf("weighing the new content of %s: %w", vr.Name, err)
	}
	if len(st.Objects) == 0 {
		return 0, nil
	}
	named := map[string]bool{}
	if objs, err := manifests.Decode(manifest); err == nil {
		for _, o := range objs {
			gvk := o.GroupVersionKind()
			named[gvk.Group+"/"+gvk.Kind+"/"+o.GetName()] = true
		}
	}
	lost := 0
	for _, ref := range st.Refs() {
		if !named[ref.GVK.Group+"/"+ref.GVK.Kind+"/"+ref.Name] {
			lost++
		}
	}
	return lost, nil
}

// pruneSettle is how long after a held answer an agreeing one releases it; 0: never (only a
// confirmation does).
func (r *InfrahubSyncReconciler) pruneSettle(settings policy.Settings) time.Duration {
	if !r.pruneAutoRelease {
		return 0
	}
	return settings.RequeueSyncAfter * 9 / 10
}

// weigh fills in the objects of the stake from the inventories: those of the doomed
// VidraResources, and those of each VidraResource an artifact re-issued under a new id takes
// over that its successor does not hold (taken over yet or not: successors apply one by one,
// and a guard that weighed each as it came would let every one through). The total is what
// the sync held before this answer: a successor's objects are not counted, or an answer that
// brings decoys would dilute the objects it removes below the fraction. A successor that has
// not recorded its inventory yet leaves the stake unsettled.
func (r *InfrahubSyncReconciler) weigh(ctx context.Context, st *apply.PruneStake, owned map[string]*infrahubv1alpha1.VidraResource) error {
	keys := map[string]map[string]bool{}
	load := func(vr *infrahubv1alpha1.VidraResource) (map[string]bool, bool, error) {
		inv, err := r.inventories.Load(ctx, vr)
		if err != nil {
			return nil, false, err
		}
		k := map[string]bool{}
		for _, ref := range inv.Refs() {
			k[ref.Key()] = true
		}
		keys[vr.Name] = k
		return k, inv.Found, nil
	}
	successor := map[string]*infrahubv1alpha1.VidraResource{} // predecessor name -> successor
	for _, vr := range owned {
		if name, uid, ok := apply.HandoverOf(vr); ok && vr.DeletionTimestamp.IsZero() {
			if prev := owned[name]; prev != nil && string(prev.UID) == uid && prev.DeletionTimestamp.IsZero() {
				successor[name] = vr
			}
		}
	}
	isSuccessor := map[string]bool{}
	for _, vr := range successor {
		isSuccessor[vr.Name] = true
	}
	for _, vr := range owned {
		if !vr.DeletionTimestamp.IsZero() || isSuccessor[vr.Name] {
			continue
		}
		k, _, err := load(vr)
		if err != nil {
			return err
		}
		st.ObjectsTotal += len(k)
	}
	for _, name := range st.Doomed {
		st.Objects += len(keys[name])
	}
	for name, next := range successor {
		nk, found, err := load(next)
		if err != nil {
			return err
		}
		if !found {
			st.Unsettled = true
			continue
		}
		lost := 0
		for k := range keys[name] {
			if !nk[k] {
				lost++
			}
		}
		if lost > 0 {
			st.Lossy = append(st.Lossy, name)
			st.Objects += lost
		}
	}
	return nil
}

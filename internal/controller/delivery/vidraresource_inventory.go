package delivery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/apply"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/policy"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// finalize removes what the VidraResource applied, then its finalizer.
func (r *VidraResourceReconciler) finalize(ctx context.Context, p *deployPass) (lifecycle.Result, error) {
	vr := p.Obj
	if !controllerutil.ContainsFinalizer(vr, manifests.Finalizer) {
		r.memory.Forget(vr.Name)
		return lifecycle.Done(), nil
	}
	r.memory.Forget(vr.Name) // our own deletes must not bring passes
	if err := r.cleanup(ctx, vr); err != nil {
		logf.FromContext(ctx).Info("cannot remove applied objects yet", "error", err.Error())
		p.out = deployOutcome{err: lifecycle.WithReason(infrahubv1alpha1.ReasonCleanupFailed, err), keep: true}
		p.requeue = cleanupRetry
		res, werr := r.report(ctx, p)
		if werr != nil {
			return res, werr
		}
		return lifecycle.RequeueAfter(cleanupRetry, "cleanup failed"), nil
	}
	if err := r.inventories.Remove(ctx, vr); err != nil {
		return lifecycle.Result{}, err
	}
	if err := lifecycle.PatchMetadata(ctx, p.Client(), vr, func(o client.Object) { controllerutil.RemoveFinalizer(o, manifests.Finalizer) }); err != nil {
		return lifecycle.Result{}, err
	}
	r.memory.Forget(vr.Name)
	return lifecycle.Wrote("finalizer removed"), nil
}

// cleanup deletes what the VidraResource applied. With an inventory, that is what it records,
// removed on the cluster and as the identity it records: a destination or identity that
// changed since, or an identity the operator may no longer act as for the writer, does not
// orphan it. Without one (a VidraResource of an earlier version), every object marked as its
// own: those its status lists, those its manifest names, and those the watches know.
func (r *VidraResourceReconciler) cleanup(ctx context.Context, vr *infrahubv1alpha1.VidraResource) error {
	st, err := r.inventories.Load(ctx, vr)
	if err != nil {
		return err
	}
	if st.Found && !st.Legacy {
		if err := r.pruneRecorded(ctx, vr, st.Inventory, nil); err != nil {
			return fmt.Errorf("%w (remove the finalizer %s by hand to leave the objects behind)", err, manifests.Finalizer)
		}
		return nil
	}
	as, err := r.actAs(ctx, vr)
	if err != nil {
		if len(vr.Status.ManagedResources) == 0 && len(st.Objects) == 0 {
			return nil // never acted as anyone: nothing was applied
		}
		return fmt.Errorf("%w (remove the finalizer %s by hand to leave the objects behind)", err, manifests.Finalizer)
	}
	t, err := r.clusters.GetAs(ctx, r.claimant(ctx, vr), vr.Spec.Destination.Server, as)
	if err != nil {
		return fmt.Errorf("reaching the destination cluster (remove the finalizer %s by hand to leave the objects behind): %w", manifests.Finalizer, err)
	}
	inv := st.Inventory
	if len(inv.Objects) > 0 && hostKeyOrLocal(inv.Server) != hostKeyOrLocal(vr.Spec.Destination.Server) {
		inv.As = as // an earlier version's inventory records no identity
		if err := r.pruneRecorded(ctx, vr, inv, nil); err != nil {
			return fmt.Errorf("%w (remove the finalizer %s by hand to leave the objects behind)", err, manifests.Finalizer)
		}
		st.Inventory = apply.Inventory{}
	}
	refs := append(apply.ManagedRefs(vr.Status.ManagedResources), st.Refs()...)
	manifest, _, err := manifests.Of(ctx, r.reader, vr)
	if err != nil {
		return err
	}
	// A manifest of another generation names objects too: the spec of one being deleted is
	// frozen by admission, and the inventory and the watches find the rest.
	if objs, err := manifests.Decode(manifest); err == nil {
		if planned, err := apply.Plan(t, objs, vr.Spec.Destination.Namespace, policy.Policy{AllowedKinds: []string{"*"}, AllowedNamespaces: []string{"*"}}); err == nil {
			for _, po := range planned {
				refs = append(refs, po.Ref)
			}
		}
	}
	refs = append(refs, t.OwnedObjects(ctx, vr.Name)...)
	recorded := recordedOf(&st, vr)
	done := map[string]bool{}
	var errs []error
	for _, ref := range refs {
		if done[ref.Key()] {
			continue
		}
		done[ref.Key()] = true
		res, note, err := apply.DeleteOwned(ctx, t, ref, apply.MarkOf(vr), recorded[ref.Key()], r.ownerUID)
		if err != nil {
			errs = append(errs, err)
		}
		if res == apply.PruneForeign || res == apply.PruneNamespaceKept {
			r.warnPrune(ctx, vr, res, note)
		}
	}
	return errors.Join(errs...)
}

// inventoryStep keeps the inventory ahead of the apply. When the destination moved (another
// cluster, or another identity), what the old one holds of ours is pruned there first, as the
// identity that applied it; objects about to be applied are recorded before the apply; objects
// observed gone leave the record. A read the identity is refused keeps its entry: refused is
// not gone, and the prune that follows says so (PruneFailed).
func (r *VidraResourceReconciler) inventoryStep(ctx context.Context, p *deployPass) (lifecycle.Result, error) {
	if p.planned == nil {
		return lifecycle.Continue(), nil // nothing will be applied; the report says why
	}
	vr := p.Obj
	st, err := r.inventories.Load(ctx, vr)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if st.Legacy {
		st.As = p.target.As // earlier versions recorded no identity: the one acting now
	}
	p.inv = &st
	server, as := vr.Spec.Destination.Server, p.target.As
	want := map[string]bool{}
	for _, po := range p.planned {
		want[apply.InventoryEntry(po.Ref)] = true
	}
	inv := st.Inventory
	if len(inv.Objects) > 0 && (hostKeyOrLocal(inv.Server) != hostKeyOrLocal(server) || inv.As != as) {
		// On the same cluster, what the new destination applies again is its own to keep.
		var keep map[string]bool
		if hostKeyOrLocal(inv.Server) == hostKeyOrLocal(server) {
			keep = want
		}
		if err := r.pruneRecorded(ctx, vr, inv, keep); err != nil {
			p.out = deployOutcome{err: lifecycle.WithReason(infrahubv1alpha1.ReasonPruneFailed, err), keep: true}
			p.requeue = cleanupRetry
			p.planned = nil // the old inventory stays, and the move waits for its prune
			return lifecycle.Continue(), nil
		}
		var kept []string
		for _, e := range inv.Objects {
			if keep[e] {
				kept = append(kept, e)
			}
		}
		inv = apply.Inventory{Server: server, As: as, Objects: kept}
	}
	// Status may know objects from before the inventory existed: carried over once.
	if !st.Found {
		for _, ref := range apply.ManagedRefs(vr.Status.ManagedResources) {
			want[apply.InventoryEntry(ref)] = true
		}
	}
	for _, e := range inv.Objects {
		if want[e] {
			continue
		}
		ref, ok := apply.InventoryRef(e)
		if !ok {
			continue
		}
		live, err := p.target.Observe(ctx, ref.GVK, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name})
		if err != nil || (live != nil && apply.MarksOwner(live, apply.MarkOf(vr))) {
			want[e] = true // may still be ours (a Forbidden read included): kept until observed gone
		}
	}
	before := map[string]bool{}
	for _, e := range st.Objects {
		before[e] = true
	}
	for e := range want {
		if !before[e] {
			p.added = append(p.added, e)
		}
	}
	next := apply.Inventory{Server: server, As: as, Objects: slices.Sorted(maps.Keys(want))}
	if !st.Legacy && st.Found && next.Server == st.Server && next.As == st.As && slices.Equal(next.Objects, st.Objects) {
		return lifecycle.Continue(), nil
	}
	if err := r.inventories.Save(ctx, vr, &st, next); err != nil {
		return lifecycle.Result{}, err
	}
	if _, ok := vr.Annotations[infrahubv1alpha1.InventoryAnnotation]; ok {
		// Moved to the store: the annotation of an earlier version goes.
		if err := lifecycle.PatchMetadata(ctx, p.Client(), vr, func(o client.Object) {
			a := o.GetAnnotations()
			delete(a, infrahubv1alpha1.InventoryAnnotation)
			o.SetAnnotations(a)
		}); err != nil {
			return lifecycle.Result{}, fmt.Errorf("removing the inventory annotation: %w", err)
		}
		return lifecycle.Wrote("inventory moved out of the annotation"), nil
	}
	return lifecycle.Continue(), nil
}

// settleInventory brings the inventory after the apply: the prune's objects that are gone (or
// no longer ours) leave it, and so do the entries this pass added and never applied. An
// artifact refused before anything was written (preflight, a refused dry-run) must not leave
// objects its identity may not even read in the record, where they would hold every prune and
// the finalizer.
func (r *VidraResourceReconciler) settleInventory(ctx context.Context, p *deployPass) error {
	if p.inv == nil {
		return nil
	}
	drop := map[string]bool{}
	for _, e := range p.inv.Objects {
		if ref, ok := apply.InventoryRef(e); ok && p.out.gone[ref.Key()] {
			drop[e] = true
		}
	}
	if p.out.err != nil {
		for _, e := range p.added {
			if ref, ok := apply.InventoryRef(e); ok && !p.out.reached[ref.Key()] {
				drop[e] = true
			}
		}
	}
	if len(drop) == 0 {
		return nil
	}
	next := p.inv.Inventory
	next.Objects = slices.DeleteFunc(slices.Clone(next.Objects), func(e string) bool { return drop[e] })
	return r.inventories.Save(ctx, p.Obj, p.inv, next)
}

// pruneRecorded removes what the inventory lists, but keep, on the cluster it names and as the
// user it records: the destination moved, and the old one must not keep orphans, or the
// VidraResource goes. Whatever it cannot remove, or read (Forbidden), is an error: the
// inventory stays for the retry.
func (r *VidraResourceReconciler) pruneRecorded(ctx context.Context, vr *infrahubv1alpha1.VidraResource, inv apply.Inventory, keep map[string]bool) error {
	t, err := r.clusters.GetAs(ctx, r.claimant(ctx, vr), inv.Server, inv.As)
	if err != nil {
		return fmt.Errorf("reaching %q to prune what was applied there: %w", cmp.Or(inv.Server, "the local cluster"), err)
	}
	var errs []string
	n := 0
	for _, ref := range inv.Refs() {
		if keep[apply.InventoryEntry(ref)] {
			continue
		}
		n++
		res, note, err := apply.DeleteOwned(ctx, t, ref, apply.MarkOf(vr), true, r.ownerUID)
		if err != nil {
			errs = append(errs, err.Error())
		}
		if res == apply.PruneForeign || res == apply.PruneNamespaceKept {
			r.warnPrune(ctx, vr, res, note)
		}
	}
	who := cmp.Or(inv.As, "the operator")
	if len(errs) > 0 {
		return fmt.Errorf("pruning what was applied on %q as %s: %s", cmp.Or(inv.Server, "the local cluster"), who, strings.Join(errs, "; "))
	}
	logf.FromContext(ctx).Info("pruned what was applied", "server", inv.Server, "as", who, "objects", n)
	return nil
}

func hostKeyOrLocal(server string) string {
	if target.IsLocal(server) {
		return "local"
	}
	return target.HostKey(server)
}

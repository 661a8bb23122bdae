package delivery

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// inventory is what a VidraResource may have applied, on which cluster and as whom: bookkeeping
// of the operator's own (inventoryStore), not status, so that a wiped or restored status, or a
// restart that has no watch on a kind, does not lose the knowledge of what to prune. It is
// written ahead: every object is in it before it is applied, and leaves it only once observed
// gone, so a failed apply or prune keeps what may exist.
type inventory struct {
	// Server is the destination.server the objects were applied to ("" the local cluster).
	Server string `json:"server"`
	// As is the user they were applied as ("" the operator itself): a destination change
	// prunes as that user, who may reach what the new one may not.
	As      string   `json:"as,omitempty"`
	Objects []string `json:"objects"` // group/version/Kind/namespace/name, sorted
}

// parseInventory reads the InventoryAnnotation form earlier versions wrote.
func parseInventory(v string) inventory {
	var inv inventory
	_ = json.Unmarshal([]byte(v), &inv) // an unreadable one counts as empty: status and watches remain
	return inv
}

func inventoryEntry(r objectRef) string {
	return r.GVK.Group + "/" + r.GVK.Version + "/" + r.GVK.Kind + "/" + r.Namespace + "/" + r.Name
}

func inventoryRef(e string) (objectRef, bool) {
	p := strings.Split(e, "/")
	if len(p) != 5 || p[2] == "" || p[4] == "" {
		return objectRef{}, false
	}
	return objectRef{GVK: schema.GroupVersionKind{Group: p[0], Version: p[1], Kind: p[2]}, Namespace: p[3], Name: p[4]}, true
}

func (inv inventory) refs() []objectRef {
	out := make([]objectRef, 0, len(inv.Objects))
	for _, e := range inv.Objects {
		if r, ok := inventoryRef(e); ok {
			out = append(out, r)
		}
	}
	return out
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
	st, err := r.inventories.load(ctx, vr)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if st.legacy {
		st.As = p.target.as // earlier versions recorded no identity: the one acting now
	}
	p.inv = &st
	server, as := vr.Spec.Destination.Server, p.target.as
	want := map[string]bool{}
	for _, po := range p.planned {
		want[inventoryEntry(po.ref)] = true
	}
	inv := st.inventory
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
		inv = inventory{Server: server, As: as, Objects: kept}
	}
	// Status may know objects from before the inventory existed: carried over once.
	if !st.found {
		for _, ref := range managedRefs(vr.Status.ManagedResources) {
			want[inventoryEntry(ref)] = true
		}
	}
	for _, e := range inv.Objects {
		if want[e] {
			continue
		}
		ref, ok := inventoryRef(e)
		if !ok {
			continue
		}
		live, err := p.target.observe(ctx, ref.GVK, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name})
		if err != nil || (live != nil && marksOwner(live, markOf(vr))) {
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
	next := inventory{Server: server, As: as, Objects: slices.Sorted(maps.Keys(want))}
	if !st.legacy && st.found && next.Server == st.Server && next.As == st.As && slices.Equal(next.Objects, st.Objects) {
		return lifecycle.Continue(), nil
	}
	if err := r.inventories.save(ctx, vr, &st, next); err != nil {
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
		if ref, ok := inventoryRef(e); ok && p.out.gone[ref.key()] {
			drop[e] = true
		}
	}
	if p.out.err != nil {
		for _, e := range p.added {
			if ref, ok := inventoryRef(e); ok && !p.out.reached[ref.key()] {
				drop[e] = true
			}
		}
	}
	if len(drop) == 0 {
		return nil
	}
	next := p.inv.inventory
	next.Objects = slices.DeleteFunc(slices.Clone(next.Objects), func(e string) bool { return drop[e] })
	return r.inventories.save(ctx, p.Obj, p.inv, next)
}

// pruneRecorded removes what the inventory lists, but keep, on the cluster it names and as the
// user it records: the destination moved, and the old one must not keep orphans, or the
// VidraResource goes. Whatever it cannot remove, or read (Forbidden), is an error: the
// inventory stays for the retry.
func (r *VidraResourceReconciler) pruneRecorded(ctx context.Context, vr *infrahubv1alpha1.VidraResource, inv inventory, keep map[string]bool) error {
	t, err := r.clusters.getAs(ctx, r.claimant(ctx, vr), inv.Server, inv.As)
	if err != nil {
		return fmt.Errorf("reaching %q to prune what was applied there: %w", cmp.Or(inv.Server, "the local cluster"), err)
	}
	var errs []string
	n := 0
	for _, ref := range inv.refs() {
		if keep[inventoryEntry(ref)] {
			continue
		}
		n++
		res, note, err := deleteOwned(ctx, t, ref, markOf(vr), true, r.ownerUID)
		if err != nil {
			errs = append(errs, err.Error())
		}
		if res == pruneForeign || res == pruneNamespaceKept {
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
	if isLocal(server) {
		return "local"
	}
	return hostKey(server)
}

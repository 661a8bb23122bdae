package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// inventory is what a VidraResource may have applied, and on which cluster: bookkeeping on the
// VidraResource itself (an annotation), not status, so that a wiped or restored status, or a
// restart that has no watch on a kind, does not lose the knowledge of what to prune. It is
// written ahead: every object is in it before it is applied, and leaves it only once observed
// gone, so a failed apply or prune keeps what may exist.
type inventory struct {
	// Server is the destination.server the objects were applied to ("" the local cluster).
	Server  string   `json:"server"`
	Objects []string `json:"objects"` // group/version/Kind/namespace/name, sorted
}

func inventoryOf(vr *infrahubv1alpha1.VidraResource) inventory {
	var inv inventory
	if v := vr.Annotations[infrahubv1alpha1.InventoryAnnotation]; v != "" {
		_ = json.Unmarshal([]byte(v), &inv) // an unreadable one counts as empty: status and watches remain
	}
	return inv
}

func (inv inventory) String() string {
	b, _ := json.Marshal(inv)
	return string(b)
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

// inventoryStep keeps the inventory ahead of the apply. When the destination moved, what the
// old cluster holds of ours is pruned there first; objects about to be applied are recorded
// before the apply (the write ends the pass); objects observed gone leave the record.
func (r *VidraResourceReconciler) inventoryStep(ctx context.Context, p *deployPass) (lifecycle.Result, error) {
	if p.planned == nil {
		return lifecycle.Continue(), nil // nothing will be applied; the report says why
	}
	vr := p.Obj
	inv := inventoryOf(vr)
	server := vr.Spec.Destination.Server
	if len(inv.Objects) > 0 && hostKeyOrLocal(inv.Server) != hostKeyOrLocal(server) {
		if err := r.pruneElsewhere(ctx, vr, inv); err != nil {
			p.out = deployOutcome{err: lifecycle.WithReason(infrahubv1alpha1.ReasonPruneFailed, err), keep: true}
			p.requeue = cleanupRetry
			return lifecycle.Continue(), nil
		}
		inv = inventory{}
	}
	want := map[string]bool{}
	for _, po := range p.planned {
		want[inventoryEntry(po.ref)] = true
	}
	// Status may know objects from before the inventory existed: carried over once.
	if _, recorded := vr.Annotations[infrahubv1alpha1.InventoryAnnotation]; !recorded {
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
		switch {
		case apierrors.IsForbidden(err):
			// Out of reach of the ServiceAccount applied as: not ours (deleteOwned agrees).
		case err != nil || (live != nil && marksOwner(live, markOf(vr))):
			want[e] = true // may still be ours: kept until observed gone
		}
	}
	next := inventory{Server: server, Objects: slices.Sorted(maps.Keys(want))}
	if next.Server == inv.Server && slices.Equal(next.Objects, inv.Objects) {
		return lifecycle.Continue(), nil
	}
	if err := lifecycle.PatchMetadata(ctx, p.Client(), vr, func(o client.Object) {
		lifecycle.SetAnnotation(o, infrahubv1alpha1.InventoryAnnotation, next.String())
	}); err != nil {
		return lifecycle.Result{}, fmt.Errorf("recording the inventory: %w", err)
	}
	return lifecycle.Wrote("inventory"), nil
}

// pruneElsewhere removes what the inventory lists on the cluster it names: the destination
// moved, and the old cluster must not keep orphans.
func (r *VidraResourceReconciler) pruneElsewhere(ctx context.Context, vr *infrahubv1alpha1.VidraResource, inv inventory) error {
	as, err := r.actAs(ctx, vr)
	if err != nil {
		return err
	}
	t, err := r.clusters.getAs(ctx, r.claimant(ctx, vr), inv.Server, as)
	if err != nil {
		return fmt.Errorf("reaching the previous destination %q to prune it: %w", inv.Server, err)
	}
	var errs []string
	for _, ref := range inv.refs() {
		res, note, err := deleteOwned(ctx, t, ref, markOf(vr), true, r.ownerUID)
		if err != nil {
			errs = append(errs, err.Error())
		}
		if res == pruneForeign || res == pruneNamespaceKept {
			r.warnPrune(ctx, vr, res, note)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("pruning the previous destination %q: %s", inv.Server, strings.Join(errs, "; "))
	}
	logf.FromContext(ctx).Info("pruned the previous destination", "server", inv.Server, "objects", len(inv.Objects))
	return nil
}

func hostKeyOrLocal(server string) string {
	if isLocal(server) {
		return "local"
	}
	return hostKey(server)
}

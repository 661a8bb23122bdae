package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// plannedObject is one object of a manifest, resolved against its cluster.
type plannedObject struct {
	ref objectRef
	obj *unstructured.Unstructured
}

// plan resolves every object of a manifest on t: its kind must be served there, namespaced
// objects get destination.namespace when they name none, and the policy must allow it. Any
// failure refuses the whole manifest, so an artifact is never half applied because one of its
// objects was refused.
func plan(t *target, objs []*unstructured.Unstructured, defaultNS string, p Policy) ([]plannedObject, error) {
	if defaultNS == "" {
		defaultNS = metav1.NamespaceDefault
	}
	var (
		out      []plannedObject
		unknown  []string
		denied   []string
		failures []string
	)
	seen := map[string]bool{}
	for i, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := t.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			unknown = append(unknown, fmt.Sprintf("object %d: kind %s of apiVersion %s is not served by cluster %s", i+1, gvk.Kind, o.GetAPIVersion(), t.key))
			continue
		}
		if err != nil {
			failures = append(failures, fmt.Sprintf("object %d: resolving %s on cluster %s: %v", i+1, gvk, t.key, err))
			continue
		}
		namespaced := m.Scope.Name() == meta.RESTScopeNameNamespace
		o = o.DeepCopy()
		if !namespaced {
			o.SetNamespace("")
		} else if o.GetNamespace() == "" {
			o.SetNamespace(defaultNS)
		}
		ref := objectRef{GVK: gvk, Namespace: o.GetNamespace(), Name: o.GetName()}
		if err := p.Check(gvk.GroupKind(), namespaced, o.GetNamespace(), defaultNS); err != nil {
			denied = append(denied, fmt.Sprintf("%s refused: %v", ref, err))
			continue
		}
		if seen[ref.key()] {
			return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonInvalidManifest, "%s appears twice in the manifest", ref)
		}
		seen[ref.key()] = true
		out = append(out, plannedObject{ref: ref, obj: o})
	}
	switch {
	case len(failures) > 0:
		return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonClusterUnavailable, "%s", strings.Join(failures, "; "))
	case len(denied) > 0:
		return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonPolicyDenied, "nothing applied: %s", strings.Join(denied, "; "))
	case len(unknown) > 0:
		return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonUnknownKind, "nothing applied: %s", strings.Join(unknown, "; "))
	}
	return out, nil
}

// ownersOf reads the owned-by annotation. The reference appended its name on every pass
// (defect 6), so "a,a,a" from a migrated object means a.
func ownersOf(m metav1.Object) []string {
	v := strings.TrimSpace(m.GetAnnotations()[ownedByAnnotation])
	if v == "" {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// applyObject server-side applies one object with our field manager and ownership marks, and
// returns its drift token. Force: the manifest is authoritative for the fields it names; fields
// it does not name stay with whoever set them (defect 6).
func applyObject(ctx context.Context, t *target, po plannedObject, owners []string, opts ...client.ApplyOption) (string, error) {
	u := po.obj.DeepCopy()
	prepareForApply(u)
	l := u.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[ManagedByLabel] = ManagedByValue
	u.SetLabels(l)
	a := u.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[ownedByAnnotation] = strings.Join(owners, ",")
	u.SetAnnotations(a)
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	opts = append([]client.ApplyOption{client.FieldOwner(FieldManager), client.ForceOwnership}, opts...)
	if err := t.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...); err != nil {
		if apierrors.IsForbidden(err) {
			return "", lifecycle.Reasonf(infrahubv1alpha1.ReasonForbidden, "applying %s as %s: %v", po.ref, t.as, err)
		}
		if meta.IsNoMatchError(err) {
			return "", lifecycle.Reasonf(infrahubv1alpha1.ReasonUnknownKind, "applying %s: %v", po.ref, err)
		}
		return "", lifecycle.Reasonf(infrahubv1alpha1.ReasonApplyFailed, "applying %s: %v", po.ref, err)
	}
	return driftToken(u), nil
}

// preflight dry-runs the apply of every planned object as the target's ServiceAccount: an
// artifact that names one object its RBAC does not allow is refused whole, nothing applied.
func preflight(ctx context.Context, t *target, planned []plannedObject, owner string) error {
	var refused []string
	for _, po := range planned {
		if _, err := applyObject(ctx, t, po, []string{owner}, client.DryRunAll); err != nil {
			if reason, _ := lifecycle.ReasonOf(err); reason == infrahubv1alpha1.ReasonForbidden {
				refused = append(refused, err.Error())
				continue
			}
			return err
		}
	}
	if len(refused) > 0 {
		return lifecycle.Reasonf(infrahubv1alpha1.ReasonForbidden, "nothing applied: %s", strings.Join(refused, "; "))
	}
	return nil
}

// deleteOwned deletes an object if, and only if, it is marked as owner's. A shared object
// (owned-by lists others that still exist) is not deleted: owner only leaves the list, and the
// last owner to drop it deletes it. Gone already is fine. It reports whether it deleted.
func deleteOwned(ctx context.Context, t *target, ref objectRef, owner string, exists func(context.Context, string) bool) (bool, error) {
	live, err := t.observe(ctx, ref.GVK, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name})
	if apierrors.IsForbidden(err) {
		// The ServiceAccount applied as may not even read it: it cannot have created it (an
		// artifact refused before anything was applied records it all the same). Holding the
		// prune, or a deletion, on it would hold them forever.
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", ref, err)
	}
	if live == nil {
		return false, nil
	}
	owners := ownersOf(live)
	if !slices.Contains(owners, owner) {
		return false, nil
	}
	var rest []string
	for _, o := range owners {
		if o != owner && exists(ctx, o) {
			rest = append(rest, o)
		}
	}
	obj := partial(ref.GVK)
	obj.SetNamespace(ref.Namespace)
	obj.SetName(ref.Name)
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	if len(rest) > 0 {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"annotations": map[string]string{ownedByAnnotation: strings.Join(rest, ",")},
		}})
		if err != nil {
			return false, err
		}
		if err := t.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldManager)); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("leaving shared %s to %s: %w", ref, strings.Join(rest, ", "), err)
		}
		return false, nil
	}
	err = t.client.Delete(ctx, obj, client.Preconditions{UID: ptr.To(live.GetUID())}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("deleting %s: %w", ref, err)
	}
	return err == nil, nil
}

// managedRefs turns a status list back into references.
func managedRefs(list []infrahubv1alpha1.ManagedResource) []objectRef {
	out := make([]objectRef, 0, len(list))
	for _, m := range list {
		gv, err := schema.ParseGroupVersion(m.APIVersion)
		if err != nil {
			continue
		}
		out = append(out, objectRef{GVK: gv.WithKind(m.Kind), Namespace: m.Namespace, Name: m.Name})
	}
	return out
}

func toManaged(r objectRef) infrahubv1alpha1.ManagedResource {
	return infrahubv1alpha1.ManagedResource{APIVersion: r.GVK.GroupVersion().String(), Kind: r.GVK.Kind, Name: r.Name, Namespace: r.Namespace}
}

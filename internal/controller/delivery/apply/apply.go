package apply

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/pkg/ssa"
	ssaerrors "github.com/fluxcd/pkg/ssa/errors"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/policy"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// PlannedObject is one object of a manifest, resolved against its cluster.
type PlannedObject struct {
	Ref target.ObjectRef
	obj *unstructured.Unstructured
	// staged: the object needs an earlier stage of its own manifest (its kind is defined by a
	// CRD there, or its namespace created there), so nothing can be read or dry-run of it before
	// that stage is applied.
	staged bool
	// NewKind: its kind is not served yet; there is no object of it to read.
	NewKind bool
}

// Plan resolves every object of a manifest on t: its kind must be served there, or defined by a
// CRD of the same manifest (applied in an earlier stage); namespaced objects get
// destination.namespace when they name none, and the policy must allow it. Any failure refuses
// the whole manifest, so an artifact is never half applied because one of its objects was
// refused.
func Plan(t *target.Target, objs []*unstructured.Unstructured, defaultNS string, p policy.Policy) ([]PlannedObject, error) {
	if defaultNS == "" {
		defaultNS = metav1.NamespaceDefault
	}
	defined, namespaces := definedKinds(objs), map[string]bool{}
	for _, o := range objs {
		if o.GroupVersionKind().GroupKind() == (schema.GroupKind{Kind: "Namespace"}) {
			namespaces[o.GetName()] = true
		}
	}
	var (
		out      []PlannedObject
		unknown  []string
		denied   []string
		failures []string
	)
	seen := map[string]bool{}
	for i, o := range objs {
		gvk := o.GroupVersionKind()
		var namespaced, newKind bool
		m, err := t.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		switch scope, ok := defined[gvk]; {
		case meta.IsNoMatchError(err) && ok:
			namespaced, newKind = scope, true
		case meta.IsNoMatchError(err):
			unknown = append(unknown, fmt.Sprintf("object %d: kind %s of apiVersion %s is not served by cluster %s", i+1, gvk.Kind, o.GetAPIVersion(), t.Key))
			continue
		case err != nil:
			failures = append(failures, fmt.Sprintf("object %d: resolving %s on cluster %s: %v", i+1, gvk, t.Key, err))
			continue
		default:
			namespaced = m.Scope.Name() == meta.RESTScopeNameNamespace
		}
		o = o.DeepCopy()
		if !namespaced {
			o.SetNamespace("")
		} else if o.GetNamespace() == "" {
			o.SetNamespace(defaultNS)
		}
		ref := target.ObjectRef{GVK: gvk, Namespace: o.GetNamespace(), Name: o.GetName()}
		if err := p.Check(gvk.GroupKind(), namespaced, o.GetNamespace(), defaultNS); err != nil {
			denied = append(denied, fmt.Sprintf("%s refused: %v", ref, err))
			continue
		}
		if seen[ref.Key()] {
			return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonInvalidManifest, "%s appears twice in the manifest", ref)
		}
		seen[ref.Key()] = true
		out = append(out, PlannedObject{Ref: ref, obj: o, NewKind: newKind, staged: newKind || namespaced && namespaces[ref.Namespace]})
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

// definedKinds maps the kinds the manifest's own CRDs define (every served version) to whether
// they are namespaced.
func definedKinds(objs []*unstructured.Unstructured) map[schema.GroupVersionKind]bool {
	out := map[schema.GroupVersionKind]bool{}
	for _, o := range objs {
		if o.GroupVersionKind().GroupKind() != (schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}) {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
		versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
		for _, v := range versions {
			vm, _ := v.(map[string]any)
			name, _ := vm["name"].(string)
			if served, _ := vm["served"].(bool); served && name != "" && kind != "" {
				out[schema.GroupVersionKind{Group: group, Version: name, Kind: kind}] = scope != "Cluster"
			}
		}
	}
	return out
}

// OwnerMark is one owner of an applied object: a VidraResource's name and UID. The name alone
// is Vidra's mark; the UID tells the VidraResource from a later one of the same name.
type OwnerMark struct{ Name, UID string }

func MarkOf(vr metav1.Object) OwnerMark {
	return OwnerMark{Name: vr.GetName(), UID: string(vr.GetUID())}
}

// OwnerUIDsOf reads the owner-uids annotation: owner name -> UID. A name without an entry (a
// mark Vidra, or a version before this one, wrote) is recognised by name alone.
func OwnerUIDsOf(m metav1.Object) map[string]string {
	out := map[string]string{}
	for _, p := range strings.Split(m.GetAnnotations()[infrahubv1alpha1.OwnerUIDsAnnotation], ",") {
		if name, uid, ok := strings.Cut(strings.TrimSpace(p), "="); ok && name != "" && uid != "" {
			out[name] = uid
		}
	}
	return out
}

// MarksOwner reports whether the object's mark names owner: its name, with its UID or (a
// mark without UIDs) none.
func MarksOwner(m metav1.Object, owner OwnerMark) bool {
	if !slices.Contains(target.OwnersOf(m), owner.Name) {
		return false
	}
	uid, recorded := OwnerUIDsOf(m)[owner.Name]
	return !recorded || uid == owner.UID
}

// markAnnotations are the owned-by and owner-uids values for owners.
func markAnnotations(owners []OwnerMark) (names, uids string) {
	n, u := make([]string, 0, len(owners)), make([]string, 0, len(owners))
	for _, o := range owners {
		n = append(n, o.Name)
		if o.UID != "" {
			u = append(u, o.Name+"="+o.UID)
		}
	}
	return strings.Join(n, ","), strings.Join(u, ",")
}

// Owned returns the object as we apply it: our field manager's view, marked with our label, the
// owned-by list and the owners' UIDs.
func Owned(po PlannedObject, owners []OwnerMark) *unstructured.Unstructured {
	u := po.obj.DeepCopy()
	manifests.PrepareForApply(u)
	l := u.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[manifests.ManagedByLabel] = manifests.ManagedByValue
	u.SetLabels(l)
	a := u.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[manifests.OwnedByAnnotation], a[infrahubv1alpha1.OwnerUIDsAnnotation] = markAnnotations(owners)
	u.SetAnnotations(a)
	return u
}

// applied is what the apply did to one object, and the object's drift token after it.
type applied struct {
	Action ssa.Action
	Token  string
}

// ApplySet server-side applies objs with fluxcd/pkg/ssa: in stages (CRDs, Namespaces and
// ClusterRoles first, waited for until Current, then class definitions, then the rest), each
// object dry-run first and written only when the dry-run differs from the live object, so a
// change to a field we do not manage (an HPA's replicas, a controller's annotation) causes no
// write. Force: the manifest is authoritative for the fields it names; fields it does not name
// stay with whoever set them (defect 6). The result is keyed by objectRef.key; on an error, it
// holds the stages done before it.
//
// On an error, partial reports whether objects outside the result may have been written: a
// refused dry-run writes nothing of its stage, any other failure may have written some of it.
func ApplySet(ctx context.Context, t *target.Target, objs []*unstructured.Unstructured) (out map[string]applied, partial bool, err error) {
	rec := &recordingClient{Client: t.Client, timeout: t.Timeout, tokens: map[string]string{}}
	rm := ssa.NewResourceManager(rec, polling.NewStatusPoller(rec, t.Mapper, polling.Options{}),
		ssa.Owner{Field: manifests.FieldManager, Group: infrahubv1alpha1.GroupVersion.Group})
	opts := ssa.DefaultApplyOptions()
	opts.WaitInterval, opts.WaitTimeout = stageWaitInterval, t.Timeout
	cs, err := rm.ApplyAllStaged(ctx, objs, opts)
	out = map[string]applied{}
	if cs != nil {
		for _, e := range cs.Entries {
			ref := target.ObjectRef{GVK: schema.GroupVersionKind{Group: e.ObjMetadata.GroupKind.Group, Kind: e.ObjMetadata.GroupKind.Kind},
				Namespace: e.ObjMetadata.Namespace, Name: e.ObjMetadata.Name}
			out[ref.Key()] = applied{Action: e.Action, Token: rec.token(ref.Key())}
		}
	}
	if err != nil {
		var dryRun *ssaerrors.DryRunErr
		partial = !errors.As(err, &dryRun)
		switch {
		case apierrors.IsForbidden(err):
			return out, partial, lifecycle.Reasonf(infrahubv1alpha1.ReasonForbidden, "applying as %s: %v", t.As, err)
		case meta.IsNoMatchError(err):
			return out, partial, lifecycle.Reasonf(infrahubv1alpha1.ReasonUnknownKind, "applying: %v", err)
		}
		return out, partial, lifecycle.Reasonf(infrahubv1alpha1.ReasonApplyFailed, "applying: %v", err)
	}
	return out, false, nil
}

// stageWaitInterval is how often a staged apply looks whether its CRDs and Namespaces are ready.
const stageWaitInterval = 250 * time.Millisecond

// recordingClient is the client the apply library works through: every request gets the
// target's timeout, and it keeps each object's drift token as the server last returned it (the
// live object the library read, then the object its real apply wrote), so the pass remembers
// what it applied without reading it again.
type recordingClient struct {
	client.Client
	timeout time.Duration

	mu     sync.Mutex
	tokens map[string]string
}

func (c *recordingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	err := c.Client.Get(ctx, key, obj, opts...)
	if err == nil {
		c.record(obj)
	}
	return err
}

func (c *recordingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	err := c.Client.Patch(ctx, obj, patch, opts...)
	po := &client.PatchOptions{}
	po.ApplyOptions(opts)
	if err == nil && len(po.DryRun) == 0 {
		c.record(obj)
	}
	return err
}

func (c *recordingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return c.Client.Delete(ctx, obj, opts...)
}

func (c *recordingClient) record(obj client.Object) {
	gvk := obj.GetObjectKind().GroupVersionKind()
	ref := target.ObjectRef{GVK: gvk, Namespace: obj.GetNamespace(), Name: obj.GetName()}
	c.mu.Lock()
	c.tokens[ref.Key()] = target.DriftToken(obj)
	c.mu.Unlock()
}

func (c *recordingClient) token(key string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tokens[key]
}

// Preflight dry-runs the apply of every planned object as the target's ServiceAccount: an
// artifact that names one object its RBAC does not allow is refused whole, nothing applied.
// Objects that can only be tried once an earlier stage is applied (a custom resource of a CRD,
// an object in a Namespace the manifest creates) are left to the staged apply, which dry-runs
// each stage before it writes any of it.
func Preflight(ctx context.Context, t *target.Target, planned []PlannedObject, owner OwnerMark) error {
	var refused []string
	for _, po := range planned {
		if po.staged {
			continue
		}
		u := Owned(po, []OwnerMark{owner})
		err := func() error {
			ctx, cancel := context.WithTimeout(ctx, t.Timeout)
			defer cancel()
			return t.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(manifests.FieldManager), client.ForceOwnership, client.DryRunAll)
		}()
		switch {
		case err == nil:
		case apierrors.IsForbidden(err):
			refused = append(refused, fmt.Sprintf("applying %s as %s: %v", po.Ref, t.As, err))
		case meta.IsNoMatchError(err):
			return lifecycle.Reasonf(infrahubv1alpha1.ReasonUnknownKind, "applying %s: %v", po.Ref, err)
		default:
			return lifecycle.Reasonf(infrahubv1alpha1.ReasonApplyFailed, "applying %s: %v", po.Ref, err)
		}
	}
	if len(refused) > 0 {
		return lifecycle.Reasonf(infrahubv1alpha1.ReasonForbidden, "nothing applied: %s", strings.Join(refused, "; "))
	}
	return nil
}

// PruneResult is what deleteOwned did with one object.
type PruneResult int

const (
	pruneNone    PruneResult = iota // gone already, not ours, or left to its other owners
	PruneDeleted                    // deleted
	// pruneForeign: its mark names the owner but the owner never applied it (not in its
	// inventory, or the mark records another UID): skipped, with a Warning event.
	PruneForeign
	// pruneNamespaceKept: a Namespace holding objects no VidraResource manages: not deleted,
	// released (our mark removed), with a Warning event.
	PruneNamespaceKept
)

// ownerLookup returns the UID of the VidraResource of that name and whether it exists (a read
// error counts as existing with an unknown UID, "": never take over or delete on a guess).
type ownerLookup func(ctx context.Context, name string) (uid string, exists bool)

// DeleteOwned deletes an object if, and only if, it is marked as owner's (by name and, when the
// mark records one, UID) and recorded: in owner's inventory, so a copied or forged mark never
// gets an object deleted. A shared object (owned-by lists others that still exist) is not
// deleted: owner only leaves the list, and the last owner to drop it deletes it. A Namespace
// holding objects no VidraResource manages is released, not deleted. Gone already is fine.
// The note explains a pruneForeign or pruneNamespaceKept result.
func DeleteOwned(ctx context.Context, t *target.Target, ref target.ObjectRef, owner OwnerMark, recorded bool, lookup ownerLookup) (res PruneResult, note string, err error) {
	live, err := t.Observe(ctx, ref.GVK, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name})
	if apierrors.IsForbidden(err) && !recorded {
		// Not in the inventory, and the identity may not even read it: it cannot have created
		// it. Holding the prune, or a deletion, on it would hold them forever.
		return pruneNone, "", nil
	}
	if apierrors.IsForbidden(err) {
		// Recorded as applied, and the identity lost its rights (or is not the one that applied
		// it): refused is not gone. Said loudly, and kept for a retry.
		return pruneNone, "", fmt.Errorf("reading %s as %s, which the inventory records as having applied it: %w", ref, cmp.Or(t.As, "the operator"), err)
	}
	if err != nil {
		return pruneNone, "", fmt.Errorf("reading %s: %w", ref, err)
	}
	if live == nil {
		return pruneNone, "", nil
	}
	owners, uids := target.OwnersOf(live), OwnerUIDsOf(live)
	switch {
	case !slices.Contains(owners, owner.Name):
		return pruneNone, "", nil
	case !MarksOwner(live, owner):
		return PruneForeign, fmt.Sprintf("%s is marked as VidraResource %s's with UID %s, not this one's (%s); not removed", ref, owner.Name, uids[owner.Name], owner.UID), nil
	case !recorded:
		return PruneForeign, fmt.Sprintf("%s is marked as VidraResource %s's but %s never applied it (not in its inventory); not removed", ref, owner.Name, owner.Name), nil
	}
	var rest []OwnerMark
	for _, o := range owners {
		if o == owner.Name {
			continue
		}
		if uid, ok := lookup(ctx, o); ok && (uids[o] == "" || uid == "" || uids[o] == uid) {
			rest = append(rest, OwnerMark{Name: o, UID: uids[o]})
		}
	}
	obj := target.Partial(ref.GVK)
	obj.SetNamespace(ref.Namespace)
	obj.SetName(ref.Name)
	if len(rest) > 0 {
		names, ids := markAnnotations(rest)
		if err := patchMark(ctx, t, obj, names, ids); err != nil {
			return pruneNone, "", fmt.Errorf("leaving shared %s to %s: %w", ref, names, err)
		}
		return pruneNone, "", nil
	}
	if ref.GVK.Group == "" && ref.GVK.Kind == "Namespace" {
		unmanaged, err := unmanagedIn(ctx, t, ref.Name)
		if err != nil || len(unmanaged) > 0 {
			why := fmt.Sprintf("it holds objects no VidraResource manages: %s", strings.Join(unmanaged, ", "))
			if err != nil {
				why = fmt.Sprintf("what it holds cannot be listed: %v", err)
			}
			if perr := patchMark(ctx, t, obj, "", ""); perr != nil {
				return pruneNone, "", fmt.Errorf("releasing %s: %w", ref, perr)
			}
			return PruneNamespaceKept, fmt.Sprintf("%s kept and released (no longer marked as %s's): %s; delete it by hand once empty", ref, owner.Name, why), nil
		}
	}
	dctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	err = t.Client.Delete(dctx, obj, client.Preconditions{UID: ptr.To(live.GetUID())}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return pruneNone, "", fmt.Errorf("deleting %s: %w", ref, err)
	}
	if err != nil {
		return pruneNone, "", nil
	}
	return PruneDeleted, "", nil
}

// patchMark sets an object's owned-by and owner-uids annotations; empty values remove them.
func patchMark(ctx context.Context, t *target.Target, obj client.Object, names, uids string) error {
	val := func(v string) any {
		if v == "" {
			return nil
		}
		return v
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]any{manifests.OwnedByAnnotation: val(names), infrahubv1alpha1.OwnerUIDsAnnotation: val(uids)},
	}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	if err := t.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(manifests.FieldManager)); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// ManagedRefs turns a status list back into references.
func ManagedRefs(list []infrahubv1alpha1.ManagedResource) []target.ObjectRef {
	out := make([]target.ObjectRef, 0, len(list))
	for _, m := range list {
		gv, err := schema.ParseGroupVersion(m.APIVersion)
		if err != nil {
			continue
		}
		out = append(out, target.ObjectRef{GVK: gv.WithKind(m.Kind), Namespace: m.Namespace, Name: m.Name})
	}
	return out
}

func ToManaged(r target.ObjectRef) infrahubv1alpha1.ManagedResource {
	return infrahubv1alpha1.ManagedResource{APIVersion: r.GVK.GroupVersion().String(), Kind: r.GVK.Kind, Name: r.Name, Namespace: r.Namespace}
}

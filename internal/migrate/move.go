package migrate

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// moveOrder is the order objects are created on the target: what an object refers to or is
// owned by comes before it.
var moveOrder = []schema.GroupVersionKind{
	metalv1alpha1.GroupVersion.WithKind("Endpoint"),
	metalv1alpha1.GroupVersion.WithKind("BMCSecret"),
	metalv1alpha1.GroupVersion.WithKind("BMC"),
	metalv1alpha1.GroupVersion.WithKind("Server"),
	metalv1alpha1.GroupVersion.WithKind("ServerClaim"),
	// The newer group's maintenance owns its metal.ironcore.dev counterpart: it comes first.
	maintenancev1alpha1.GroupVersion.WithKind("ServerMaintenance"),
	// Before the boot configurations: a maintenance owns the one of its template, and an owner
	// not copied yet has no UID to re-point the reference to (it would be dropped, and the
	// copy's maintenance would find its configuration someone else's).
	metalv1alpha1.GroupVersion.WithKind("ServerMaintenance"),
	metalv1alpha1.GroupVersion.WithKind("ServerBootConfiguration"),
	corev1.SchemeGroupVersion.WithKind("Secret"), // the ignition Secrets claims and boot configurations name (some owned by them)
}

// MovedFromAnnotation marks a copy "metalhub move" made with the UID of its source object, so a
// move run again (after being cut short) knows its own copies from objects it must not touch.
const MovedFromAnnotation = lifecycle.MovedFromAnnotation

// MoveOptions say how to move.
type MoveOptions struct {
	// DryRun prints the plan and changes nothing.
	DryRun bool
	// Out receives the plan and the progress.
	Out io.Writer
	// Selector selects the BMCs that move, with everything that hangs off them (all when nil).
	Selector labels.Selector
	// PauseTimeout bounds the wait for the source's metalhub to acknowledge the pause of every
	// object (lifecycle.PauseAckAnnotation); 0 means DefaultPauseTimeout.
	PauseTimeout time.Duration
	// SourceStopped says the source's manager is gone: nothing will acknowledge the pause, and
	// nothing needs to. Only then does the move go on without acknowledgements.
	SourceStopped bool
}

// MovedAnnotation marks the source objects of a move that finished (the target unpaused) with
// when it did: such a move is never run again over the target, where objects deleted since
// would come back and live ones would get the paused source's status.
const MovedAnnotation = "metalhub.io/moved"

// DefaultPauseTimeout is how long a move waits for the source to acknowledge its pause.
const DefaultPauseTimeout = 2 * time.Minute

// acknowledgedKinds are the kinds whose source controllers acknowledge a pause: every kind
// metalhub reconciles among those moved (Endpoints, BMCSecrets and Secrets have no pass).
var acknowledgedKinds = map[string]bool{"BMC": true, "Server": true, "ServerClaim": true, "ServerBootConfiguration": true, "ServerMaintenance": true}

// Move copies the metal fleet from src to dst (the "clusterctl move" use): the source is paused
// first (lifecycle.PausedAnnotation, which every controller honours), then every object is
// created on the target in dependency order, paused, with its labels, annotations (the durable
// lifecycle bookkeeping), finalizers and spec; owner references are re-pointed to the copies;
// statuses follow; the target is unpaused last. The source stays paused: delete it once the
// target reports as it should (docs/migration.md). A move cut short can be run again: copies
// already on the target (MovedFromAnnotation) are kept, their statuses written again.
func Move(ctx context.Context, src, dst client.Client, o MoveOptions) error {
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	m := &selection{sel: o.Selector, everything: o.Selector == nil || o.Selector.Empty()}
	objs := map[schema.GroupVersionKind][]unstructured.Unstructured{}
	var deleting []string
	for _, gvk := range moveOrder {
		list, err := m.sourceObjects(ctx, src, gvk, objs)
		if err != nil {
			return err
		}
		objs[gvk] = list
		for _, u := range list {
			if u.GetDeletionTimestamp() != nil {
				deleting = append(deleting, gvk.Kind+" "+key(&u))
			}
		}
	}
	for _, gvk := range moveOrder {
		for _, u := range objs[gvk] {
			if at := u.GetAnnotations()[MovedAnnotation]; at != "" {
				return fmt.Errorf("%s %s was moved already (%s): a finished move is not run again; delete the paused source once the target is as it should be",
					gvk.Kind, key(&u), at)
			}
		}
	}
	if !m.everything {
		if err := m.refuseStrayClaims(ctx, src, objs); err != nil {
			return err
		}
	}
	if len(deleting) > 0 {
		// A copy would be a live object, and a claim on the target might bind another server
		// in its place: let the deletions finish first.
		return fmt.Errorf("being deleted, not moved: %s", strings.Join(deleting, ", "))
	}
	for _, gvk := range moveOrder {
		fmt.Fprintf(out, "%-24s %d\n", kindName(gvk), len(objs[gvk]))
	}
	if o.DryRun {
		fmt.Fprintln(out, "dry run: nothing changed")
		return nil
	}

	// 1. Pause the source: from here on neither manager acts on any of it. Copying starts once
	// the source's metalhub said so for every object (no pass of it in flight any more), or the
	// user said the source manager is gone.
	token := fmt.Sprintf("move-%d", time.Now().UnixNano())
	for _, gvk := range moveOrder {
		for i := range objs[gvk] {
			if err := setPaused(ctx, src, &objs[gvk][i], token); err != nil {
				return fmt.Errorf("pausing %s %s on the source: %w", gvk.Kind, objs[gvk][i].GetName(), err)
			}
		}
	}
	fmt.Fprintln(out, "source paused")
	if o.SourceStopped {
		fmt.Fprintln(out, "source manager declared stopped: not waiting for acknowledgements")
	} else if err := awaitAcknowledged(ctx, src, objs, token, cmp.Or(o.PauseTimeout, DefaultPauseTimeout)); err != nil {
		return err
	} else {
		fmt.Fprintln(out, "source acknowledged the pause")
	}

	// 2. Create the copies, paused, in order; owners first, so their new UIDs are known.
	uids := map[string]types.UID{} // kind/namespace/name -> UID on the target
	for _, gvk := range moveOrder {
		for i := range objs[gvk] {
			s := &objs[gvk][i]
			if s.GetNamespace() != "" {
				if err := ensureNamespace(ctx, dst, s.GetNamespace()); err != nil {
					return err
				}
			}
			c := copyForTarget(s, uids)
			err := dst.Create(ctx, c)
			if apierrors.IsAlreadyExists(err) {
				// A copy of an earlier run cut short is kept; anything else of that name on the
				// target is not ours to overwrite.
				if err = dst.Get(ctx, client.ObjectKeyFromObject(c), c); err == nil && c.GetAnnotations()[MovedFromAnnotation] != string(s.GetUID()) {
					return fmt.Errorf("%s %s exists on the target and is not a copy of the source's: not moved over", gvk.Kind, key(s))
				}
				if err == nil && !lifecycle.Paused(c) {
					// Unpaused already: the target's metalhub runs it; its status is live.
					uids[refKey(gvk.Group, gvk.Kind, s.GetNamespace(), s.GetName())] = c.GetUID()
					continue
				}
			}
			if err != nil {
				return fmt.Errorf("creating %s %s on the target: %w", gvk.Kind, key(s), err)
			}
			uids[refKey(gvk.Group, gvk.Kind, s.GetNamespace(), s.GetName())] = c.GetUID()
			if st, ok := s.Object["status"]; ok && gvk.Group != corev1.GroupName {
				c.Object["status"] = st
				if err := dst.Status().Update(ctx, c); err != nil {
					return fmt.Errorf("writing the status of %s %s on the target: %w", gvk.Kind, key(s), err)
				}
			}
		}
		fmt.Fprintf(out, "%s: %d created\n", kindName(gvk), len(objs[gvk]))
	}

	// 3. Unpause the target, last.
	for _, gvk := range moveOrder {
		for i := range objs[gvk] {
			c := &unstructured.Unstructured{}
			c.SetGroupVersionKind(gvk)
			c.SetNamespace(objs[gvk][i].GetNamespace())
			c.SetName(objs[gvk][i].GetName())
			if err := setPaused(ctx, dst, c, ""); err != nil {
				return fmt.Errorf("unpausing %s %s on the target: %w", gvk.Kind, key(c), err)
			}
		}
	}
	// 4. Mark the source: this move is done and is not run again.
	at := time.Now().UTC().Format(time.RFC3339)
	for _, gvk := range moveOrder {
		for i := range objs[gvk] {
			if err := annotate(ctx, src, &objs[gvk][i], MovedAnnotation, at); err != nil {
				return fmt.Errorf("marking %s %s moved on the source: %w", gvk.Kind, key(&objs[gvk][i]), err)
			}
		}
	}
	fmt.Fprintln(out, "target unpaused; the source stays paused")
	return nil
}

// selection is what moves: the selected BMCs and everything that hangs off them.
type selection struct {
	sel                      labels.Selector
	bmcs, secrets, endpoints map[string]bool
	servers, claims, configs map[string]bool
	everything               bool
}

// refuseStrayClaims fails a selective move when an unbound claim that stays behind could bind a
// server that moves: bound on the source in the middle of the move, or after it, it would hold a
// box the target runs. The claim is named, for the user to bind, delete or narrow it first.
func (m *selection) refuseStrayClaims(ctx context.Context, src client.Client, objs map[schema.GroupVersionKind][]unstructured.Unstructured) error {
	claims := &metalv1alpha1.ServerClaimList{}
	if err := src.List(ctx, claims); err != nil {
		return fmt.Errorf("listing ServerClaims: %w", err)
	}
	servers := objs[metalv1alpha1.GroupVersion.WithKind("Server")]
	var stray []string
	for _, c := range claims.Items {
		bound := c.Spec.ServerRef != nil && c.Spec.ServerRef.Name != ""
		if bound || !c.DeletionTimestamp.IsZero() {
			continue
		}
		sel := labels.Everything()
		if c.Spec.ServerSelector != nil {
			var err error
			if sel, err = metav1.LabelSelectorAsSelector(c.Spec.ServerSelector); err != nil {
				continue // an invalid selector binds nothing
			}
		}
		for _, srv := range servers {
			if sel.Matches(labels.Set(srv.GetLabels())) {
				stray = append(stray, c.Namespace+"/"+c.Name)
				break
			}
		}
	}
	if len(stray) > 0 {
		return fmt.Errorf("unbound claims could bind a server of the selection and do not move: %s; bind, delete or narrow them first",
			strings.Join(stray, ", "))
	}
	return nil
}

// sourceObjects lists the objects of gvk to move: the BMCs the selector selects, the BMCSecrets
// and Endpoints they name, their Servers, the claims those hold or that name them, the boot
// configurations and maintenances of those Servers, and the ignition Secrets the moved claims and
// boot configurations name (the discovery rounds' stay behind). got holds the kinds listed
// before (moveOrder lists what refers to others after them).
func (m *selection) sourceObjects(ctx context.Context, src client.Client, gvk schema.GroupVersionKind, got map[schema.GroupVersionKind][]unstructured.Unstructured) ([]unstructured.Unstructured, error) {
	str := func(o unstructured.Unstructured, path ...string) string {
		v, _, _ := unstructured.NestedString(o.Object, path...)
		return v
	}
	switch gvk.Kind {
	case "Endpoint", "BMCSecret":
		// Named by BMCs, which come after them in moveOrder: list the BMCs first.
		if m.bmcs == nil {
			bmcs, err := listAll(ctx, src, metalv1alpha1.GroupVersion.WithKind("BMC"), m.sel)
			if err != nil {
				return nil, err
			}
			m.bmcs, m.secrets, m.endpoints = map[string]bool{}, map[string]bool{}, map[string]bool{}
			for _, b := range bmcs {
				m.bmcs[b.GetName()] = true
				m.secrets[str(b, "spec", "bmcSecretRef", "name")] = true
				m.endpoints[str(b, "spec", "endpointRef", "name")] = true
			}
		}
		all, err := listAll(ctx, src, gvk, nil)
		if err != nil {
			return nil, err
		}
		names := m.secrets
		if gvk.Kind == "Endpoint" {
			names = m.endpoints
		}
		return keep(all, func(o unstructured.Unstructured) bool { return m.everything || names[o.GetName()] }), nil
	case "BMC":
		return listAll(ctx, src, gvk, m.sel)
	case "Server":
		all, err := listAll(ctx, src, gvk, nil)
		if err != nil {
			return nil, err
		}
		m.servers = map[string]bool{}
		out := keep(all, func(o unstructured.Unstructured) bool {
			return m.bmcs[str(o, "spec", "bmcRef", "name")] || m.everything
		})
		m.claims = map[string]bool{}
		for _, o := range out {
			m.servers[o.GetName()] = true
			if n := str(o, "spec", "serverClaimRef", "name"); n != "" {
				m.claims[str(o, "spec", "serverClaimRef", "namespace")+"/"+n] = true
			}
		}
		return out, nil
	case "ServerClaim":
		all, err := listAll(ctx, src, gvk, nil)
		if err != nil {
			return nil, err
		}
		return keep(all, func(o unstructured.Unstructured) bool {
			return m.everything || m.claims[o.GetNamespace()+"/"+o.GetName()] || m.servers[str(o, "spec", "serverRef", "name")]
		}), nil
	case "ServerBootConfiguration", "ServerMaintenance":
		all, err := listAll(ctx, src, gvk, nil)
		if err != nil {
			return nil, err
		}
		return keep(all, func(o unstructured.Unstructured) bool {
			return m.everything || m.servers[str(o, "spec", "serverRef", "name")]
		}), nil
	case "Secret":
		var out []unstructured.Unstructured
		seen := map[string]bool{}
		for _, owner := range []string{"ServerClaim", "ServerBootConfiguration"} {
			for _, o := range got[metalv1alpha1.GroupVersion.WithKind(owner)] {
				name := str(o, "spec", "ignitionSecretRef", "name")
				if name == "" || seen[o.GetNamespace()+"/"+name] {
					continue
				}
				seen[o.GetNamespace()+"/"+name] = true
				u := unstructured.Unstructured{}
				u.SetGroupVersionKind(gvk)
				if err := src.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: name}, &u); err != nil {
					if apierrors.IsNotFound(err) {
						continue
					}
					return nil, fmt.Errorf("reading Secret %s/%s: %w", o.GetNamespace(), name, err)
				}
				out = append(out, u)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("kind %s is not moved", gvk.Kind)
}

func keep(in []unstructured.Unstructured, f func(unstructured.Unstructured) bool) []unstructured.Unstructured {
	var out []unstructured.Unstructured
	for _, o := range in {
		if f(o) {
			out = append(out, o)
		}
	}
	return out
}

func listAll(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, sel labels.Selector) ([]unstructured.Unstructured, error) {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	var opts []client.ListOption
	if sel != nil {
		opts = append(opts, client.MatchingLabelsSelector{Selector: sel})
	}
	if err := c.List(ctx, l, opts...); err != nil {
		return nil, fmt.Errorf("listing %s: %w", gvk.Kind, err)
	}
	return l.Items, nil
}

// copyForTarget is s as it is created on the target: paused, without what the source's API
// server assigned, owner references re-pointed to the copies (dropped when the owner does not
// move), status written separately.
func copyForTarget(s *unstructured.Unstructured, uids map[string]types.UID) *unstructured.Unstructured {
	c := &unstructured.Unstructured{Object: map[string]any{}}
	for k, v := range s.Object {
		if k != "status" && k != "metadata" {
			c.Object[k] = v
		}
	}
	c.SetGroupVersionKind(s.GroupVersionKind())
	c.SetNamespace(s.GetNamespace())
	c.SetName(s.GetName())
	c.SetLabels(s.GetLabels())
	a := map[string]string{}
	for k, v := range s.GetAnnotations() {
		a[k] = v
	}
	a[lifecycle.PausedAnnotation] = "true"
	delete(a, lifecycle.PauseAckAnnotation) // the source's, not the target's
	delete(a, MovedAnnotation)
	a[MovedFromAnnotation] = string(s.GetUID())
	c.SetAnnotations(a)
	c.SetFinalizers(s.GetFinalizers())
	var refs []metav1.OwnerReference
	for _, r := range s.GetOwnerReferences() {
		group := ""
		if gv, err := schema.ParseGroupVersion(r.APIVersion); err == nil {
			group = gv.Group
		}
		if uid, ok := uids[refKey(group, r.Kind, s.GetNamespace(), r.Name)]; ok {
			r.UID = uid
			refs = append(refs, r)
		} else if uid, ok := uids[refKey(group, r.Kind, "", r.Name)]; ok { // a cluster-scoped owner
			r.UID = uid
			refs = append(refs, r)
		}
	}
	c.SetOwnerReferences(refs)
	return c
}

// annotate sets one annotation with a merge patch.
func annotate(ctx context.Context, c client.Client, o *unstructured.Unstructured, k, v string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{k: v}}})
	if err != nil {
		return err
	}
	return c.Patch(ctx, o, client.RawPatch(types.MergePatchType, patch))
}

// setPaused sets the pause annotation to value, or removes it and its acknowledgement for "",
// with a merge patch (no read-modify-write race with a controller writing the object).
func setPaused(ctx context.Context, c client.Client, o *unstructured.Unstructured, value string) error {
	ann := map[string]any{lifecycle.PausedAnnotation: value}
	if value == "" {
		ann = map[string]any{lifecycle.PausedAnnotation: nil, lifecycle.PauseAckAnnotation: nil}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	return c.Patch(ctx, o, client.RawPatch(types.MergePatchType, patch))
}

// awaitAcknowledged waits until every object of a kind metalhub reconciles carries the pause's
// acknowledgement, polling the source; it names what did not acknowledge when it gives up.
func awaitAcknowledged(ctx context.Context, src client.Client, objs map[schema.GroupVersionKind][]unstructured.Unstructured, token string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var missing []string
		for _, gvk := range moveOrder {
			if !acknowledgedKinds[gvk.Kind] {
				continue
			}
			for i := range objs[gvk] {
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(gvk)
				if err := src.Get(ctx, client.ObjectKeyFromObject(&objs[gvk][i]), u); err != nil {
					return fmt.Errorf("reading %s %s on the source: %w", gvk.Kind, key(&objs[gvk][i]), err)
				}
				if u.GetAnnotations()[lifecycle.PauseAckAnnotation] != token {
					missing = append(missing, gvk.Kind+" "+key(u))
				}
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if len(missing) > 10 {
				missing = append(missing[:10], fmt.Sprintf("and %d more", len(missing)-10))
			}
			return fmt.Errorf("the source did not acknowledge the pause within %s (%s): is its metalhub running? "+
				"Another operator, or an older metalhub, never acknowledges; stop it and move with --source-stopped. "+
				"The source stays paused: remove %s to resume it", timeout, strings.Join(missing, ", "), lifecycle.PausedAnnotation)
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func ensureNamespace(ctx context.Context, c client.Client, name string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s on the target: %w", name, err)
	}
	return nil
}

func refKey(group, kind, ns, name string) string { return kind + "." + group + "/" + ns + "/" + name }

// kindName names a moved kind; the newer maintenance group's kind by its group too.
func kindName(gvk schema.GroupVersionKind) string {
	if gvk.Group == metalv1alpha1.GroupVersion.Group || gvk.Group == "" {
		return gvk.Kind
	}
	return gvk.Kind + "." + gvk.Group
}

func key(o client.Object) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

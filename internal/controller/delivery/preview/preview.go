// Package preview tells what applying a set of manifests would do to a live cluster, without
// doing it: each object is server-side applied as a dry run through the same target (the same
// identity, the same admission) as the real apply, and compared with the live object; objects
// the apply would prune are dry-run deleted. Refusals the real apply would meet (RBAC, admission,
// validation, the delivery policy) are reported as such.
//
// Secrets' values never leave the package: their fields are reported by path only.
package preview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fluxcd/pkg/ssa/jsondiff"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalhub/metalhub/internal/controller/delivery/apply"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
)

// Action is what the apply would do to an object.
type Action string

// Actions.
const (
	Create    Action = "create"
	Change    Action = "change"
	Delete    Action = "delete"
	Refused   Action = "refused"
	Unchanged Action = "unchanged"
)

// Masked stands for a value that is not shown.
const Masked = "(masked)"

// Bounds that keep a report readable and a comment within what Infrahub stores.
const (
	MaxFields     = 50  // field changes shown per object
	maxValueBytes = 200 // of one value shown
)

// Field is one field the apply would change; Old is empty for a field it adds, New for one it
// removes.
type Field struct {
	Path string `json:"path"`
	Old  string `json:"old,omitempty"`
	New  string `json:"new,omitempty"`
}

// Entry is what the apply would do to one object.
type Entry struct {
	Ref     target.ObjectRef `json:"-"`
	Object  string           `json:"object"`
	Action  Action           `json:"action"`
	Fields  []Field          `json:"fields,omitempty"`
	More    int              `json:"more,omitempty"` // field changes beyond MaxFields
	Message string           `json:"message,omitempty"`
}

func entry(ref target.ObjectRef, a Action) Entry {
	return Entry{Ref: ref, Object: ref.GVK.GroupKind().String() + " " + nsName(ref), Action: a}
}

func nsName(r target.ObjectRef) string {
	if r.Namespace == "" {
		return r.Name
	}
	return r.Namespace + "/" + r.Name
}

// Apply previews applying objs (as apply.Owned made them: exactly what the apply sends) on t.
// Objects of a kind their own manifest defines cannot be dry-run before that definition exists:
// they are reported as created.
func Apply(ctx context.Context, t *target.Target, planned []apply.PlannedObject, objs []*unstructured.Unstructured) []Entry {
	out := make([]Entry, 0, len(objs))
	for i, u := range objs {
		ref := planned[i].Ref
		if planned[i].NewKind {
			e := entry(ref, Create)
			e.Message = "its kind is defined by this change; not dry-run"
			out = append(out, e)
			continue
		}
		out = append(out, one(ctx, t, ref, u))
	}
	return out
}

func one(ctx context.Context, t *target.Target, ref target.ObjectRef, u *unstructured.Unstructured) Entry {
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	d, err := jsondiff.Unstructured(ctx, t.Client, u.DeepCopy(), jsondiff.FieldOwner(manifests.FieldManager), jsondiff.MaskSecrets(true))
	if err != nil {
		e := entry(ref, Refused)
		e.Message = refusal(err, t.As)
		return e
	}
	switch d.Type {
	case jsondiff.DiffTypeCreate:
		return entry(ref, Create)
	case jsondiff.DiffTypeUpdate:
	default:
		return entry(ref, Unchanged)
	}
	e := entry(ref, Change)
	secret := ref.GVK.Group == "" && ref.GVK.Kind == "Secret"
	var live map[string]any
	if uc, ok := d.ClusterObject.(*unstructured.Unstructured); ok && !secret {
		live = uc.Object
	}
	for _, op := range d.Patch {
		path := op.Path
		if path == "" {
			path = "/"
		}
		f := Field{Path: path}
		if secret {
			if op.Type != "remove" {
				f.New = Masked
			}
			if op.Type != "add" {
				f.Old = Masked
			}
		} else {
			if op.Type != "remove" {
				f.New = show(op.Value)
			}
			if op.Type != "add" {
				if v, ok := lookup(live, path); ok {
					f.Old = show(v)
				}
			}
		}
		e.Fields = append(e.Fields, f)
	}
	slices.SortFunc(e.Fields, func(a, b Field) int { return strings.Compare(a.Path, b.Path) })
	if len(e.Fields) > MaxFields {
		e.More = len(e.Fields) - MaxFields
		e.Fields = e.Fields[:MaxFields]
	}
	return e
}

// Deletions previews pruning the objects the current apply holds and the change no longer does:
// a dry-run delete as t's identity, so a deletion it may not make shows as refused.
func Deletions(ctx context.Context, t *target.Target, current []target.ObjectRef, kept map[string]bool) []Entry {
	var out []Entry
	for _, ref := range current {
		if kept[ref.Key()] {
			continue
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(ref.GVK)
		u.SetNamespace(ref.Namespace)
		u.SetName(ref.Name)
		dctx, cancel := context.WithTimeout(ctx, t.Timeout)
		err := t.Client.Delete(dctx, u, client.DryRunAll)
		cancel()
		switch {
		case err == nil:
			out = append(out, entry(ref, Delete))
		case apierrors.IsNotFound(err):
			// Gone already: the prune has nothing to do.
		default:
			e := entry(ref, Refused)
			e.Message = "deleting: " + refusal(err, t.As)
			out = append(out, e)
		}
	}
	return out
}

// refusal says why the API server would refuse the apply.
func refusal(err error, as string) string {
	var status apierrors.APIStatus
	msg := err.Error()
	if errors.As(err, &status) {
		msg = status.Status().Message
	}
	switch {
	case apierrors.IsForbidden(err) && as != "":
		return fmt.Sprintf("forbidden for %s: %s", as, msg)
	case apierrors.IsForbidden(err):
		return "forbidden: " + msg
	case apierrors.IsInvalid(err):
		return "invalid: " + msg
	}
	return msg
}

// show renders a value for a reader, cut to maxValueBytes.
func show(v any) string {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return fmt.Sprint(x)
		}
		s = string(b)
	}
	if len(s) > maxValueBytes {
		s = s[:maxValueBytes] + "…"
	}
	return s
}

// lookup resolves a JSON pointer in obj.
func lookup(obj map[string]any, pointer string) (any, bool) {
	if obj == nil {
		return nil, false
	}
	var cur any = obj
	for _, tok := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			var i int
			if _, err := fmt.Sscanf(tok, "%d", &i); err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

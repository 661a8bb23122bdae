package apply

import (
	"context"
	"slices"

	"github.com/fluxcd/pkg/ssa/jsondiff"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
)

// maxFieldPath keeps one reported field path readable (and the status small).
const maxFieldPath = 256

// DriftOf dry-runs the forced apply of u as our field manager and compares the result with the
// live object (the library's diff: labels, annotations and everything but metadata and status).
// It returns the JSON pointers of the fields that differ, sorted and at most limit of them, and
// how many differ in all; gone reports that there is no live object. Only paths leave this
// function, never values: u may be a Secret.
func DriftOf(ctx context.Context, t *target.Target, u *unstructured.Unstructured, limit int) (fields []string, total int, gone bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	d, err := jsondiff.Unstructured(ctx, t.Client, u.DeepCopy(), jsondiff.FieldOwner(manifests.FieldManager), jsondiff.MaskSecrets(true))
	if err != nil {
		return nil, 0, false, err
	}
	switch d.Type {
	case jsondiff.DiffTypeCreate:
		return nil, 0, true, nil
	case jsondiff.DiffTypeUpdate:
	default:
		return nil, 0, false, nil
	}
	seen := map[string]bool{}
	for _, op := range d.Patch {
		p := op.Path
		if len(p) > maxFieldPath {
			p = p[:maxFieldPath] + "…"
		}
		if p == "" {
			p = "/"
		}
		seen[p] = true
	}
	for p := range seen {
		fields = append(fields, p)
	}
	slices.Sort(fields)
	total = len(fields)
	if len(fields) > limit {
		fields = fields[:limit]
	}
	return fields, total, false, nil
}

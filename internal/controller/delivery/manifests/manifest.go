package manifests

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Decode reads an artifact's content: one or more YAML documents separated by ---, or
// JSON, or a v1 List of either. Every object must name its apiVersion, kind and name (server-side
// apply needs a name). Errors say which document is wrong.
func Decode(manifest string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var out []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		var raw map[string]any
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if len(raw) == 0 { // an empty document between separators
			continue
		}
		u := &unstructured.Unstructured{Object: raw}
		if u.IsList() {
			items, err := listItems(u)
			if err != nil {
				return nil, fmt.Errorf("document %d: %w", doc, err)
			}
			for i, it := range items {
				if err := checkObject(it); err != nil {
					return nil, fmt.Errorf("document %d, item %d: %w", doc, i, err)
				}
				out = append(out, it)
			}
			continue
		}
		if err := checkObject(u); err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, errors.New("the manifest holds no objects")
	}
	return out, nil
}

func listItems(u *unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	var items []*unstructured.Unstructured
	err := u.EachListItem(func(o runtime.Object) error {
		it, ok := o.(*unstructured.Unstructured)
		if !ok {
			return fmt.Errorf("list item of type %T", o)
		}
		items = append(items, it)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading list: %w", err)
	}
	return items, nil
}

func checkObject(u *unstructured.Unstructured) error {
	switch {
	case u.GetAPIVersion() == "":
		return errors.New("apiVersion missing")
	case u.GetKind() == "":
		return errors.New("kind missing")
	case u.GetName() == "":
		return fmt.Errorf("%s without metadata.name", u.GetKind())
	}
	return nil
}

// PrepareForApply strips what a manifest exported from a cluster may carry but an apply must not
// claim: server-set metadata and status (owned by the object's controller).
func PrepareForApply(u *unstructured.Unstructured) {
	for _, f := range []string{"resourceVersion", "uid", "creationTimestamp", "managedFields", "generation", "selfLink", "deletionTimestamp"} {
		unstructured.RemoveNestedField(u.Object, "metadata", f)
	}
	unstructured.RemoveNestedField(u.Object, "status")
}

// Hash is the sha256 of a manifest, hex.
func Hash(m string) string {
	h := sha256.Sum256([]byte(m))
	return hex.EncodeToString(h[:])
}

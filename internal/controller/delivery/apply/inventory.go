package apply

import (
	"encoding/json"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/metalhub/metalhub/internal/controller/delivery/target"
)

// Inventory is what a VidraResource may have applied, on which cluster and as whom: bookkeeping
// of the operator's own (inventoryStore), not status, so that a wiped or restored status, or a
// restart that has no watch on a kind, does not lose the knowledge of what to prune. It is
// written ahead: every object is in it before it is applied, and leaves it only once observed
// gone, so a failed apply or prune keeps what may exist.
type Inventory struct {
	// Server is the destination.server the objects were applied to ("" the local cluster).
	Server string `json:"server"`
	// As is the user they were applied as ("" the operator itself): a destination change
	// prunes as that user, who may reach what the new one may not.
	As      string   `json:"as,omitempty"`
	Objects []string `json:"objects"` // group/version/Kind/namespace/name, sorted
}

// parseInventory reads the InventoryAnnotation form earlier versions wrote.
func parseInventory(v string) Inventory {
	var inv Inventory
	_ = json.Unmarshal([]byte(v), &inv) // an unreadable one counts as empty: status and watches remain
	return inv
}

func InventoryEntry(r target.ObjectRef) string {
	return r.GVK.Group + "/" + r.GVK.Version + "/" + r.GVK.Kind + "/" + r.Namespace + "/" + r.Name
}

func InventoryRef(e string) (target.ObjectRef, bool) {
	p := strings.Split(e, "/")
	if len(p) != 5 || p[2] == "" || p[4] == "" {
		return target.ObjectRef{}, false
	}
	return target.ObjectRef{GVK: schema.GroupVersionKind{Group: p[0], Version: p[1], Kind: p[2]}, Namespace: p[3], Name: p[4]}, true
}

func (inv Inventory) Refs() []target.ObjectRef {
	out := make([]target.ObjectRef, 0, len(inv.Objects))
	for _, e := range inv.Objects {
		if r, ok := InventoryRef(e); ok {
			out = append(out, r)
		}
	}
	return out
}

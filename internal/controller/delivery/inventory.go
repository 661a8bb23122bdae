package delivery

import (
	"encoding/json"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
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

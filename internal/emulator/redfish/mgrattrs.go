package redfish

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
)

// ActionManagerAttributes is an accepted PATCH of the manager's Attributes (Record.Settings).
const ActionManagerAttributes = "ManagerAttributes"

// defaultManagerAttributes are every BMC's own settings as built (Dell's iDRAC names).
var defaultManagerAttributes = map[string]any{
	"IPMILan.1.Enable": "Enabled", "NTPConfigGroup.1.NTPEnable": "Disabled", "NTPConfigGroup.1.NTP1": "",
	"SNMP.1.AgentEnable": "Enabled", "WebServer.1.Timeout": float64(1800),
}

type mgrAttrs struct {
	mu    sync.Mutex
	attrs map[string]any
}

func (m *mgrAttrs) locked() map[string]any {
	if m.attrs == nil {
		m.attrs = maps.Clone(defaultManagerAttributes)
	}
	return m.attrs
}

// ManagerAttributes are the BMC's own settings in effect.
func (b *BMC) ManagerAttributes() map[string]any {
	b.mattrs.mu.Lock()
	defer b.mattrs.mu.Unlock()
	return maps.Clone(b.mattrs.locked())
}

// SetManagerAttribute adds or sets one of the BMC's own settings (a vendor's registry).
func (b *BMC) SetManagerAttribute(name string, value any) {
	b.mattrs.mu.Lock()
	defer b.mattrs.mu.Unlock()
	b.mattrs.locked()[name] = value
}

// SetFirmwareVersion sets the BMC's firmware version (as installed before the test).
func (b *BMC) SetFirmwareVersion(v string) {
	b.upd.mu.Lock()
	defer b.upd.mu.Unlock()
	b.upd.bmcFW = v
}

// serveManagerAttributes serves the manager's Attributes: read, and PATCHed at once (as iDRAC
// applies most of its own attributes).
func (b *BMC) serveManagerAttributes(w http.ResponseWriter, r *http.Request, uri string) {
	switch r.Method {
	case http.MethodGet:
		rfhttp.WriteJSON(w, http.StatusOK, obj{"@odata.type": "#DellAttributes.v1_0_0.DellAttributes", "@odata.id": uri, "Id": "Attributes",
			"Name": "Manager Attributes", "Attributes": b.ManagerAttributes()})
	case http.MethodPatch:
		var req struct{ Attributes map[string]any }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Attributes) == 0 {
			rfhttp.WriteError(w, http.StatusBadRequest, "MalformedJSON", "The request body needs Attributes.")
			return
		}
		b.mattrs.mu.Lock()
		cur := b.mattrs.locked()
		for k := range req.Attributes {
			if _, ok := cur[k]; !ok {
				b.mattrs.mu.Unlock()
				rfhttp.WriteError(w, http.StatusBadRequest, "PropertyUnknown", "The property "+k+" is not in the list of valid properties for the resource.")
				return
			}
		}
		maps.Copy(cur, req.Attributes)
		b.mattrs.mu.Unlock()
		settings := map[string]string{}
		for _, k := range slices.Sorted(maps.Keys(req.Attributes)) {
			settings[k] = fmt.Sprint(req.Attributes[k])
		}
		b.em.rec.add(Record{Time: time.Now(), BMC: b.index, Address: b.url, Via: via(r, b), Action: ActionManagerAttributes, Settings: settings})
		w.WriteHeader(http.StatusNoContent)
	default:
		rfhttp.MethodIs(w, r, http.MethodGet, http.MethodPatch)
	}
}

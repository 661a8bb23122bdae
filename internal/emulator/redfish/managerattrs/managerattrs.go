// Package managerattrs is one emulated BMC's own settings (the Attributes resource of its
// manager, in Dell's iDRAC names): read, and PATCHed at once, an unknown attribute refused.
//
// Recording a change is the caller's; it must not import the emulator package.
package managerattrs

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"

	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
)

// defaultManagerAttributes are every BMC's own settings as built (Dell's iDRAC names).
var defaultManagerAttributes = map[string]any{
	"IPMILan.1.Enable": "Enabled", "NTPConfigGroup.1.NTPEnable": "Disabled", "NTPConfigGroup.1.NTP1": "",
	"SNMP.1.AgentEnable": "Enabled", "WebServer.1.Timeout": float64(1800),
}

// Store is one BMC's own settings.
type Store struct {
	mu    sync.Mutex
	attrs map[string]any
}

func (m *Store) locked() map[string]any {
	if m.attrs == nil {
		m.attrs = maps.Clone(defaultManagerAttributes)
	}
	return m.attrs
}

// Get is a copy of the settings in effect.
func (m *Store) Get() map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.locked())
}

// Set adds or sets one setting.
func (m *Store) Set(name string, value any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.locked()[name] = value
}

// Serve serves the manager's Attributes: read, and PATCHed at once (as iDRAC
// applies most of its own attributes).
func (m *Store) Serve(w http.ResponseWriter, r *http.Request, uri string, record func(settings map[string]string)) {
	switch r.Method {
	case http.MethodGet:
		rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Obj{"@odata.type": "#DellAttributes.v1_0_0.DellAttributes", "@odata.id": uri, "Id": "Attributes",
			"Name": "Manager Attributes", "Attributes": m.Get()})
	case http.MethodPatch:
		var req struct{ Attributes map[string]any }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Attributes) == 0 {
			rfhttp.WriteError(w, http.StatusBadRequest, "MalformedJSON", "The request body needs Attributes.")
			return
		}
		m.mu.Lock()
		cur := m.locked()
		for k := range req.Attributes {
			if _, ok := cur[k]; !ok {
				m.mu.Unlock()
				rfhttp.WriteError(w, http.StatusBadRequest, "PropertyUnknown", "The property "+k+" is not in the list of valid properties for the resource.")
				return
			}
		}
		maps.Copy(cur, req.Attributes)
		m.mu.Unlock()
		settings := map[string]string{}
		for _, k := range slices.Sorted(maps.Keys(req.Attributes)) {
			settings[k] = fmt.Sprint(req.Attributes[k])
		}
		record(settings)
		w.WriteHeader(http.StatusNoContent)
	default:
		rfhttp.MethodIs(w, r, http.MethodGet, http.MethodPatch)
	}
}

package redfish

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
)

// ActionBiosSettings is an accepted PATCH of a system's Bios/Settings (Record.Settings).
const ActionBiosSettings = "BiosSettings"

// defaultBios are every system's BIOS attributes as built.
var defaultBios = map[string]any{
	"BootMode": "Uefi", "ProcVirtualization": "Enabled", "LogicalProc": "Enabled",
	"SriovGlobalEnable": "Disabled", "SysProfile": "PerfPerWattOptimizedDapc", "NumaNodesPerSocket": 1,
}

// BiosAttributes are the system's BIOS attributes in effect.
func (s *System) BiosAttributes() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.biosLocked())
}

// SetBiosAttribute adds or sets an attribute in effect, as a vendor's attribute registry has
// it (names differ by vendor: BootMode, bootMode, BootModes_SystemBootMode).
func (s *System) SetBiosAttribute(name string, value any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.biosLocked()[name] = value
}

// SetBiosWriteOnly adds a write-only attribute, as a BIOS password is: it is set like any
// other, but every read shows it as null (BiosAttributes, the Go side, has its value).
func (s *System) SetBiosWriteOnly(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.biosWriteOnly == nil {
		s.biosWriteOnly = map[string]bool{}
	}
	s.biosWriteOnly[name] = true
	if _, ok := s.biosLocked()[name]; !ok {
		s.biosLocked()[name] = ""
	}
}

// shownLocked is attrs as a read over Redfish shows them: write-only ones null.
func (s *System) shownLocked(attrs map[string]any) map[string]any {
	out := maps.Clone(attrs)
	for k := range out {
		if s.biosWriteOnly[k] {
			out[k] = nil
		}
	}
	return out
}

// PendingBiosAttributes are the attributes the next reset applies.
func (s *System) PendingBiosAttributes() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.biosPending)
}

func (s *System) biosLocked() map[string]any {
	if s.bios == nil {
		s.bios = maps.Clone(defaultBios)
	}
	return s.bios
}

// applyBiosLocked installs pending BIOS settings, as POST does after a reset.
func (s *System) applyBiosLocked() {
	if len(s.biosPending) == 0 {
		return
	}
	maps.Copy(s.biosLocked(), s.biosPending)
	s.biosPending = nil
}

// serveBios serves Bios and its Settings object (ApplyTime OnReset only, as most BMCs).
func (b *BMC) serveBios(w http.ResponseWriter, r *http.Request, s *System, base string, rest []string) {
	switch {
	case len(rest) == 0:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			s.mu.Lock()
			attrs := s.shownLocked(s.biosLocked())
			s.mu.Unlock()
			rfhttp.WriteJSON(w, http.StatusOK, obj{
				"@odata.type": "#Bios.v1_2_0.Bios", "@odata.id": base, "Id": "BIOS", "Name": "BIOS Configuration",
				"AttributeRegistry": "BiosAttributeRegistry.v1_0_0", "Attributes": attrs,
				"@Redfish.Settings": obj{
					"@odata.type": "#Settings.v1_3_5.Settings", "SettingsObject": rfhttp.Link(base + "/Settings"),
					"SupportedApplyTimes": []string{"OnReset"},
				},
			})
		}
	case len(rest) == 1 && rest[0] == "Settings":
		if !rfhttp.MethodIs(w, r, http.MethodGet, http.MethodPatch) {
			return
		}
		if r.Method == http.MethodGet {
			s.mu.Lock()
			attrs, etag := s.shownLocked(s.biosPending), s.etagLocked()
			s.mu.Unlock()
			if attrs == nil {
				attrs = map[string]any{}
			}
			w.Header().Set("ETag", etag)
			rfhttp.WriteJSON(w, http.StatusOK, obj{"@odata.type": "#Bios.v1_2_0.Bios", "@odata.id": base + "/Settings", "Id": "Settings", "Attributes": attrs})
			return
		}
		b.patchBios(w, r, s)
	default:
		rfhttp.NotFound(w, r)
	}
}

func (b *BMC) patchBios(w http.ResponseWriter, r *http.Request, s *System) {
	var req struct {
		Attributes map[string]any
		ApplyTime  *struct{ ApplyTime string } `json:"@Redfish.SettingsApplyTime"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Attributes) == 0 {
		rfhttp.WriteError(w, http.StatusBadRequest, "MalformedJSON", "The request body needs Attributes.")
		return
	}
	if req.ApplyTime != nil && req.ApplyTime.ApplyTime != "OnReset" {
		rfhttp.WriteError(w, http.StatusBadRequest, "PropertyValueNotInList", "The value "+req.ApplyTime.ApplyTime+" for the property ApplyTime is not in the list of acceptable values.")
		return
	}
	s.mu.Lock()
	current := s.biosLocked()
	for k := range req.Attributes {
		if _, ok := current[k]; !ok {
			s.mu.Unlock()
			rfhttp.WriteError(w, http.StatusBadRequest, "PropertyUnknown", "The property "+k+" is not in the list of valid properties for the resource.")
			return
		}
	}
	if s.biosPending == nil {
		s.biosPending = map[string]any{}
	}
	maps.Copy(s.biosPending, req.Attributes)
	s.etag++
	s.mu.Unlock()
	settings := map[string]string{}
	s.mu.Lock()
	for _, k := range slices.Sorted(maps.Keys(req.Attributes)) {
		settings[k] = fmt.Sprint(req.Attributes[k])
		if s.biosWriteOnly[k] {
			settings[k] = "(write-only)" // a BMC keeps no password in its logs
		}
	}
	s.mu.Unlock()
	b.em.rec.add(Record{Time: time.Now(), BMC: b.index, Address: b.url, Via: via(r, b), SystemID: s.hw.ID, UUID: s.UUID(), Action: ActionBiosSettings, Settings: settings})
	w.WriteHeader(http.StatusNoContent)
}

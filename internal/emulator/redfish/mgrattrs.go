package redfish

import (
	"net/http"
	"time"
)

// ActionManagerAttributes is an accepted PATCH of the manager's Attributes (Record.Settings).
const ActionManagerAttributes = "ManagerAttributes"

// ManagerAttributes are the BMC's own settings in effect.
func (b *BMC) ManagerAttributes() map[string]any { return b.mattrs.Get() }

// SetManagerAttribute adds or sets one of the BMC's own settings (a vendor's registry).
func (b *BMC) SetManagerAttribute(name string, value any) { b.mattrs.Set(name, value) }

// serveManagerAttributes serves the manager's Attributes, recording a change.
func (b *BMC) serveManagerAttributes(w http.ResponseWriter, r *http.Request, uri string) {
	b.mattrs.Serve(w, r, uri, func(settings map[string]string) {
		b.em.rec.add(Record{Time: time.Now(), BMC: b.index, Address: b.url, Via: via(r, b), Action: ActionManagerAttributes, Settings: settings})
	})
}

package redfish

import (
	"net/http"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/accounts"
)

// Account actions in the recorder (Record.Account names the user; passwords are never kept).
const (
	ActionAccountCreate   = accounts.ActionAccountCreate
	ActionAccountPassword = accounts.ActionAccountPassword
	ActionAccountDelete   = accounts.ActionAccountDelete
)

// Account is one account as a test sees it (no password).
type Account = accounts.Account

// Accounts lists the BMC's accounts, its own credentials' first.
func (b *BMC) Accounts() []Account { return b.accts.Accounts() }

// validLogin reports whether user and password open this BMC: its credentials or an enabled
// extra account.
func (b *BMC) validLogin(user, password string) bool { return b.accts.ValidLogin(user, password) }

// CanLogin reports whether user and password open the BMC.
func (b *BMC) CanLogin(user, password string) bool { return b.validLogin(user, password) }

// routeAccounts serves AccountService.
func (b *BMC) routeAccounts(w http.ResponseWriter, r *http.Request, segs []string) {
	b.accts.Route(w, r, segs)
}

// accountHost is the BMC as its AccountService sees it.
type accountHost struct{ b *BMC }

func (h accountHost) Credentials() (string, string)        { return h.b.Credentials() }
func (h accountHost) SetCredentials(user, password string) { h.b.SetCredentials(user, password) }

func (h accountHost) Record(r *http.Request, action, user string) {
	h.b.em.rec.add(Record{Time: time.Now(), BMC: h.b.index, Address: h.b.url, Via: via(r, h.b), Action: action, Account: user})
}

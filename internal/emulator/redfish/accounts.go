package redfish

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
)

// Account actions in the recorder (Record.Account names the user; passwords are never kept).
const (
	ActionAccountCreate   = "AccountCreate"
	ActionAccountPassword = "AccountPassword"
	ActionAccountDelete   = "AccountDelete"
)

// Password limits of the emulated AccountService (iDRAC's maximum is 20).
const (
	minPasswordLength = 8
	maxPasswordLength = 20
)

// account is one extra BMC account; the first account (Id "1") is the BMC's credentials
// (Credentials, SetCredentials).
type account struct {
	id, user, password, role string
	enabled                  bool
}

type accounts struct {
	mu   sync.Mutex
	next int
	list []*account
}

// Account is one account as a test sees it (no password).
type Account struct {
	ID, UserName, RoleID string
	Enabled              bool
}

// Accounts lists the BMC's accounts, its own credentials' first.
func (b *BMC) Accounts() []Account {
	user, _ := b.Credentials()
	out := []Account{{ID: "1", UserName: user, RoleID: "Administrator", Enabled: true}}
	b.accts.mu.Lock()
	defer b.accts.mu.Unlock()
	for _, a := range b.accts.list {
		out = append(out, Account{ID: a.id, UserName: a.user, RoleID: a.role, Enabled: a.enabled})
	}
	return out
}

// validLogin reports whether user and password open this BMC: its credentials or an enabled
// extra account.
func (b *BMC) validLogin(user, password string) bool {
	if u, p := b.Credentials(); user == u && password == p {
		return true
	}
	b.accts.mu.Lock()
	defer b.accts.mu.Unlock()
	for _, a := range b.accts.list {
		if a.enabled && a.user == user && a.password == password {
			return true
		}
	}
	return false
}

func accountBody(id, user, role string, enabled bool) obj {
	return obj{
		"@odata.type": "#ManagerAccount.v1_8_0.ManagerAccount", "@odata.id": v1 + "/AccountService/Accounts/" + id,
		"Id": id, "Name": "User Account", "UserName": user, "RoleId": role, "Enabled": enabled, "Locked": false,
		"Password": nil,
	}
}

// validPassword refuses a password outside the policy's length with the Redfish base registry's
// PropertyValueFormatError, which quotes the value it refuses, as real BMCs' messages do: a
// client must not repeat such a message as it is.
func validPassword(w http.ResponseWriter, p string) bool {
	if len(p) < minPasswordLength || len(p) > maxPasswordLength {
		rfhttp.WriteError(w, http.StatusBadRequest, "PropertyValueFormatError", "The value '"+p+"' for the property Password is of a different format than the property can accept: "+
			strconv.Itoa(minPasswordLength)+" to "+strconv.Itoa(maxPasswordLength)+" characters.")
		return false
	}
	return true
}

func (b *BMC) recordAccount(r *http.Request, action, user string) {
	b.em.rec.add(Record{Time: time.Now(), BMC: b.index, Address: b.url, Via: via(r, b), Action: action, Account: user})
}

// routeAccounts serves AccountService: the service, its Accounts collection, creating (POST),
// changing (PATCH: Password, RoleId, Enabled) and deleting accounts.
func (b *BMC) routeAccounts(w http.ResponseWriter, r *http.Request, segs []string) {
	base := v1 + "/AccountService"
	switch {
	case len(segs) == 0:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			rfhttp.WriteJSON(w, http.StatusOK, obj{
				"@odata.type": "#AccountService.v1_10_0.AccountService", "@odata.id": base, "Id": "AccountService",
				"Name": "Account Service", "ServiceEnabled": true, "MinPasswordLength": minPasswordLength,
				"MaxPasswordLength": maxPasswordLength, "Accounts": rfhttp.Link(base + "/Accounts"), "Roles": rfhttp.Link(base + "/Roles"),
			})
		}
	case len(segs) == 1 && segs[0] == "Accounts":
		if !rfhttp.MethodIs(w, r, http.MethodGet, http.MethodPost) {
			return
		}
		if r.Method == http.MethodPost {
			b.createAccount(w, r)
			return
		}
		var ids []string
		for _, a := range b.Accounts() {
			ids = append(ids, base+"/Accounts/"+a.ID)
		}
		rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Collection(base+"/Accounts", "ManagerAccountCollection", "Accounts Collection", ids))
	case len(segs) == 2 && segs[0] == "Accounts":
		if !rfhttp.MethodIs(w, r, http.MethodGet, http.MethodPatch, http.MethodDelete) {
			return
		}
		b.serveAccount(w, r, segs[1])
	default:
		rfhttp.NotFound(w, r)
	}
}

func (b *BMC) createAccount(w http.ResponseWriter, r *http.Request) {
	var req struct {
		UserName, Password, RoleId string
		Enabled                    *bool
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.UserName == "" || req.Password == "" {
		rfhttp.WriteError(w, http.StatusBadRequest, "PropertyMissing", "The properties UserName and Password are required to create an account.")
		return
	}
	if !validPassword(w, req.Password) {
		return
	}
	if req.RoleId == "" {
		req.RoleId = "ReadOnly"
	}
	if u, _ := b.Credentials(); u == req.UserName {
		rfhttp.WriteError(w, http.StatusBadRequest, "ResourceAlreadyExists", "The account "+req.UserName+" already exists.")
		return
	}
	b.accts.mu.Lock()
	if slices.ContainsFunc(b.accts.list, func(a *account) bool { return a.user == req.UserName }) {
		b.accts.mu.Unlock()
		rfhttp.WriteError(w, http.StatusBadRequest, "ResourceAlreadyExists", "The account "+req.UserName+" already exists.")
		return
	}
	b.accts.next++
	a := &account{id: strconv.Itoa(b.accts.next + 1), user: req.UserName, password: req.Password, role: req.RoleId, enabled: req.Enabled == nil || *req.Enabled}
	b.accts.list = append(b.accts.list, a)
	b.accts.mu.Unlock()
	b.recordAccount(r, ActionAccountCreate, a.user)
	w.Header().Set("Location", v1+"/AccountService/Accounts/"+a.id)
	rfhttp.WriteJSON(w, http.StatusCreated, accountBody(a.id, a.user, a.role, a.enabled))
}

func (b *BMC) serveAccount(w http.ResponseWriter, r *http.Request, id string) {
	if id == "1" {
		user, _ := b.Credentials()
		switch r.Method {
		case http.MethodGet:
			rfhttp.WriteJSON(w, http.StatusOK, accountBody("1", user, "Administrator", true))
		case http.MethodDelete:
			rfhttp.WriteError(w, http.StatusBadRequest, "ActionNotSupported", "The account in use by this session cannot be deleted.")
		default:
			var req struct{ Password *string }
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				rfhttp.WriteError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON.")
				return
			}
			if req.Password != nil {
				if !validPassword(w, *req.Password) {
					return
				}
				b.SetCredentials(user, *req.Password)
				b.recordAccount(r, ActionAccountPassword, user)
			}
			w.WriteHeader(http.StatusNoContent)
		}
		return
	}
	b.accts.mu.Lock()
	i := slices.IndexFunc(b.accts.list, func(a *account) bool { return a.id == id })
	if i < 0 {
		b.accts.mu.Unlock()
		rfhttp.NotFound(w, r)
		return
	}
	a := b.accts.list[i]
	switch r.Method {
	case http.MethodGet:
		body := accountBody(a.id, a.user, a.role, a.enabled)
		b.accts.mu.Unlock()
		rfhttp.WriteJSON(w, http.StatusOK, body)
	case http.MethodDelete:
		b.accts.list = slices.Delete(b.accts.list, i, i+1)
		b.accts.mu.Unlock()
		b.recordAccount(r, ActionAccountDelete, a.user)
		w.WriteHeader(http.StatusNoContent)
	default:
		var req struct {
			Password, RoleId *string
			Enabled          *bool
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			b.accts.mu.Unlock()
			rfhttp.WriteError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON.")
			return
		}
		if req.Password != nil && !validPassword(w, *req.Password) {
			b.accts.mu.Unlock()
			return
		}
		if req.Password != nil {
			a.password = *req.Password
		}
		if req.RoleId != nil {
			a.role = *req.RoleId
		}
		if req.Enabled != nil {
			a.enabled = *req.Enabled
		}
		user := a.user
		b.accts.mu.Unlock()
		if req.Password != nil {
			b.recordAccount(r, ActionAccountPassword, user)
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// CanLogin reports whether user and password open the BMC.
func (b *BMC) CanLogin(user, password string) bool { return b.validLogin(user, password) }

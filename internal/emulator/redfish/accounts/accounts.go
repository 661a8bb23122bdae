// Package accounts is one emulated BMC's AccountService: the BMC's own credentials as account
// "1" and extra accounts created, changed and deleted over Redfish, with a password policy whose
// refusals quote the password, as real BMCs' do.
//
// What it needs of its BMC comes through Host; it must not import the emulator package.
package accounts

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
)

const v1 = rfhttp.V1

// Host is what the AccountService needs of its BMC.
type Host interface {
	// Credentials are the BMC's own (account "1").
	Credentials() (user, password string)
	SetCredentials(user, password string)
	// Record records an account change made by the request r.
	Record(r *http.Request, action, user string)
}

// Init readies the service of a BMC.
func (svc *Service) Init(host Host) { svc.host = host }

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

// Service is one BMC's AccountService: its extra accounts beside the BMC's credentials.
type Service struct {
	host Host
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
func (svc *Service) Accounts() []Account {
	user, _ := svc.host.Credentials()
	out := []Account{{ID: "1", UserName: user, RoleID: "Administrator", Enabled: true}}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	for _, a := range svc.list {
		out = append(out, Account{ID: a.id, UserName: a.user, RoleID: a.role, Enabled: a.enabled})
	}
	return out
}

// ValidLogin reports whether user and password open this BMC: its credentials or an enabled
// extra account.
func (svc *Service) ValidLogin(user, password string) bool {
	if u, p := svc.host.Credentials(); user == u && password == p {
		return true
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	for _, a := range svc.list {
		if a.enabled && a.user == user && a.password == password {
			return true
		}
	}
	return false
}

func accountBody(id, user, role string, enabled bool) rfhttp.Obj {
	return rfhttp.Obj{
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

// Route serves AccountService: the service, its Accounts collection, creating (POST),
// changing (PATCH: Password, RoleId, Enabled) and deleting accounts.
func (svc *Service) Route(w http.ResponseWriter, r *http.Request, segs []string) {
	base := v1 + "/AccountService"
	switch {
	case len(segs) == 0:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Obj{
				"@odata.type": "#AccountService.v1_10_0.AccountService", "@odata.id": base, "Id": "AccountService",
				"Name": "Account Service", "ServiceEnabled": true, "MinPasswordLength": minPasswordLength,
				"MaxPasswordLength": maxPasswordLength, "Accounts": rfhttp.Link(base + "/Accounts"), "Roles": rfhttp.Link(base + "/Roles"),
			})
		}
	case len(segs) == 1 && segs[0] == "Accounts":
		rfhttp.ServeCollection(w, r, base+"/Accounts", "ManagerAccountCollection", "Accounts Collection", func() []string {
			var ids []string
			for _, a := range svc.Accounts() {
				ids = append(ids, base+"/Accounts/"+a.ID)
			}
			return ids
		}, svc.create)
	case len(segs) == 2 && segs[0] == "Accounts":
		if !rfhttp.MethodIs(w, r, http.MethodGet, http.MethodPatch, http.MethodDelete) {
			return
		}
		svc.serve(w, r, segs[1])
	default:
		rfhttp.NotFound(w, r)
	}
}

func (svc *Service) create(w http.ResponseWriter, r *http.Request) {
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
	if u, _ := svc.host.Credentials(); u == req.UserName {
		rfhttp.WriteError(w, http.StatusBadRequest, "ResourceAlreadyExists", "The account "+req.UserName+" already exists.")
		return
	}
	svc.mu.Lock()
	if slices.ContainsFunc(svc.list, func(a *account) bool { return a.user == req.UserName }) {
		svc.mu.Unlock()
		rfhttp.WriteError(w, http.StatusBadRequest, "ResourceAlreadyExists", "The account "+req.UserName+" already exists.")
		return
	}
	svc.next++
	a := &account{id: strconv.Itoa(svc.next + 1), user: req.UserName, password: req.Password, role: req.RoleId, enabled: req.Enabled == nil || *req.Enabled}
	svc.list = append(svc.list, a)
	svc.mu.Unlock()
	svc.host.Record(r, ActionAccountCreate, a.user)
	w.Header().Set("Location", v1+"/AccountService/Accounts/"+a.id)
	rfhttp.WriteJSON(w, http.StatusCreated, accountBody(a.id, a.user, a.role, a.enabled))
}

func (svc *Service) serve(w http.ResponseWriter, r *http.Request, id string) {
	if id == "1" {
		user, _ := svc.host.Credentials()
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
				svc.host.SetCredentials(user, *req.Password)
				svc.host.Record(r, ActionAccountPassword, user)
			}
			w.WriteHeader(http.StatusNoContent)
		}
		return
	}
	svc.mu.Lock()
	i := slices.IndexFunc(svc.list, func(a *account) bool { return a.id == id })
	if i < 0 {
		svc.mu.Unlock()
		rfhttp.NotFound(w, r)
		return
	}
	a := svc.list[i]
	switch r.Method {
	case http.MethodGet:
		body := accountBody(a.id, a.user, a.role, a.enabled)
		svc.mu.Unlock()
		rfhttp.WriteJSON(w, http.StatusOK, body)
	case http.MethodDelete:
		svc.list = slices.Delete(svc.list, i, i+1)
		svc.mu.Unlock()
		svc.host.Record(r, ActionAccountDelete, a.user)
		w.WriteHeader(http.StatusNoContent)
	default:
		var req struct {
			Password, RoleId *string
			Enabled          *bool
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			svc.mu.Unlock()
			rfhttp.WriteError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON.")
			return
		}
		if req.Password != nil && !validPassword(w, *req.Password) {
			svc.mu.Unlock()
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
		svc.mu.Unlock()
		if req.Password != nil {
			svc.host.Record(r, ActionAccountPassword, user)
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

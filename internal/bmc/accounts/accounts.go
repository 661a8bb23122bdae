package accounts

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/metalhub/metalhub/internal/bmc/wire"
	"github.com/stmcginnis/gofish/schemas"
)

func accountService(ctx context.Context, c wire.Conn) (*schemas.AccountService, error) {
	api, err := c.Client(ctx)
	if err != nil {
		return nil, err
	}
	if c.Root().AccountService.ID == "" {
		return nil, wire.New(wire.ReasonUnsupported, "read account service", "service root has no AccountService")
	}
	return schemas.GetObject[schemas.AccountService](api, c.Root().AccountService.ID)
}

func accounts(ctx context.Context, c wire.Conn) (*schemas.AccountService, []*schemas.ManagerAccount, error) {
	svc, err := accountService(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	accts, err := svc.Accounts()
	return svc, accts, err
}

// Accounts does the work of bmc.BMC.Accounts.
func Accounts(ctx context.Context, c wire.Conn) ([]Account, error) {
	const op = "list accounts"
	_, accts, err := accounts(ctx, c)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	out := make([]Account, 0, len(accts))
	for _, a := range accts {
		if a.UserName == "" {
			continue
		}
		out = append(out, Account{ID: a.ID, UserName: a.UserName, RoleID: a.RoleID, Enabled: a.Enabled})
	}
	return out, nil
}

// accountPatch is what SetAccount writes; empty fields are not sent.
type accountPatch struct {
	UserName string `json:",omitempty"`
	Password string `json:",omitempty"`
	RoleID   string `json:"RoleId,omitempty"`
	Enabled  bool
}

// SetAccount does the work of bmc.BMC.SetAccount. A BMC's refusal may quote the password it refuses (the Redfish
// base registry's PropertyValueFormatError does): the error returned never carries it.
func SetAccount(ctx context.Context, c wire.Conn, user, password, role string) error {
	return wire.Redact(setAccount(ctx, c, user, password, role), password)
}

func setAccount(ctx context.Context, c wire.Conn, user, password, role string) error {
	op := fmt.Sprintf("set account %s", user)
	if user == "" || password == "" {
		return wire.New(wire.ReasonInvalidConfig, op, "user name and password are required")
	}
	svc, accts, err := accounts(ctx, c)
	if err != nil {
		return wire.Wrap(op, err)
	}
	var free *schemas.ManagerAccount
	for _, a := range accts {
		if a.UserName == user {
			patch := accountPatch{Password: password, Enabled: true}
			if role != "" && role != a.RoleID {
				patch.RoleID = role
			}
			if err := a.Patch(a.ODataID, patch); err != nil {
				return wire.Wrap(op, err)
			}
			c.Log().V(1).Info("account updated", "user", user)
			return nil
		}
		if a.UserName == "" && free == nil {
			free = a
		}
	}
	if role == "" {
		role = "ReadOnly"
	}
	_, err = svc.CreateAccount(user, password, role)
	if err != nil && free != nil && isMethodNotAllowed(err) {
		// BMCs with fixed account slots (iDRAC) create by naming a free slot.
		err = free.Patch(free.ODataID, accountPatch{UserName: user, Password: password, RoleID: role, Enabled: true})
	}
	if err != nil {
		return wire.Wrap(op, err)
	}
	c.Log().V(1).Info("account created", "user", user, "role", role)
	return nil
}

func isMethodNotAllowed(err error) bool {
	var e *schemas.Error
	return errors.As(err, &e) && (e.HTTPReturnedStatusCode == http.StatusMethodNotAllowed || e.HTTPReturnedStatusCode == http.StatusNotImplemented)
}

// DeleteAccount does the work of bmc.BMC.DeleteAccount.
func DeleteAccount(ctx context.Context, c wire.Conn, user string) error {
	op := fmt.Sprintf("delete account %s", user)
	_, accts, err := accounts(ctx, c)
	if err != nil {
		return wire.Wrap(op, err)
	}
	for _, a := range accts {
		if a.UserName != user {
			continue
		}
		api, err := c.Client(ctx)
		if err != nil {
			return wire.Wrap(op, err)
		}
		resp, err := api.Delete(a.ODataID)
		if resp != nil {
			resp.Body.Close()
		}
		if err != nil && !isMethodNotAllowed(err) {
			return wire.Wrap(op, err)
		}
		if err != nil {
			// Fixed slots: emptied, not deleted.
			if err := a.Patch(a.ODataID, struct {
				UserName string
				Enabled  bool
			}{"", false}); err != nil {
				return wire.Wrap(op, err)
			}
		}
		c.Log().V(1).Info("account deleted", "user", user)
	}
	return nil
}

// Account is one BMC user account.
type Account struct {
	ID       string `json:"id"`
	UserName string `json:"userName"`
	RoleID   string `json:"roleID,omitempty"`
	Enabled  bool   `json:"enabled"`
}

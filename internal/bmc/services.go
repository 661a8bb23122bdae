package bmc

import (
	"context"
	"os"

	"github.com/metalhub/metalhub/internal/bmc/accounts"
	"github.com/metalhub/metalhub/internal/bmc/update"
)

// The per-service work lives in the service packages; these are the BMC methods that hand it
// a view of the connection.

// Account is one BMC user account.
type Account = accounts.Account

// Accounts implements BMC.
func (c *conn) Accounts(ctx context.Context) ([]Account, error) {
	return accounts.Accounts(ctx, c.wire())
}

// SetAccount implements BMC. A BMC's refusal may quote the password it refuses: the error
// returned never carries it.
func (c *conn) SetAccount(ctx context.Context, user, password, role string) error {
	return accounts.SetAccount(ctx, c.wire(), user, password, role)
}

// DeleteAccount implements BMC.
func (c *conn) DeleteAccount(ctx context.Context, user string) error {
	return accounts.DeleteAccount(ctx, c.wire(), user)
}

// Firmware is one component of the FirmwareInventory.
type Firmware = update.Firmware

// UpdateRequest is a SimpleUpdate.
type UpdateRequest = update.UpdateRequest

// TaskStatus is a Redfish task as read.
type TaskStatus = update.TaskStatus

// FirmwareInventory implements BMC.
func (c *conn) FirmwareInventory(ctx context.Context) ([]Firmware, error) {
	return update.FirmwareInventory(ctx, c.wire())
}

// SimpleUpdate implements BMC.
func (c *conn) SimpleUpdate(ctx context.Context, req UpdateRequest) (string, error) {
	return update.SimpleUpdate(ctx, c.wire(), req)
}

// UpdateMethods implements BMC.
func (c *conn) UpdateMethods(ctx context.Context) (simple, push bool, err error) {
	return update.UpdateMethods(ctx, c.wire())
}

// PushUpdate implements BMC.
func (c *conn) PushUpdate(ctx context.Context, req UpdateRequest, image *os.File) (string, error) {
	return update.PushUpdate(ctx, c.wire(), req, image)
}

// Task implements BMC.
func (c *conn) Task(ctx context.Context, uri string) (*TaskStatus, error) {
	return update.Task(ctx, c.wire(), uri)
}

// Tasks implements BMC.
func (c *conn) Tasks(ctx context.Context) ([]TaskStatus, error) { return update.Tasks(ctx, c.wire()) }

package bmc_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

func TestAccounts(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	p := pool(t, bmc.Options{})
	ctx := context.Background()
	b := e.BMC(0)
	ep := endpoint(b)
	c := get(t, p, ep)

	if err := c.SetAccount(ctx, "ops", "s3cret-pass", "Operator"); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := p.CheckCredentials(ctx, bmc.Endpoint{Address: ep.Address, Username: "ops", Password: "s3cret-pass"}); err != nil {
		t.Fatalf("the new account does not log in: %v", err)
	}
	if err := c.SetAccount(ctx, "ops", "another-pass", ""); err != nil {
		t.Fatalf("change password: %v", err)
	}
	if err := p.CheckCredentials(ctx, bmc.Endpoint{Address: ep.Address, Username: "ops", Password: "s3cret-pass"}); bmc.ReasonOf(err) != bmc.ReasonAuthenticationFailed {
		t.Fatalf("the old password still works: %v", err)
	}
	accts, err := c.Accounts(ctx)
	if err != nil || len(accts) != 2 || accts[1].UserName != "ops" || accts[1].RoleID != "Operator" {
		t.Fatalf("accounts %+v %v", accts, err)
	}
	// The BMC's refusal quotes the password; the error must not.
	if err := c.SetAccount(ctx, "ops", "Xq7-pw", ""); err == nil {
		t.Fatal("a password the BMC's policy refuses was accepted")
	} else if strings.Contains(err.Error(), "Xq7-pw") || bmc.ReasonOf(err) != bmc.ReasonUnsupported {
		t.Errorf("refusal (%s): %v", bmc.ReasonOf(err), err)
	}
	for range 2 { // the second finds nothing to delete
		if err := c.DeleteAccount(ctx, "ops"); err != nil {
			t.Fatalf("delete: %v", err)
		}
	}
	var got []string
	for _, r := range e.Records() {
		got = append(got, r.Action+":"+r.Account)
	}
	if want := "[AccountCreate:ops AccountPassword:ops AccountDelete:ops]"; fmt.Sprint(got) != want {
		t.Fatalf("recorded %v, want %s", got, want)
	}
}

package settings

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/firmware/secretvalue"
	"github.com/metalhub/metalhub/internal/controller/firmware/work"
)

// raw is the Secret value the redaction tests look for.
const raw = "hunter2-raw-value"

// What is derived from a secret-sourced value is secret too: a substitution, the errors of
// parsing it, the diff that lists it, the BMC's answer to a request that carried it.
func TestDerivedFromSecretRedacted(t *testing.T) {
	vals := map[string]secretvalue.Value{"pw": secretvalue.FromSecret(raw, "Secret ns/bios key pw"), "host": secretvalue.Plain("r1")}
	if v := secretvalue.Substitute("$(host)-$(pw)", vals); !v.IsSecret() || v.Reveal() != "r1-"+raw || strings.Contains(v.String(), raw) {
		t.Errorf("substituted %q (secret %v)", v.String(), v.IsSecret())
	}
	if v := secretvalue.Substitute("$(host)-x", vals); v.IsSecret() || v.String() != "r1-x" {
		t.Errorf("plain substitution %q", v)
	}
	current := map[string]any{"NumaNodesPerSocket": float64(1), "TpmOn": true, "SetupPassword": nil, "AdminPassword": ""}
	for _, attr := range []string{"NumaNodesPerSocket", "TpmOn"} {
		_, err := differing(map[string]secretvalue.Value{attr: vals["pw"]}, current, false)
		if err == nil || strings.Contains(err.Error(), raw) || !strings.Contains(err.Error(), "Secret ns/bios key pw") {
			t.Errorf("%s: %v", attr, err)
		}
	}
	// Write-only attributes (null or empty): set until set, then in effect; never compared.
	for _, attr := range []string{"SetupPassword", "AdminPassword"} {
		want := map[string]secretvalue.Value{attr: vals["pw"]}
		d, err := differing(want, current, false)
		if err != nil || d.Send()[attr] != raw {
			t.Errorf("%s before it was set: %v %v", attr, d, err)
		}
		if s := fmt.Sprintf("%v|%+v|%#v|%s", d, d, d, d); strings.Contains(s, raw) {
			t.Errorf("diff shows the value: %s", s)
		}
		if d, err := differing(want, current, true); err != nil || len(d) != 0 {
			t.Errorf("%s once set: %v %v", attr, d, err)
		}
	}
	// A plain empty value is compared as it is.
	if d, _ := differing(map[string]secretvalue.Value{"AdminPassword": secretvalue.Plain("x")}, current, true); len(d) != 1 {
		t.Errorf("plain value against empty: %v", d)
	}
	ch := secretvalue.Changes{"SetupPassword": {Typed: raw, Want: vals["pw"]}}
	be := &bmc.Error{Reason: bmc.ReasonUnsupported, Op: "set BIOS attributes on 1", StatusCode: 400,
		Err: fmt.Errorf("The value '%s' for the property SetupPassword is not valid", raw)}
	err := secretvalue.RedactBMC(be, ch)
	if strings.Contains(err.Error(), raw) || !work.Refused(err) || !errors.Is(err, bmc.ErrUnsupported) {
		t.Errorf("redacted: %v (refused %v)", err, work.Refused(err))
	}
	if err := secretvalue.RedactBMC(be, secretvalue.Changes{"A": {Typed: "x", Want: secretvalue.Plain("x")}}); err != be {
		t.Errorf("a request without secrets: %v", err)
	}
}

package firmware

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"

	"github.com/metalhub/metalhub/internal/bmc"
)

const raw = "hunter2-raw-value"

// Every way a value is printed shows a secret-sourced one as its Secret, never as itself; a
// plain one as itself.
func TestSettingValueRedactedUnderEveryVerb(t *testing.T) {
	sec := secretValue(raw, "Secret ns/bios key pw")
	plain := plainValue(raw)
	type holder struct{ v settingValue } // unexported: fmt prints it by reflection
	type exported struct{ V settingValue }
	for _, tc := range []struct {
		name  string
		print func(v settingValue) string
		// named: the output names the Secret (a pointer print cannot).
		named bool
	}{
		{"%v", func(v settingValue) string { return fmt.Sprintf("%v", v) }, true},
		{"%+v", func(v settingValue) string { return fmt.Sprintf("%+v", v) }, true},
		{"%#v", func(v settingValue) string { return fmt.Sprintf("%#v", v) }, true},
		{"%s", func(v settingValue) string { return fmt.Sprintf("%s", v) }, true},
		{"%q", func(v settingValue) string { return fmt.Sprintf("%q", v) }, true},
		{"%x", func(v settingValue) string { return fmt.Sprintf("%x", v) }, true},
		{"%X", func(v settingValue) string { return fmt.Sprintf("%X", v) }, true},
		{"%d", func(v settingValue) string { return fmt.Sprintf("%d", v) }, true},
		{"%20.3s", func(v settingValue) string { return fmt.Sprintf("%20.3s", v) }, true},
		{"%p", func(v settingValue) string { return fmt.Sprintf("%p", v) }, false},
		{"%T", func(v settingValue) string { return fmt.Sprintf("%T", v) }, false},
		{"Sprint", func(v settingValue) string { return fmt.Sprint(v) }, true},
		{"Sprintln", func(v settingValue) string { return fmt.Sprintln(v) }, true},
		{"String", func(v settingValue) string { return v.String() }, true},
		{"GoString", func(v settingValue) string { return v.GoString() }, true},
		{"error %v", func(v settingValue) string { return fmt.Errorf("x: %v", v).Error() }, true},
		{"in a map", func(v settingValue) string { return fmt.Sprintf("%v", map[string]settingValue{"k": v}) }, true},
		{"in a slice %#v", func(v settingValue) string { return fmt.Sprintf("%#v", []settingValue{v}) }, true},
		{"unexported field %+v", func(v settingValue) string { return fmt.Sprintf("%+v", holder{v}) }, false},
		{"unexported field %#v", func(v settingValue) string { return fmt.Sprintf("%#v", holder{v}) }, false},
		{"change %v", func(v settingValue) string { return fmt.Sprintf("%v", change{typed: v.reveal(), want: v}) }, true},
		{"changes %v", func(v settingValue) string { return fmt.Sprintf("%v", changes{"A": {typed: v.reveal(), want: v}}) }, true},
		{"json", func(v settingValue) string { b, _ := json.Marshal(exported{v}); return string(b) }, true},
		{"text", func(v settingValue) string { b, _ := v.MarshalText(); return string(b) }, true},
		{"logr", func(v settingValue) string {
			var out string
			funcr.New(func(p, a string) { out += a }, funcr.Options{}).Info("m", "v", v, "in", exported{v})
			return out
		}, true},
		{"slog", func(v settingValue) string {
			var b bytes.Buffer
			slog.New(slog.NewJSONHandler(&b, nil)).Info("m", "v", v)
			return b.String()
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.print(sec)
			if strings.Contains(got, raw) || strings.Contains(got, fmt.Sprintf("%x", raw)) || strings.Contains(got, fmt.Sprintf("%X", raw)) {
				t.Errorf("secret shown: %s", got)
			}
			if tc.named && !strings.Contains(got, "Secret ns/bios key pw") {
				t.Errorf("%s does not name the Secret", got)
			}
			if tc.named && tc.name != "%x" && tc.name != "%X" && tc.name != "%d" && tc.name != "%20.3s" && !strings.Contains(tc.print(plain), raw) {
				t.Errorf("a plain value is hidden: %s", tc.print(plain))
			}
		})
	}
	if sec.reveal() != raw {
		t.Errorf("reveal = %q", sec.reveal())
	}
}

// What is derived from a secret-sourced value is secret too: a substitution, the errors of
// parsing it, the diff that lists it, the BMC's answer to a request that carried it.
func TestDerivedFromSecretRedacted(t *testing.T) {
	vals := map[string]settingValue{"pw": secretValue(raw, "Secret ns/bios key pw"), "host": plainValue("r1")}
	if v := substitute("$(host)-$(pw)", vals); !v.secret() || v.reveal() != "r1-"+raw || strings.Contains(v.String(), raw) {
		t.Errorf("substituted %q (secret %v)", v.String(), v.secret())
	}
	if v := substitute("$(host)-x", vals); v.secret() || v.String() != "r1-x" {
		t.Errorf("plain substitution %q", v)
	}
	current := map[string]any{"NumaNodesPerSocket": float64(1), "TpmOn": true, "SetupPassword": nil, "AdminPassword": ""}
	for _, attr := range []string{"NumaNodesPerSocket", "TpmOn"} {
		_, err := differing(map[string]settingValue{attr: vals["pw"]}, current, false)
		if err == nil || strings.Contains(err.Error(), raw) || !strings.Contains(err.Error(), "Secret ns/bios key pw") {
			t.Errorf("%s: %v", attr, err)
		}
	}
	// Write-only attributes (null or empty): set until set, then in effect; never compared.
	for _, attr := range []string{"SetupPassword", "AdminPassword"} {
		want := map[string]settingValue{attr: vals["pw"]}
		d, err := differing(want, current, false)
		if err != nil || d.send()[attr] != raw {
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
	if d, _ := differing(map[string]settingValue{"AdminPassword": plainValue("x")}, current, true); len(d) != 1 {
		t.Errorf("plain value against empty: %v", d)
	}
	ch := changes{"SetupPassword": {typed: raw, want: vals["pw"]}}
	be := &bmc.Error{Reason: bmc.ReasonUnsupported, Op: "set BIOS attributes on 1", StatusCode: 400,
		Err: fmt.Errorf("The value '%s' for the property SetupPassword is not valid", raw)}
	err := redactBMC(be, ch)
	if strings.Contains(err.Error(), raw) || !refused(err) || !errors.Is(err, bmc.ErrUnsupported) {
		t.Errorf("redacted: %v (refused %v)", err, refused(err))
	}
	if err := redactBMC(be, changes{"A": {typed: "x", want: plainValue("x")}}); err != be {
		t.Errorf("a request without secrets: %v", err)
	}
}

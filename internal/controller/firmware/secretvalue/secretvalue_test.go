package secretvalue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
)

const raw = "hunter2-raw-value"

// Every way a value is printed shows a secret-sourced one as its Secret, never as itself; a
// plain one as itself.
func TestSettingValueRedactedUnderEveryVerb(t *testing.T) {
	sec := FromSecret(raw, "Secret ns/bios key pw")
	plain := Plain(raw)
	type holder struct{ v Value } // unexported: fmt prints it by reflection
	type exported struct{ V Value }
	for _, tc := range []struct {
		name  string
		print func(v Value) string
		// named: the output names the Secret (a pointer print cannot).
		named bool
	}{
		{"%v", func(v Value) string { return fmt.Sprintf("%v", v) }, true},
		{"%+v", func(v Value) string { return fmt.Sprintf("%+v", v) }, true},
		{"%#v", func(v Value) string { return fmt.Sprintf("%#v", v) }, true},
		{"%s", func(v Value) string { return fmt.Sprintf("%s", v) }, true},
		{"%q", func(v Value) string { return fmt.Sprintf("%q", v) }, true},
		{"%x", func(v Value) string { return fmt.Sprintf("%x", v) }, true},
		{"%X", func(v Value) string { return fmt.Sprintf("%X", v) }, true},
		{"%d", func(v Value) string { return fmt.Sprintf("%d", v) }, true},
		{"%20.3s", func(v Value) string { return fmt.Sprintf("%20.3s", v) }, true},
		{"%p", func(v Value) string { return fmt.Sprintf("%p", v) }, false},
		{"%T", func(v Value) string { return fmt.Sprintf("%T", v) }, false},
		{"Sprint", func(v Value) string { return fmt.Sprint(v) }, true},
		{"Sprintln", func(v Value) string { return fmt.Sprintln(v) }, true},
		{"String", func(v Value) string { return v.String() }, true},
		{"GoString", func(v Value) string { return v.GoString() }, true},
		{"error %v", func(v Value) string { return fmt.Errorf("x: %v", v).Error() }, true},
		{"in a map", func(v Value) string { return fmt.Sprintf("%v", map[string]Value{"k": v}) }, true},
		{"in a slice %#v", func(v Value) string { return fmt.Sprintf("%#v", []Value{v}) }, true},
		{"unexported field %+v", func(v Value) string { return fmt.Sprintf("%+v", holder{v}) }, false},
		{"unexported field %#v", func(v Value) string { return fmt.Sprintf("%#v", holder{v}) }, false},
		{"change %v", func(v Value) string { return fmt.Sprintf("%v", Change{Typed: v.Reveal(), Want: v}) }, true},
		{"changes %v", func(v Value) string { return fmt.Sprintf("%v", Changes{"A": {Typed: v.Reveal(), Want: v}}) }, true},
		{"json", func(v Value) string { b, _ := json.Marshal(exported{v}); return string(b) }, true},
		{"text", func(v Value) string { b, _ := v.MarshalText(); return string(b) }, true},
		{"logr", func(v Value) string {
			var out string
			funcr.New(func(p, a string) { out += a }, funcr.Options{}).Info("m", "v", v, "in", exported{v})
			return out
		}, true},
		{"slog", func(v Value) string {
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
	if sec.Reveal() != raw {
		t.Errorf("reveal = %q", sec.Reveal())
	}
}

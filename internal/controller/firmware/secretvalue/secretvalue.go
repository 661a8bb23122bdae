package secretvalue

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/metalhub/metalhub/internal/bmc"
)

// Value is a setting's value with its variables replaced. A value any part of which came
// from a Secret prints as where it came from, never as itself, however it is printed: every fmt
// verb (Format), String, GoString, JSON and text marshalling, logr and slog. The text lies behind
// a pointer, so that even a reflective print of a struct holding one (an unexported field, which
// fmt does not ask to format itself) shows an address. reveal is the one way to the text: for
// the request to the BMC and for comparing with what the BMC reads back, never for a message.
type Value struct{ p *valueText }

type valueText struct {
	text string
	// from names the Secrets (and keys) the text holds values of; empty: none.
	from []string
}

// Plain is a value no Secret contributed to: it prints as itself.
func Plain(s string) Value { return Value{&valueText{text: s}} }

// FromSecret is a value read from a Secret; from names it ("Secret ns/name key k").
func FromSecret(s, from string) Value {
	return Value{&valueText{text: s, from: []string{from}}}
}

// IsSecret says whether a Secret contributed to the value.
func (v Value) IsSecret() bool { return v.p != nil && len(v.p.from) > 0 }

// Reveal is the value itself.
func (v Value) Reveal() string {
	if v.p == nil {
		return ""
	}
	return v.p.text
}

func (v Value) String() string {
	if !v.IsSecret() {
		return v.Reveal()
	}
	return "<redacted from " + strings.Join(v.p.from, ", ") + ">"
}

// Format prints String whatever the verb (%v %+v %#v %s %q %x %d ...): a verb fmt would call
// bad (%d of a string) would otherwise print the raw value.
func (v Value) Format(f fmt.State, verb rune) {
	if verb == 'q' && !v.IsSecret() {
		fmt.Fprintf(f, "%q", v.Reveal())
		return
	}
	_, _ = io.WriteString(f, v.String())
}

// GoString is String: %#v.
func (v Value) GoString() string { return v.String() }

// MarshalJSON and MarshalText marshal String.
func (v Value) MarshalJSON() ([]byte, error) { return json.Marshal(v.String()) }

func (v Value) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// MarshalLog is what logr sinks print (logr.Marshaler).
func (v Value) MarshalLog() any { return v.String() }

// LogValue is what slog prints (slog.LogValuer).
func (v Value) LogValue() slog.Value { return slog.StringValue(v.String()) }

// Substitute replaces $(key) in v with vals[key]; the result is secret when a secret value went
// into it.
func Substitute(v string, vals map[string]Value) Value {
	out := &valueText{text: v}
	for _, key := range slices.Sorted(maps.Keys(vals)) {
		ref := "$(" + key + ")"
		if !strings.Contains(out.text, ref) {
			continue
		}
		val := vals[key]
		out.text = strings.ReplaceAll(out.text, ref, val.Reveal())
		if val.IsSecret() {
			for _, f := range val.p.from {
				if !slices.Contains(out.from, f) {
					out.from = append(out.from, f)
				}
			}
		}
	}
	return Value{out}
}

// Change is one attribute to set: the value as the BMC takes it (typed), and the setting it came
// from, which is what prints.
type Change struct {
	Typed any
	Want  Value
}

// Format prints the setting, never typed: typed is the raw value.
func (c Change) Format(f fmt.State, verb rune) { c.Want.Format(f, verb) }

// Changes are a step's attributes not in effect, by name.
type Changes map[string]Change

// Send is the request's attributes: the one place the values leave as themselves.
func (c Changes) Send() map[string]any {
	out := make(map[string]any, len(c))
	for k, ch := range c {
		out[k] = ch.Typed
	}
	return out
}

// IsSecret says whether a value to send came from a Secret.
func (c Changes) IsSecret() bool {
	for _, ch := range c {
		if ch.Want.IsSecret() {
			return true
		}
	}
	return false
}

// Format lists the attributes and what they are to be, the secret ones redacted, sorted.
func (c Changes) Format(f fmt.State, _ rune) {
	parts := make([]string, 0, len(c))
	for _, k := range slices.Sorted(maps.Keys(c)) {
		parts = append(parts, fmt.Sprintf("%s=%v", k, c[k].Want))
	}
	_, _ = io.WriteString(f, strings.Join(parts, ", "))
}

// errSecretRedacted stands for what a BMC said about a request that carried a Secret's value:
// BMCs quote the value they refuse ("The value '...' for the property ... is not valid").
var errSecretRedacted = errors.New("the BMC's answer is not shown: a value sent came from a Secret")

// RedactBMC drops the BMC's own words from err when ch carried a Secret's value (see
// withoutBMCWords).
func RedactBMC(err error, ch Changes) error {
	if !ch.IsSecret() {
		return err
	}
	return WithoutBMCWords(err)
}

// WithoutBMCWords is err without what the BMC said, for a request that carried a Secret's value;
// it keeps what decides what happens next (the reason, the HTTP status, whether it was sent,
// when to retry).
func WithoutBMCWords(err error) error {
	if err == nil {
		return nil
	}
	var be *bmc.Error
	if !errors.As(err, &be) {
		return errSecretRedacted
	}
	return &bmc.Error{Reason: be.Reason, Op: be.Op, StatusCode: be.StatusCode, RetryAt: be.RetryAt, NotSent: be.NotSent, Err: errSecretRedacted}
}

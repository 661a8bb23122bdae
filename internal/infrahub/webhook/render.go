package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode"
)

// Style is how Infrahub turned its payload into the text it signed. The body it sends is a
// different text of the same payload (httpx's compact JSON with raw UTF-8), so a receiver
// cannot sign the bytes it got: it renders the payload again, key order as sent.
type Style int

const (
	// PythonJSON is Python's json.dumps with its defaults: ", " and ": " between items, every
	// character outside printable ASCII escaped as \uXXXX. Infrahub's current StandardWebhook.
	PythonJSON Style = iota
	// PythonRepr is Python's str() of the dict: single-quoted strings, True/False/None.
	// Infrahub's StandardWebhook signed this before it switched to json.dumps.
	PythonRepr
	// PythonJSONCompact is json.dumps with separators (",", ":"): compact, but still every
	// character outside printable ASCII escaped. Infrahub's newest StandardWebhook.
	PythonJSONCompact
)

func (s Style) String() string {
	switch s {
	case PythonRepr:
		return "python-repr"
	case PythonJSONCompact:
		return "python-json-compact"
	}
	return "python-json"
}

func (s Style) separators() (item, key string) {
	if s == PythonJSONCompact {
		return ",", ":"
	}
	return ", ", ": "
}

// maxDepth bounds the nesting a payload may have; Infrahub's events are three levels deep.
const maxDepth = 64

// Render renders the JSON document body in style s.
func Render(body []byte, s Style) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var out bytes.Buffer
	if err := render(dec, &out, s, 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the JSON document")
	}
	return out.Bytes(), nil
}

func render(dec *json.Decoder, out *bytes.Buffer, s Style, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("nested deeper than %d", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("reading the payload: %w", err)
	}
	itemSep, keySep := s.separators()
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			out.WriteByte('{')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					out.WriteString(itemSep)
				}
				key, err := dec.Token()
				if err != nil {
					return fmt.Errorf("reading the payload: %w", err)
				}
				k, ok := key.(string)
				if !ok {
					return errors.New("object key is not a string")
				}
				writeString(out, k, s)
				out.WriteString(keySep)
				if err := render(dec, out, s, depth+1); err != nil {
					return err
				}
			}
			out.WriteByte('}')
		case '[':
			out.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					out.WriteString(itemSep)
				}
				if err := render(dec, out, s, depth+1); err != nil {
					return err
				}
			}
			out.WriteByte(']')
		default:
			return fmt.Errorf("unexpected %q", v)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return fmt.Errorf("reading the payload: %w", err)
		}
	case string:
		writeString(out, v, s)
	case json.Number:
		// httpx writes numbers as Python's repr does, and json.dumps and str() write them the
		// same way again: the literal as sent is the literal that was signed.
		out.WriteString(v.String())
	case bool:
		switch {
		case s == PythonRepr && v:
			out.WriteString("True")
		case s == PythonRepr:
			out.WriteString("False")
		default:
			out.WriteString(strconv.FormatBool(v))
		}
	case nil:
		if s == PythonRepr {
			out.WriteString("None")
		} else {
			out.WriteString("null")
		}
	}
	return nil
}

func writeString(out *bytes.Buffer, v string, s Style) {
	if s == PythonRepr {
		writeRepr(out, v)
		return
	}
	const hex = "0123456789abcdef"
	u := func(r rune) {
		out.WriteString(`\u`)
		out.WriteByte(hex[r>>12&0xf])
		out.WriteByte(hex[r>>8&0xf])
		out.WriteByte(hex[r>>4&0xf])
		out.WriteByte(hex[r&0xf])
	}
	out.WriteByte('"')
	for _, r := range v {
		switch {
		case r == '"':
			out.WriteString(`\"`)
		case r == '\\':
			out.WriteString(`\\`)
		case r == '\n':
			out.WriteString(`\n`)
		case r == '\r':
			out.WriteString(`\r`)
		case r == '\t':
			out.WriteString(`\t`)
		case r == '\b':
			out.WriteString(`\b`)
		case r == '\f':
			out.WriteString(`\f`)
		case r >= 0x20 && r < 0x7f:
			out.WriteRune(r)
		case r > 0xffff:
			r -= 0x10000
			u(0xd800 | (r>>10)&0x3ff)
			u(0xdc00 | r&0x3ff)
		default:
			u(r)
		}
	}
	out.WriteByte('"')
}

// writeRepr writes v as Python 3's repr of a str: single quotes unless the text holds a single
// quote and no double one; printable characters as they are, the rest escaped.
func writeRepr(out *bytes.Buffer, v string) {
	q := byte('\'')
	if bytes.IndexByte([]byte(v), '\'') >= 0 && bytes.IndexByte([]byte(v), '"') < 0 {
		q = '"'
	}
	out.WriteByte(q)
	for _, r := range v {
		switch {
		case r == rune(q) || r == '\\':
			out.WriteByte('\\')
			out.WriteRune(r)
		case r == '\n':
			out.WriteString(`\n`)
		case r == '\r':
			out.WriteString(`\r`)
		case r == '\t':
			out.WriteString(`\t`)
		case r < 0x7f && r >= 0x20, r >= 0x7f && unicode.IsPrint(r):
			out.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(out, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(out, `\u%04x`, r)
		default:
			fmt.Fprintf(out, `\U%08x`, r)
		}
	}
	out.WriteByte(q)
}

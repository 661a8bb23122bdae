package infrahub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A small reader of GraphQL executable documents, enough for the emulator to answer the
// documents clients send to /graphql by what they select rather than by their operation name:
// operations with variable definitions, fields with aliases, arguments and selection sets, and
// every literal. Fragments and directives are refused (gqlError) rather than misread.

// gqlError is a GraphQL error. A request error (syntax, validation, variables) answers with
// data null; a field error nulls that root field only, as graphql-core does.
type gqlError struct {
	msg   string
	line  int // 0 = no location
	col   int
	path  []any
	field bool // an execution error of a field, not of the request
}

func (e *gqlError) Error() string { return e.msg }

func (e *gqlError) formatted() map[string]any {
	m := map[string]any{"message": e.msg}
	if e.line > 0 {
		m["locations"] = []map[string]int{{"line": e.line, "column": e.col}}
	}
	if e.path != nil {
		m["path"] = e.path
	}
	return m
}

// gqlVar is a $variable reference in a document; gqlEnum an enum literal.
type (
	gqlVar  string
	gqlEnum string
)

// gqlObject is an input object literal, its fields in document order.
type gqlObject []gqlArg

type gqlArg struct {
	name  string
	value any // string, json.Number, bool, nil, gqlEnum, gqlVar, []any, gqlObject
}

type gqlField struct {
	alias, name string
	args        []gqlArg
	sel         []*gqlField // nil: no selection set
	line, col   int
}

// key is the field's name in the answer.
func (f *gqlField) key() string {
	if f.alias != "" {
		return f.alias
	}
	return f.name
}

type gqlVarDef struct {
	typ     string // as written, e.g. "[ID!]!"
	nonNull bool
	named   string // the innermost type name
	list    bool
	def     any
	hasDef  bool
}

type gqlOperation struct {
	kind string // query | mutation | subscription
	name string
	vars map[string]gqlVarDef
	sel  []*gqlField
}

// ---- lexer ----

type gqlToken struct {
	kind      byte // 'n' name, 's' string, 'i' int, 'f' float, 'p' punctuator, 0 end
	text      string
	line, col int
}

type gqlLexer struct {
	src       string
	pos       int
	line, bol int // current line and the offset its column counts from
}

func (l *gqlLexer) errorf(line, col int, format string, a ...any) *gqlError {
	return &gqlError{msg: "Syntax Error: " + fmt.Sprintf(format, a...), line: line, col: col}
}

func (l *gqlLexer) next() (gqlToken, *gqlError) {
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == '\n':
			l.pos++
			l.line++
			l.bol = l.pos
		case c == '\r':
			l.pos++
			if l.pos < len(l.src) && l.src[l.pos] == '\n' {
				l.pos++
			}
			l.line++
			l.bol = l.pos
		case c == ' ' || c == '\t' || c == ',':
			l.pos++
		case strings.HasPrefix(l.src[l.pos:], "\ufeff"):
			l.pos += 3
		case c == '#':
			for l.pos < len(l.src) && l.src[l.pos] != '\n' && l.src[l.pos] != '\r' {
				l.pos++
			}
		default:
			return l.token()
		}
	}
	return gqlToken{line: l.line, col: l.pos - l.bol + 1}, nil
}

func isNameStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool     { return c >= '0' && c <= '9' }

func (l *gqlLexer) token() (gqlToken, *gqlError) {
	start, line, col := l.pos, l.line, l.pos-l.bol+1
	tok := func(kind byte, text string) (gqlToken, *gqlError) {
		return gqlToken{kind: kind, text: text, line: line, col: col}, nil
	}
	c := l.src[l.pos]
	switch {
	case strings.HasPrefix(l.src[l.pos:], "..."):
		l.pos += 3
		return tok('p', "...")
	case strings.IndexByte("!$&()[]{}:=@|", c) >= 0:
		l.pos++
		return tok('p', string(c))
	case isNameStart(c):
		for l.pos < len(l.src) && (isNameStart(l.src[l.pos]) || isDigit(l.src[l.pos])) {
			l.pos++
		}
		return tok('n', l.src[start:l.pos])
	case c == '-' || isDigit(c):
		return l.number(line, col)
	case c == '"':
		if strings.HasPrefix(l.src[l.pos:], `"""`) {
			return l.blockString(line, col)
		}
		return l.string(line, col)
	}
	r, _ := utf8.DecodeRuneInString(l.src[l.pos:])
	return gqlToken{}, l.errorf(line, col, "Unexpected character: %q.", r)
}

func (l *gqlLexer) number(line, col int) (gqlToken, *gqlError) {
	start := l.pos
	if l.src[l.pos] == '-' {
		l.pos++
	}
	digits := func() bool {
		s := l.pos
		for l.pos < len(l.src) && isDigit(l.src[l.pos]) {
			l.pos++
		}
		return l.pos > s
	}
	if !digits() {
		return gqlToken{}, l.errorf(line, col, "Invalid number %q.", l.src[start:l.pos])
	}
	kind := byte('i')
	if l.pos < len(l.src) && l.src[l.pos] == '.' {
		l.pos++
		kind = 'f'
		if !digits() {
			return gqlToken{}, l.errorf(line, col, "Invalid number %q.", l.src[start:l.pos])
		}
	}
	if l.pos < len(l.src) && (l.src[l.pos] == 'e' || l.src[l.pos] == 'E') {
		l.pos++
		kind = 'f'
		if l.pos < len(l.src) && (l.src[l.pos] == '+' || l.src[l.pos] == '-') {
			l.pos++
		}
		if !digits() {
			return gqlToken{}, l.errorf(line, col, "Invalid number %q.", l.src[start:l.pos])
		}
	}
	if l.pos < len(l.src) && (isNameStart(l.src[l.pos]) || l.src[l.pos] == '.') {
		return gqlToken{}, l.errorf(line, col, "Invalid number %q.", l.src[start:l.pos+1])
	}
	return gqlToken{kind: kind, text: l.src[start:l.pos], line: line, col: col}, nil
}

func (l *gqlLexer) string(line, col int) (gqlToken, *gqlError) {
	l.pos++ // opening quote
	var b strings.Builder
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == '"':
			l.pos++
			return gqlToken{kind: 's', text: b.String(), line: line, col: col}, nil
		case c == '\n' || c == '\r':
			return gqlToken{}, l.errorf(line, col, "Unterminated string.")
		case c == '\\':
			if l.pos+1 >= len(l.src) {
				return gqlToken{}, l.errorf(line, col, "Unterminated string.")
			}
			esc := l.src[l.pos+1]
			l.pos += 2
			switch esc {
			case '"', '\\', '/':
				b.WriteByte(esc)
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				if l.pos+4 > len(l.src) {
					return gqlToken{}, l.errorf(line, col, "Invalid Unicode escape sequence.")
				}
				n, err := strconv.ParseUint(l.src[l.pos:l.pos+4], 16, 32)
				if err != nil {
					return gqlToken{}, l.errorf(line, col, "Invalid Unicode escape sequence.")
				}
				l.pos += 4
				b.WriteRune(rune(n))
			default:
				return gqlToken{}, l.errorf(line, col, "Invalid character escape sequence: '\\%c'.", esc)
			}
		default:
			b.WriteByte(c)
			l.pos++
		}
	}
	return gqlToken{}, l.errorf(line, col, "Unterminated string.")
}

// blockString reads a """block string""", removing its common indentation and blank first and
// last lines as the specification's BlockStringValue does.
func (l *gqlLexer) blockString(line, col int) (gqlToken, *gqlError) {
	l.pos += 3
	var raw strings.Builder
	for l.pos < len(l.src) {
		switch {
		case strings.HasPrefix(l.src[l.pos:], `"""`):
			l.pos += 3
			return gqlToken{kind: 's', text: blockStringValue(raw.String()), line: line, col: col}, nil
		case strings.HasPrefix(l.src[l.pos:], `\"""`):
			raw.WriteString(`"""`)
			l.pos += 4
		default:
			if l.src[l.pos] == '\n' {
				l.line++
				l.bol = l.pos + 1
			}
			raw.WriteByte(l.src[l.pos])
			l.pos++
		}
	}
	return gqlToken{}, l.errorf(line, col, "Unterminated string.")
}

func blockStringValue(raw string) string {
	lines := strings.Split(strings.ReplaceAll(strings.ReplaceAll(raw, "\r\n", "\n"), "\r", "\n"), "\n")
	common := -1
	for _, ln := range lines[1:] {
		indent := len(ln) - len(strings.TrimLeft(ln, " \t"))
		if indent < len(ln) && (common < 0 || indent < common) {
			common = indent
		}
	}
	if common > 0 {
		for i := 1; i < len(lines); i++ {
			lines[i] = lines[i][min(common, len(lines[i])):]
		}
	}
	for len(lines) > 0 && strings.TrimLeft(lines[0], " \t") == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimLeft(lines[len(lines)-1], " \t") == "" {
		lines = lines[:len(lines)-1]
	}
	return strings.Join(lines, "\n")
}

// ---- parser ----

type gqlParser struct {
	lex gqlLexer
	tok gqlToken
}

func parseGraphQL(src string) ([]*gqlOperation, *gqlError) {
	p := &gqlParser{lex: gqlLexer{src: src, line: 1}}
	if err := p.advance(); err != nil {
		return nil, err
	}
	var ops []*gqlOperation
	for p.tok.kind != 0 {
		op, err := p.operation()
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
	}
	if len(ops) == 0 {
		return nil, p.lex.errorf(p.tok.line, p.tok.col, "Unexpected <EOF>.")
	}
	return ops, nil
}

func (p *gqlParser) advance() *gqlError {
	t, err := p.lex.next()
	if err != nil {
		return err
	}
	p.tok = t
	return nil
}

func (p *gqlParser) unexpected() *gqlError {
	if p.tok.kind == 0 {
		return p.lex.errorf(p.tok.line, p.tok.col, "Unexpected <EOF>.")
	}
	if p.tok.text == "..." {
		return &gqlError{msg: "The Infrahub emulator does not support fragments.", line: p.tok.line, col: p.tok.col}
	}
	if p.tok.text == "@" {
		return &gqlError{msg: "The Infrahub emulator does not support directives.", line: p.tok.line, col: p.tok.col}
	}
	return p.lex.errorf(p.tok.line, p.tok.col, "Unexpected %q.", p.tok.text)
}

func (p *gqlParser) is(kind byte, text string) bool { return p.tok.kind == kind && p.tok.text == text }

func (p *gqlParser) expect(text string) *gqlError {
	if !p.is('p', text) {
		if p.tok.kind == 0 || p.tok.text == "..." || p.tok.text == "@" {
			return p.unexpected()
		}
		return p.lex.errorf(p.tok.line, p.tok.col, "Expected %q, found %q.", text, p.tok.text)
	}
	return p.advance()
}

func (p *gqlParser) name() (string, *gqlError) {
	if p.tok.kind != 'n' {
		if p.tok.kind == 0 || p.tok.text == "..." || p.tok.text == "@" {
			return "", p.unexpected()
		}
		return "", p.lex.errorf(p.tok.line, p.tok.col, "Expected Name, found %q.", p.tok.text)
	}
	n := p.tok.text
	return n, p.advance()
}

func (p *gqlParser) operation() (*gqlOperation, *gqlError) {
	op := &gqlOperation{kind: "query", vars: map[string]gqlVarDef{}}
	if p.is('p', "{") {
		sel, err := p.selectionSet()
		op.sel = sel
		return op, err
	}
	if p.tok.kind != 'n' {
		return nil, p.unexpected()
	}
	switch p.tok.text {
	case "query", "mutation", "subscription":
		op.kind = p.tok.text
	case "fragment":
		return nil, &gqlError{msg: "The Infrahub emulator does not support fragments.", line: p.tok.line, col: p.tok.col}
	default:
		return nil, p.unexpected()
	}
	if err := p.advance(); err != nil {
		return nil, err
	}
	if p.tok.kind == 'n' {
		op.name = p.tok.text
		if err := p.advance(); err != nil {
			return nil, err
		}
	}
	if p.is('p', "(") {
		if err := p.variableDefinitions(op); err != nil {
			return nil, err
		}
	}
	if p.is('p', "@") {
		return nil, p.unexpected()
	}
	sel, err := p.selectionSet()
	op.sel = sel
	return op, err
}

func (p *gqlParser) variableDefinitions(op *gqlOperation) *gqlError {
	if err := p.advance(); err != nil { // (
		return err
	}
	for !p.is('p', ")") {
		line, col := p.tok.line, p.tok.col
		if err := p.expect("$"); err != nil {
			return err
		}
		name, err := p.name()
		if err != nil {
			return err
		}
		if err := p.expect(":"); err != nil {
			return err
		}
		var d gqlVarDef
		if d.typ, d.named, d.list, err = p.typeRef(); err != nil {
			return err
		}
		d.nonNull = strings.HasSuffix(d.typ, "!")
		if p.is('p', "=") {
			if err := p.advance(); err != nil {
				return err
			}
			if d.def, err = p.value(true); err != nil {
				return err
			}
			d.hasDef = true
		}
		if _, dup := op.vars[name]; dup {
			return &gqlError{msg: fmt.Sprintf("There can be only one variable named '$%s'.", name), line: line, col: col}
		}
		op.vars[name] = d
	}
	return p.advance() // )
}

// typeRef reads a type such as [ID!]! and returns it as written, its named type and whether
// it is a list.
func (p *gqlParser) typeRef() (string, string, bool, *gqlError) {
	var typ, named string
	list := false
	if p.is('p', "[") {
		if err := p.advance(); err != nil {
			return "", "", false, err
		}
		inner, n, _, err := p.typeRef()
		if err != nil {
			return "", "", false, err
		}
		if err := p.expect("]"); err != nil {
			return "", "", false, err
		}
		typ, named, list = "["+inner+"]", n, true
	} else {
		n, err := p.name()
		if err != nil {
			return "", "", false, err
		}
		typ, named = n, n
	}
	if p.is('p', "!") {
		typ += "!"
		if err := p.advance(); err != nil {
			return "", "", false, err
		}
	}
	return typ, named, list, nil
}

func (p *gqlParser) selectionSet() ([]*gqlField, *gqlError) {
	if err := p.expect("{"); err != nil {
		return nil, err
	}
	sel := []*gqlField{}
	for !p.is('p', "}") {
		f, err := p.field()
		if err != nil {
			return nil, err
		}
		sel = append(sel, f)
	}
	if len(sel) == 0 {
		return nil, p.lex.errorf(p.tok.line, p.tok.col, "Expected Name, found '}'.")
	}
	return sel, p.advance()
}

func (p *gqlParser) field() (*gqlField, *gqlError) {
	f := &gqlField{line: p.tok.line, col: p.tok.col}
	n, err := p.name()
	if err != nil {
		return nil, err
	}
	f.name = n
	if p.is('p', ":") {
		if err := p.advance(); err != nil {
			return nil, err
		}
		f.alias = n
		if f.name, err = p.name(); err != nil {
			return nil, err
		}
	}
	if p.is('p', "(") {
		if f.args, err = p.arguments(false, false); err != nil {
			return nil, err
		}
	}
	if p.is('p', "@") {
		return nil, p.unexpected()
	}
	if p.is('p', "{") {
		if f.sel, err = p.selectionSet(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// arguments reads (name: value ...) or, with object, {name: value ...}; constant refuses
// variables.
func (p *gqlParser) arguments(object, constant bool) ([]gqlArg, *gqlError) {
	open, closing := "(", ")"
	if object {
		open, closing = "{", "}"
	}
	line, col := p.tok.line, p.tok.col
	if err := p.expect(open); err != nil {
		return nil, err
	}
	args := []gqlArg{}
	seen := map[string]bool{}
	for !p.is('p', closing) {
		aline, acol := p.tok.line, p.tok.col
		n, err := p.name()
		if err != nil {
			return nil, err
		}
		if err := p.expect(":"); err != nil {
			return nil, err
		}
		v, err := p.value(constant)
		if err != nil {
			return nil, err
		}
		if seen[n] {
			what := "argument"
			if object {
				what = "input field"
			}
			return nil, &gqlError{msg: fmt.Sprintf("There can be only one %s named '%s'.", what, n), line: aline, col: acol}
		}
		seen[n] = true
		args = append(args, gqlArg{name: n, value: v})
	}
	if !object && len(args) == 0 {
		return nil, p.lex.errorf(line, col, "Expected Name, found ')'.")
	}
	return args, p.advance()
}

// value reads a value literal; constant refuses variables (in default values).
func (p *gqlParser) value(constant bool) (any, *gqlError) {
	t := p.tok
	switch {
	case t.kind == 's':
		return t.text, p.advance()
	case t.kind == 'i' || t.kind == 'f':
		return json.Number(t.text), p.advance()
	case t.kind == 'n':
		var v any
		switch t.text {
		case "true":
			v = true
		case "false":
			v = false
		case "null":
			v = nil
		default:
			v = gqlEnum(t.text)
		}
		return v, p.advance()
	case p.is('p', "$") && !constant:
		if err := p.advance(); err != nil {
			return nil, err
		}
		n, err := p.name()
		return gqlVar(n), err
	case p.is('p', "["):
		if err := p.advance(); err != nil {
			return nil, err
		}
		list := []any{}
		for !p.is('p', "]") {
			v, err := p.value(constant)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		return list, p.advance()
	case p.is('p', "{"):
		fields, err := p.arguments(true, constant)
		return gqlObject(fields), err
	}
	return nil, p.unexpected()
}

// ---- answers ----

// gqlMap is an answer object that keeps its fields in selection order.
type gqlMap struct {
	keys []string
	vals map[string]any
}

func (m *gqlMap) set(k string, v any) {
	if m.vals == nil {
		m.vals = map[string]any{}
	}
	if _, ok := m.vals[k]; !ok {
		m.keys = append(m.keys, k)
	}
	m.vals[k] = v
}

func (m *gqlMap) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range m.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(m.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// gqlNode is an object a resolver answers: its fields by name, its type under "__typename".
// A field's value is a scalar, a gqlNode or a []gqlNode.
type gqlNode map[string]any

// project answers the selection sel of v (a gqlNode or []gqlNode), or reports the first field
// that its type does not have or that is selected wrongly.
func project(sel []*gqlField, v any) (any, *gqlError) {
	switch v := v.(type) {
	case []gqlNode:
		out := make([]any, 0, len(v))
		for _, n := range v {
			o, err := project(sel, n)
			if err != nil {
				return nil, err
			}
			out = append(out, o)
		}
		return out, nil
	case gqlNode:
		typ, _ := v["__typename"].(string)
		out := &gqlMap{}
		for _, f := range sel {
			at := func(format string, a ...any) *gqlError {
				return &gqlError{msg: fmt.Sprintf(format, a...), line: f.line, col: f.col}
			}
			fv, ok := v[f.name]
			if !ok {
				return nil, at("Cannot query field '%s' on type '%s'.", f.name, typ)
			}
			if len(f.args) > 0 {
				return nil, at("Unknown argument '%s' on field '%s.%s'.", f.args[0].name, typ, f.name)
			}
			composite := false
			switch fv.(type) {
			case gqlNode, []gqlNode:
				composite = true
			}
			switch {
			case composite && f.sel == nil:
				return nil, at("Field '%s' of type '%s' must have a selection of subfields. Did you mean '%s { ... }'?",
					f.name, typeOf(fv), f.name)
			case !composite && f.sel != nil:
				return nil, at("Field '%s' must not have a selection since type '%s' has no subfields.", f.name, scalarType(fv))
			case composite:
				o, err := project(f.sel, fv)
				if err != nil {
					return nil, err
				}
				out.set(f.key(), o)
			default:
				out.set(f.key(), fv)
			}
		}
		return out, nil
	}
	return nil, &gqlError{msg: fmt.Sprintf("emulator: cannot project %T", v)}
}

func typeOf(v any) string {
	switch v := v.(type) {
	case gqlNode:
		t, _ := v["__typename"].(string)
		return t
	case []gqlNode:
		if len(v) > 0 {
			return "[" + typeOf(v[0]) + "]"
		}
	}
	return "?"
}

func scalarType(v any) string {
	switch v.(type) {
	case bool:
		return "Boolean"
	case int, int64:
		return "Int"
	case float64:
		return "Float"
	}
	return "String"
}

// ---- variables ----

// pick chooses the operation to run: the one named operationName, or the only one.
func pickOperation(ops []*gqlOperation, operationName string) (*gqlOperation, *gqlError) {
	if operationName != "" {
		for _, op := range ops {
			if op.name == operationName {
				return op, nil
			}
		}
		return nil, &gqlError{msg: fmt.Sprintf("Unknown operation named '%s'.", operationName)}
	}
	if len(ops) > 1 {
		return nil, &gqlError{msg: "Must provide operation name if query contains multiple operations."}
	}
	return ops[0], nil
}

// coerceVariables checks the request's variables against op's definitions, applying defaults,
// and returns the values the operation runs with.
func (op *gqlOperation) coerceVariables(given map[string]any) (map[string]any, *gqlError) {
	out := map[string]any{}
	for name, d := range op.vars {
		v, ok := given[name]
		switch {
		case !ok && d.hasDef:
			dv, err := resolveValue(d.def, nil, op)
			if err != nil {
				return nil, err
			}
			out[name] = dv
			continue
		case !ok && d.nonNull:
			return nil, &gqlError{msg: fmt.Sprintf("Variable '$%s' of required type '%s' was not provided.", name, d.typ)}
		case !ok:
			continue
		case v == nil && d.nonNull:
			return nil, &gqlError{msg: fmt.Sprintf("Variable '$%s' of non-null type '%s' must not be null.", name, d.typ)}
		}
		cv, msg := coerceScalar(d, v)
		if msg != "" {
			return nil, &gqlError{msg: fmt.Sprintf("Variable '$%s' got invalid value %s; %s", name, jsonText(v), msg)}
		}
		out[name] = cv
	}
	return out, nil
}

// coerceScalar checks a variable of a String or ID type (or a list of them; a single value is
// coerced to a list of one); other types pass as given.
func coerceScalar(d gqlVarDef, v any) (any, string) {
	if d.named != "String" && d.named != "ID" || v == nil {
		return v, ""
	}
	one := func(x any) (any, string) {
		switch x := x.(type) {
		case string:
			return x, ""
		case json.Number:
			if d.named == "ID" && !strings.ContainsAny(string(x), ".eE") {
				return string(x), ""
			}
		case nil:
			return nil, ""
		}
		return nil, fmt.Sprintf("%s cannot represent a non string value: %s", d.named, jsonText(x))
	}
	if !d.list {
		return one(v)
	}
	list, ok := v.([]any)
	if !ok {
		list = []any{v}
	}
	out := make([]any, 0, len(list))
	for _, x := range list {
		c, msg := one(x)
		if msg != "" {
			return nil, msg
		}
		out = append(out, c)
	}
	return out, ""
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// resolveValue turns a literal into plain values (string, json.Number, bool, nil, []any,
// map[string]any; enums become strings), replacing variables by their values.
func resolveValue(v any, vars map[string]any, op *gqlOperation) (any, *gqlError) {
	switch v := v.(type) {
	case gqlVar:
		if _, ok := op.vars[string(v)]; !ok {
			msg := fmt.Sprintf("Variable '$%s' is not defined.", v)
			if op.name != "" {
				msg = fmt.Sprintf("Variable '$%s' is not defined by operation '%s'.", v, op.name)
			}
			return nil, &gqlError{msg: msg}
		}
		return vars[string(v)], nil
	case gqlEnum:
		return string(v), nil
	case []any:
		out := make([]any, 0, len(v))
		for _, x := range v {
			r, err := resolveValue(x, vars, op)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, nil
	case gqlObject:
		out := make(map[string]any, len(v))
		for _, a := range v {
			r, err := resolveValue(a.value, vars, op)
			if err != nil {
				return nil, err
			}
			out[a.name] = r
		}
		return out, nil
	}
	return v, nil
}

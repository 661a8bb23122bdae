package infrahub

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Proposed changes and their comments, served through POST /graphql as Infrahub's
// CoreProposedChange and CoreChangeComment (which inherits CoreComment: text, created_at) are:
//
//	query  { CoreProposedChange(ids, state__value, state__values, name__value, source_branch__value,
//	         destination_branch__value, offset, limit) { count edges { node { id name { value } ... } } } }
//	query  { CoreChangeComment(ids, change__ids, offset, limit) { count edges { node { id text { value } } } } }
//	mutation { CoreChangeCommentCreate(data: {change: {id: ...}, text: {value: ...}}) { ok object { id } } }
//	mutation { CoreChangeCommentUpdate(data: {id: ..., text: {value: ...}}) { ok object { id } } }
//
// The document is read for its root fields, arguments and selections, never its operation name;
// anything it selects that these types lack is a GraphQL error, as from Infrahub.

// The states of a proposed change (Infrahub's ProposedChangeState); a new one is open.
const (
	ProposedChangeOpen     = "open"
	ProposedChangeMerged   = "merged"
	ProposedChangeClosed   = "closed"
	ProposedChangeCanceled = "canceled"
)

var proposedChangeStates = []string{ProposedChangeOpen, ProposedChangeMerged, ProposedChangeClosed, ProposedChangeCanceled}

// ProposedChange is one CoreProposedChange: a review of merging SourceBranch into
// DestinationBranch.
type ProposedChange struct {
	ID                string `json:"id"`
	Name              string `json:"name"`
	SourceBranch      string `json:"source_branch"`
	DestinationBranch string `json:"destination_branch"`
	State             string `json:"state"`
}

// Comment is one CoreChangeComment on a proposed change.
type Comment struct {
	ID        string    `json:"id"`
	ChangeID  string    `json:"change_id"`
	Text      string    `json:"text"`
	CreatedAt time.Time `json:"created_at"`
}

// proposedStore holds proposed changes and comments in creation order. Its zero value is
// empty; the Emulator's lock guards it.
type proposedStore struct {
	changes  []*ProposedChange
	comments []*Comment
	seq      int // seeds ids, apart from the artifact store's so that artifact ids do not shift
}

func (s *proposedStore) change(id string) *ProposedChange {
	for _, pc := range s.changes {
		if pc.ID == id {
			return pc
		}
	}
	return nil
}

func (s *proposedStore) comment(id string) *Comment {
	for _, c := range s.comments {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// ---- Go API ----

// AddProposedChange opens a proposed change of source into destination ("" = main), creating
// either branch if missing, and returns its id. It panics on an empty name or source.
func (e *Emulator) AddProposedChange(name, source, destination string) string {
	if name == "" || source == "" {
		panic("infrahub emulator: a proposed change needs a name and a source branch")
	}
	if destination == "" {
		destination = MainBranch
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s := &e.store.proposed
	s.seq++
	pc := &ProposedChange{
		ID:   uuidFrom(fmt.Sprintf("proposed-change|%d|%s", s.seq, name)),
		Name: name, SourceBranch: source, DestinationBranch: destination, State: ProposedChangeOpen,
	}
	e.store.branches[source] = true
	e.store.branches[destination] = true
	s.changes = append(s.changes, pc)
	return pc.ID
}

// SetProposedChangeState sets a proposed change's state: open, merged, closed or canceled.
func (e *Emulator) SetProposedChangeState(id, state string) error {
	if !slices.Contains(proposedChangeStates, state) {
		return fmt.Errorf("state %q: must be one of %s", state, strings.Join(proposedChangeStates, ", "))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	pc := e.store.proposed.change(id)
	if pc == nil {
		return fmt.Errorf("proposed change %q: %w", id, ErrNotFound)
	}
	pc.State = state
	return nil
}

// ProposedChanges lists the proposed changes in creation order.
func (e *Emulator) ProposedChanges() []ProposedChange {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]ProposedChange, 0, len(e.store.proposed.changes))
	for _, pc := range e.store.proposed.changes {
		out = append(out, *pc)
	}
	return out
}

// Comments lists the comments on a proposed change, oldest first (none for an unknown one).
func (e *Emulator) Comments(changeID string) []Comment {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.comments(changeID)
}

func (e *Emulator) comments(changeID string) []Comment {
	var out []Comment
	for _, c := range e.store.proposed.comments {
		if c.ChangeID == changeID {
			out = append(out, *c)
		}
	}
	return out
}

// ---- HTTP ----

// proposedChangeRoutes serve GraphQL and the control routes of proposed changes.
func (e *Emulator) proposedChangeRoutes(m *http.ServeMux) {
	m.HandleFunc("POST /graphql", e.handleGraphQL)

	m.HandleFunc("POST /emulator/proposed-changes", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Name        string `json:"name"`
			Source      string `json:"source_branch"`
			Destination string `json:"destination_branch"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil {
			http.Error(w, "invalid proposed change: "+err.Error(), http.StatusBadRequest)
			return
		}
		if in.Name == "" || in.Source == "" {
			http.Error(w, "invalid proposed change: name and source_branch are required", http.StatusBadRequest)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"id": e.AddProposedChange(in.Name, in.Source, in.Destination)})
	})
	m.HandleFunc("PUT /emulator/proposed-changes/{id}/state", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			State string `json:"state"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil {
			http.Error(w, "invalid state: "+err.Error(), http.StatusBadRequest)
			return
		}
		switch err := e.SetProposedChangeState(r.PathValue("id"), in.State); {
		case errors.Is(err, ErrNotFound):
			http.Error(w, err.Error(), http.StatusNotFound)
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	m.HandleFunc("GET /emulator/proposed-changes/{id}/comments", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		e.mu.Lock()
		known := e.store.proposed.change(id) != nil
		cs := e.comments(id)
		e.mu.Unlock()
		if !known {
			http.Error(w, fmt.Sprintf("proposed change %q: %v", id, ErrNotFound), http.StatusNotFound)
			return
		}
		if cs == nil {
			cs = []Comment{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"comments": cs})
	})
}

// maxGraphQLBody bounds a GraphQL request body.
const maxGraphQLBody = 8 << 20

func (e *Emulator) handleGraphQL(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxGraphQLBody+1))
	if err != nil {
		return // the client went away
	}
	status, answer := e.runGraphQL(w, r, body)
	if answer != nil {
		writeJSON(w, status, answer)
	}
}

// runGraphQL runs a request under the lock; the answer is written after it is released. A nil
// answer means one (401) was already written.
func (e *Emulator) runGraphQL(w http.ResponseWriter, r *http.Request, body []byte) (int, any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.authenticate(w, r) {
		return 0, nil
	}
	if len(body) > maxGraphQLBody {
		return http.StatusRequestEntityTooLarge, gqlRequestError(&gqlError{msg: "Request body too large"})
	}
	var in struct {
		Query         *string        `json:"query"`
		Variables     map[string]any `json:"variables"`
		OperationName string         `json:"operationName"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	if err := dec.Decode(&in); err != nil {
		return http.StatusBadRequest, gqlRequestError(&gqlError{msg: "Unable to parse request body as JSON: " + err.Error()})
	}
	if in.Query == nil || strings.TrimSpace(*in.Query) == "" {
		return http.StatusBadRequest, gqlRequestError(&gqlError{msg: "No GraphQL query found in the request"})
	}
	ops, gerr := parseGraphQL(*in.Query)
	if gerr != nil {
		return http.StatusOK, gqlRequestError(gerr)
	}
	op, gerr := pickOperation(ops, in.OperationName)
	if gerr != nil {
		return http.StatusOK, gqlRequestError(gerr)
	}
	return http.StatusOK, e.execute(op, in.Variables)
}

func gqlRequestError(errs ...*gqlError) map[string]any {
	out := make([]map[string]any, 0, len(errs))
	for _, err := range errs {
		out = append(out, err.formatted())
	}
	return map[string]any{"data": nil, "errors": out}
}

// gqlRootField is a field of Query or Mutation. resolve answers a gqlNode or a field error
// (with field set); example answers the shape it returns, against which a selection is checked
// before anything runs.
type gqlRootField struct {
	args     []string
	required map[string]string // the required arguments and their types
	example  func() gqlNode
	resolve  func(e *Emulator, args map[string]any) (gqlNode, *gqlError)
}

var pageArgs = []string{"offset", "limit"}

var gqlRoots = map[string]map[string]*gqlRootField{
	"query": {
		"CoreProposedChange": {
			args: append([]string{"ids", "state__value", "state__values", "name__value", "source_branch__value",
				"destination_branch__value"}, pageArgs...),
			example: func() gqlNode {
				return paginated("CoreProposedChange", 0, []gqlNode{proposedChangeNode(&ProposedChange{})})
			},
			resolve: (*Emulator).resolveProposedChanges,
		},
		"CoreChangeComment": {
			args: append([]string{"ids", "change__ids"}, pageArgs...),
			example: func() gqlNode {
				return paginated("CoreChangeComment", 0, []gqlNode{commentNode(&Comment{}, &ProposedChange{})})
			},
			resolve: (*Emulator).resolveComments,
		},
	},
	"mutation": {
		"CoreChangeCommentCreate": {
			args:     []string{"data"},
			required: map[string]string{"data": "CoreChangeCommentCreateInput!"},
			example: func() gqlNode {
				return mutationNode("CoreChangeCommentCreate", commentNode(&Comment{}, &ProposedChange{}))
			},
			resolve: (*Emulator).createComment,
		},
		"CoreChangeCommentUpdate": {
			args:     []string{"data"},
			required: map[string]string{"data": "CoreChangeCommentUpdateInput!"},
			example: func() gqlNode {
				return mutationNode("CoreChangeCommentUpdate", commentNode(&Comment{}, &ProposedChange{}))
			},
			resolve: (*Emulator).updateComment,
		},
	},
}

// execute runs op: its root fields and arguments are checked first, and their selections
// against the shape each answers, so that a wrong document changes nothing. Caller holds e.mu.
func (e *Emulator) execute(op *gqlOperation, given map[string]any) map[string]any {
	if op.kind == "subscription" {
		return gqlRequestError(&gqlError{msg: "The Infrahub emulator does not support subscriptions."})
	}
	vars, gerr := op.coerceVariables(given)
	if gerr != nil {
		return gqlRequestError(gerr)
	}
	typeName := map[string]string{"query": "Query", "mutation": "Mutation"}[op.kind]
	roots := gqlRoots[op.kind]
	args := make([]map[string]any, len(op.sel))
	for i, f := range op.sel {
		at := func(format string, a ...any) *gqlError {
			return &gqlError{msg: fmt.Sprintf(format, a...), line: f.line, col: f.col}
		}
		if f.name == "__typename" {
			if f.sel != nil || len(f.args) > 0 {
				return gqlRequestError(at("Field '__typename' must not have a selection since type 'String!' has no subfields."))
			}
			continue
		}
		root := roots[f.name]
		if root == nil {
			return gqlRequestError(at("Cannot query field '%s' on type '%s'.", f.name, typeName))
		}
		args[i] = map[string]any{}
		for _, a := range f.args {
			if !slices.Contains(root.args, a.name) {
				return gqlRequestError(at("Unknown argument '%s' on field '%s.%s'.", a.name, typeName, f.name))
			}
			v, err := resolveValue(a.value, vars, op)
			if err != nil {
				err.line, err.col = f.line, f.col
				return gqlRequestError(err)
			}
			if v != nil {
				args[i][a.name] = v
			}
		}
		for name, typ := range root.required {
			if _, ok := args[i][name]; !ok {
				return gqlRequestError(at("Field '%s' argument '%s' of type '%s' is required, but it was not provided.",
					f.name, name, typ))
			}
		}
		if f.sel == nil {
			return gqlRequestError(at("Field '%s' of type '%s' must have a selection of subfields. Did you mean '%s { ... }'?",
				f.name, typeOf(root.example()), f.name))
		}
		if _, err := project(f.sel, root.example()); err != nil {
			return gqlRequestError(err)
		}
	}
	data := &gqlMap{}
	var errs []map[string]any
	for i, f := range op.sel {
		if f.name == "__typename" {
			data.set(f.key(), typeName)
			continue
		}
		node, err := gqlRoots[op.kind][f.name].resolve(e, args[i])
		if err == nil {
			var v any
			if v, err = project(f.sel, node); err == nil {
				data.set(f.key(), v)
				continue
			}
		}
		if !err.field {
			return gqlRequestError(err)
		}
		err.line, err.col, err.path = f.line, f.col, []any{f.key()}
		errs = append(errs, err.formatted())
		data.set(f.key(), nil)
	}
	out := map[string]any{"data": data}
	if len(errs) > 0 {
		out["errors"] = errs
	}
	return out
}

// ---- answers ----

func attr(typ string, v any) gqlNode { return gqlNode{"__typename": typ, "value": v} }

func proposedChangeNode(pc *ProposedChange) gqlNode {
	return gqlNode{
		"__typename":         "CoreProposedChange",
		"id":                 pc.ID,
		"display_label":      pc.Name,
		"name":               attr("TextAttribute", pc.Name),
		"description":        attr("TextAttribute", ""),
		"source_branch":      attr("TextAttribute", pc.SourceBranch),
		"destination_branch": attr("TextAttribute", pc.DestinationBranch),
		"state":              attr("TextAttribute", pc.State),
	}
}

func commentNode(c *Comment, pc *ProposedChange) gqlNode {
	created := ""
	if !c.CreatedAt.IsZero() {
		created = c.CreatedAt.UTC().Format(time.RFC3339Nano)
	}
	return gqlNode{
		"__typename":    "CoreChangeComment",
		"id":            c.ID,
		"display_label": c.Text,
		"text":          attr("TextAttribute", c.Text),
		"created_at":    attr("DateTime", created),
		"change":        gqlNode{"__typename": "NestedEdgedCoreProposedChange", "node": proposedChangeNode(pc)},
	}
}

func paginated(kind string, count int, nodes []gqlNode) gqlNode {
	edges := make([]gqlNode, 0, len(nodes))
	for _, n := range nodes {
		edges = append(edges, gqlNode{"__typename": "Edged" + kind, "node": n})
	}
	return gqlNode{"__typename": "Paginated" + kind, "count": count, "edges": edges}
}

func mutationNode(mutation string, object gqlNode) gqlNode {
	return gqlNode{"__typename": mutation, "ok": true, "object": object}
}

// ---- resolvers (caller holds e.mu) ----

func fieldError(format string, a ...any) *gqlError {
	return &gqlError{msg: fmt.Sprintf(format, a...), field: true}
}

// stringValue reads a String or ID argument.
func stringValue(v any) (string, *gqlError) {
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		if !strings.ContainsAny(string(v), ".eE") {
			return string(v), nil
		}
	}
	return "", &gqlError{msg: "String cannot represent a non string value: " + jsonText(v)}
}

// stringList reads a list of strings; a single value is a list of one (input coercion).
func stringList(v any) ([]string, *gqlError) {
	list, ok := v.([]any)
	if !ok {
		list = []any{v}
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, err := stringValue(x)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// page applies offset and limit to n matches and returns the bounds to keep.
func page(args map[string]any, n int) (int, int, *gqlError) {
	bound := func(name string, def int) (int, *gqlError) {
		v, ok := args[name]
		if !ok {
			return def, nil
		}
		num, isNum := v.(json.Number)
		i, err := strconv.Atoi(string(num))
		if !isNum || err != nil {
			return 0, &gqlError{msg: "Int cannot represent non-integer value: " + jsonText(v)}
		}
		return max(i, 0), nil
	}
	off, err := bound("offset", 0)
	if err != nil {
		return 0, 0, err
	}
	lim, err := bound("limit", n)
	if err != nil {
		return 0, 0, err
	}
	lo := min(off, n)
	return lo, min(n, lo+lim), nil
}

// matchFilters keeps the items whose string fields equal each given __value filter and, for
// plural filters (ids, __values, __ids), are one of the given values.
func matchFilters(args map[string]any, fields map[string]func(i int) string, n int) ([]int, *gqlError) {
	keep := make([]int, 0, n)
	for i := range n {
		keep = append(keep, i)
	}
	for name, v := range args {
		if name == "offset" || name == "limit" {
			continue
		}
		get := fields[name]
		var want []string
		var err *gqlError
		if name == "ids" || strings.HasSuffix(name, "__values") || strings.HasSuffix(name, "__ids") {
			want, err = stringList(v)
		} else {
			var s string
			s, err = stringValue(v)
			want = []string{s}
		}
		if err != nil {
			return nil, err
		}
		keep = slices.DeleteFunc(keep, func(i int) bool { return !slices.Contains(want, get(i)) })
	}
	return keep, nil
}

func (e *Emulator) resolveProposedChanges(args map[string]any) (gqlNode, *gqlError) {
	pcs := e.store.proposed.changes
	keep, err := matchFilters(args, map[string]func(int) string{
		"ids":                       func(i int) string { return pcs[i].ID },
		"state__value":              func(i int) string { return pcs[i].State },
		"state__values":             func(i int) string { return pcs[i].State },
		"name__value":               func(i int) string { return pcs[i].Name },
		"source_branch__value":      func(i int) string { return pcs[i].SourceBranch },
		"destination_branch__value": func(i int) string { return pcs[i].DestinationBranch },
	}, len(pcs))
	if err != nil {
		return nil, err
	}
	lo, hi, err := page(args, len(keep))
	if err != nil {
		return nil, err
	}
	nodes := []gqlNode{}
	for _, i := range keep[lo:hi] {
		nodes = append(nodes, proposedChangeNode(pcs[i]))
	}
	return paginated("CoreProposedChange", len(keep), nodes), nil
}

func (e *Emulator) resolveComments(args map[string]any) (gqlNode, *gqlError) {
	s := &e.store.proposed
	cs := s.comments
	keep, err := matchFilters(args, map[string]func(int) string{
		"ids":         func(i int) string { return cs[i].ID },
		"change__ids": func(i int) string { return cs[i].ChangeID },
	}, len(cs))
	if err != nil {
		return nil, err
	}
	lo, hi, err := page(args, len(keep))
	if err != nil {
		return nil, err
	}
	nodes := []gqlNode{}
	for _, i := range keep[lo:hi] {
		nodes = append(nodes, commentNode(cs[i], s.change(cs[i].ChangeID)))
	}
	return paginated("CoreChangeComment", len(keep), nodes), nil
}

// inputObject reads an input object argument, refusing fields its type does not have.
func inputObject(v any, typ string, fields ...string) (map[string]any, *gqlError) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, &gqlError{msg: fmt.Sprintf("Expected type '%s' to be an object.", typ)}
	}
	for k := range m {
		if !slices.Contains(fields, k) {
			return nil, &gqlError{msg: fmt.Sprintf("Field '%s' is not defined by type '%s'.", k, typ)}
		}
	}
	return m, nil
}

// textValue reads data.text, an input object typ {value: String}; ok is false when it is absent.
func textValue(data map[string]any, typ string) (text string, ok bool, err *gqlError) {
	raw := data["text"]
	if raw == nil {
		return "", false, nil
	}
	t, err := inputObject(raw, typ, "value")
	if err != nil {
		return "", false, err
	}
	if t["value"] == nil {
		return "", false, nil
	}
	s, err := stringValue(t["value"])
	return s, err == nil, err
}

func (e *Emulator) createComment(args map[string]any) (gqlNode, *gqlError) {
	const input = "CoreChangeCommentCreateInput"
	data, err := inputObject(args["data"], input, "change", "text")
	if err != nil {
		return nil, err
	}
	if data["change"] == nil {
		return nil, &gqlError{msg: fmt.Sprintf("Field '%s.change' of required type 'RelatedNodeInput!' was not provided.", input)}
	}
	rel, err := inputObject(data["change"], "RelatedNodeInput", "id")
	if err != nil {
		return nil, err
	}
	changeID, err := stringValue(rel["id"])
	if err != nil {
		return nil, err
	}
	text, ok, err := textValue(data, "TextAttributeCreate")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &gqlError{msg: fmt.Sprintf("Field '%s.text' of required type 'TextAttributeCreate!' was not provided.", input)}
	}
	s := &e.store.proposed
	pc := s.change(changeID)
	if pc == nil {
		return nil, fieldError("Unable to find the node %s / CoreProposedChange in the database.", changeID)
	}
	s.seq++
	c := &Comment{ID: uuidFrom(fmt.Sprintf("change-comment|%d|%s", s.seq, changeID)), ChangeID: changeID, Text: text,
		CreatedAt: e.now().UTC()}
	s.comments = append(s.comments, c)
	return mutationNode("CoreChangeCommentCreate", commentNode(c, pc)), nil
}

func (e *Emulator) updateComment(args map[string]any) (gqlNode, *gqlError) {
	const input = "CoreChangeCommentUpdateInput"
	data, err := inputObject(args["data"], input, "id", "text")
	if err != nil {
		return nil, err
	}
	if data["id"] == nil {
		return nil, fieldError("Either id or hfid must be provided to update CoreChangeComment.")
	}
	id, err := stringValue(data["id"])
	if err != nil {
		return nil, err
	}
	text, ok, err := textValue(data, "TextAttributeUpdate")
	if err != nil {
		return nil, err
	}
	s := &e.store.proposed
	c := s.comment(id)
	if c == nil {
		return nil, fieldError("Unable to find the node %s / CoreChangeComment in the database.", id)
	}
	if ok {
		c.Text = text
	}
	return mutationNode("CoreChangeCommentUpdate", commentNode(c, s.change(c.ChangeID))), nil
}

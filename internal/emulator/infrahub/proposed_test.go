package infrahub

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	client "github.com/metalhub/metalhub/internal/infrahub"
)

// serveProposed serves an emulator that accepts API token "tok" and has two proposed changes,
// the second closed.
func serveProposed(t *testing.T) (e *Emulator, url, open, closed string) {
	t.Helper()
	e = New(Options{APITokens: []string{"tok"}})
	open = e.AddProposedChange("add-leaf", "feature-a", "")
	closed = e.AddProposedChange("drop-spine", "feature-b", "main")
	if err := e.SetProposedChangeState(closed, ProposedChangeClosed); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(func() { _ = e.Close(); srv.Close() })
	return e, srv.URL, open, closed
}

func newTestClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	cfg.Timeout = 5 * time.Second
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The operator's own client lists open proposed changes, comments on one, lists and updates
// its comment, and fails to update a comment that does not exist.
func TestProposedChangesThroughClient(t *testing.T) {
	e, url, open, closed := serveProposed(t)
	ctx := context.Background()
	for _, cfg := range []client.Config{
		{URL: url, APIToken: "tok"},
		{URL: url, Username: DefaultUsername, Password: DefaultPassword}, // Bearer
	} {
		pcs, err := newTestClient(t, cfg).OpenProposedChanges(ctx)
		if err != nil {
			t.Fatalf("%v: OpenProposedChanges: %v", cfg, err)
		}
		want := []client.ProposedChange{{ID: open, Name: "add-leaf", SourceBranch: "feature-a",
			DestinationBranch: "main", State: "open"}}
		if !slices.Equal(pcs, want) {
			t.Errorf("%v: OpenProposedChanges = %+v, want only %+v", cfg, pcs, want)
		}
	}
	if bs := e.Branches(); !slices.Contains(bs, "feature-a") || !slices.Contains(bs, "feature-b") {
		t.Errorf("source branches not created: %v", bs)
	}

	c := newTestClient(t, client.Config{URL: url, APIToken: "tok"})
	e.ResetRequests()
	id, err := c.CommentOnProposedChange(ctx, open, "", "preview: 3 artifacts change")
	if err != nil || id == "" {
		t.Fatalf("create comment: %q, %v", id, err)
	}
	cs, err := c.ChangeComments(ctx, open)
	if err != nil || !slices.Equal(cs, []client.Comment{{ID: id, Text: "preview: 3 artifacts change"}}) {
		t.Fatalf("ChangeComments after create = %+v, %v", cs, err)
	}
	if cs, err := c.ChangeComments(ctx, closed); err != nil || len(cs) != 0 {
		t.Errorf("comments of the other change = %+v, %v; want none", cs, err)
	}
	got, err := c.CommentOnProposedChange(ctx, open, id, "preview: 1 artifact changes")
	if err != nil || got != id {
		t.Fatalf("update comment: %q, %v", got, err)
	}
	if cs, err := c.ChangeComments(ctx, open); err != nil || !slices.Equal(cs, []client.Comment{{ID: id, Text: "preview: 1 artifact changes"}}) {
		t.Errorf("ChangeComments after update = %+v, %v", cs, err)
	}
	if cs := e.Comments(open); len(cs) != 1 || cs[0].ID != id || cs[0].Text != "preview: 1 artifact changes" || cs[0].ChangeID != open {
		t.Errorf("Comments(open) = %+v", cs)
	}

	_, err = c.CommentOnProposedChange(ctx, open, "no-such-comment", "x")
	if !errors.Is(err, client.ErrQueryFailed) || !strings.Contains(err.Error(), "Unable to find the node no-such-comment / CoreChangeComment in the database.") {
		t.Errorf("update of an unknown comment: %v; want ErrQueryFailed naming the node", err)
	}
	_, err = c.CommentOnProposedChange(ctx, "no-such-change", "", "x")
	if !errors.Is(err, client.ErrQueryFailed) || !strings.Contains(err.Error(), "no-such-change / CoreProposedChange") {
		t.Errorf("comment on an unknown change: %v; want ErrQueryFailed naming the node", err)
	}
	if cs := e.Comments(open); len(cs) != 1 {
		t.Errorf("failed mutations changed the comments: %+v", cs)
	}
	if n := e.Counters(); n.GraphQL != 7 || n.Total != 7 {
		t.Errorf("counters %+v: want 7 graphql requests", n)
	}
	if r := e.Requests(); len(r) == 0 || r[0].Class != ClassGraphQL || r[0].Path != "/graphql" {
		t.Errorf("request log: %+v", r)
	}
}

func TestProposedChangeStates(t *testing.T) {
	e, url, open, closed := serveProposed(t)
	c := newTestClient(t, client.Config{URL: url, APIToken: "tok"})
	ids := func() []string {
		pcs, err := c.OpenProposedChanges(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, pc := range pcs {
			out = append(out, pc.ID)
		}
		return out
	}
	if err := e.SetProposedChangeState(closed, ProposedChangeOpen); err != nil {
		t.Fatal(err)
	}
	if got := ids(); !slices.Equal(got, []string{open, closed}) {
		t.Errorf("both open: %v", got)
	}
	for _, s := range []string{ProposedChangeMerged, ProposedChangeCanceled} {
		if err := e.SetProposedChangeState(open, s); err != nil {
			t.Fatal(err)
		}
		if got := ids(); !slices.Equal(got, []string{closed}) {
			t.Errorf("after %s: %v", s, got)
		}
	}
	if err := e.SetProposedChangeState(open, "approved"); err == nil {
		t.Error("state approved accepted")
	}
	if err := e.SetProposedChangeState("nope", ProposedChangeOpen); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown change: %v", err)
	}
}

// gql posts a GraphQL request with the API token and returns the status and decoded answer.
func gql(t *testing.T, url, key, doc string, vars map[string]any) (int, map[string]any) {
	t.Helper()
	status, out, _ := gqlRaw(t, url, key, doc, vars)
	return status, out
}

// gqlRaw is gql that also returns the answer as sent.
func gqlRaw(t *testing.T, url, key, doc string, vars map[string]any) (int, map[string]any, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": doc, "variables": vars})
	req, _ := http.NewRequest(http.MethodPost, url+"/graphql", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("X-INFRAHUB-KEY", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("answer %d is not JSON: %s", resp.StatusCode, b)
	}
	return resp.StatusCode, out, strings.TrimSpace(string(b))
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The answer holds what the document selects, under its aliases and in its order, whatever the
// operation is called; filters and variables are read from the document.
func TestGraphQLAnswersTheSelection(t *testing.T) {
	_, url, open, closed := serveProposed(t)
	tests := []struct {
		name string
		doc  string
		vars map[string]any
		want string
	}{
		{"shorthand, count and typename", `{ CoreProposedChange { count edges { node { __typename name { value } } } } }`, nil,
			`{"data":{"CoreProposedChange":{"count":2,"edges":[{"node":{"__typename":"CoreProposedChange","name":{"value":"add-leaf"}}},{"node":{"__typename":"CoreProposedChange","name":{"value":"drop-spine"}}}]}}}`},
		{"state from a variable, aliases", `query Whatever($s: String) { pcs: CoreProposedChange(state__value: $s) { edges { node { state { v: value } id } } } }`,
			map[string]any{"s": "closed"},
			`{"data":{"pcs":{"edges":[{"node":{"state":{"v":"closed"},"id":"` + closed + `"}}]}}}`},
		{"ids and a block string", `query { CoreProposedChange(ids: ["` + open + `"], name__value: """add-leaf""") { count } }`, nil,
			`{"data":{"CoreProposedChange":{"count":1}}}`},
		{"no match", `query { CoreProposedChange(state__value: "merged") { count edges { node { id } } } }`, nil,
			`{"data":{"CoreProposedChange":{"count":0,"edges":[]}}}`},
		{"two root fields", "# comment\nquery Q($c: [ID]) { CoreChangeComment(change__ids: $c) { count }, __typename }",
			map[string]any{"c": open}, `{"data":{"CoreChangeComment":{"count":0},"__typename":"Query"}}`},
	}
	for _, tc := range tests {
		status, _, got := gqlRaw(t, url, "tok", tc.doc, tc.vars)
		if status != http.StatusOK || got != tc.want {
			t.Errorf("%s: %d %s\nwant %s", tc.name, status, got, tc.want)
		}
	}

	// A comment made with literal arguments is listed with the fields selected.
	status, got := gql(t, url, "tok", `mutation M { CoreChangeCommentCreate(data: {text: {value: "a \"b\"\n"}, change: {id: "`+open+`"}}) { ok object { id text { value } } } }`, nil)
	obj, _ := got["data"].(map[string]any)["CoreChangeCommentCreate"].(map[string]any)["object"].(map[string]any)
	if status != http.StatusOK || obj["text"].(map[string]any)["value"] != "a \"b\"\n" {
		t.Fatalf("create with literals: %d %s", status, jsonString(got))
	}
	_, got = gql(t, url, "tok", `query { CoreChangeComment(ids: $x) { edges { node { id } } } }`, nil)
	if jsonString(got["data"]) != "null" || !strings.Contains(jsonString(got), "Variable '$x' is not defined.") {
		t.Errorf("undefined variable: %s", jsonString(got))
	}
	_, got = gql(t, url, "tok", `query L($c: ID!) { CoreChangeComment(change__ids: [$c]) { edges { node { change { node { id } } created_at { value } } } } }`,
		map[string]any{"c": open})
	want := `{"data":{"CoreChangeComment":{"edges":[{"node":{"change":{"node":{"id":"` + open + `"}},"created_at":{"value":"`
	if !strings.HasPrefix(jsonString(got), want) {
		t.Errorf("comment's change: %s\nwant prefix %s", jsonString(got), want)
	}
}

// What Infrahub would refuse is a GraphQL error, with data null for a wrong document and the
// field null for a failed mutation; a refused document changes nothing.
func TestGraphQLErrors(t *testing.T) {
	e, url, open, _ := serveProposed(t)
	tests := []struct {
		name, doc string
		vars      map[string]any
		msg       string
		fieldNull string // "" = data null
	}{
		{"syntax", `query { CoreProposedChange( { count } }`, nil, "Syntax Error", ""},
		{"unknown root field", `query { CoreArtifact { count } }`, nil, "Cannot query field 'CoreArtifact' on type 'Query'.", ""},
		{"mutation field in a query", `query { CoreChangeCommentCreate(data: {}) { ok } }`, nil, "Cannot query field 'CoreChangeCommentCreate' on type 'Query'.", ""},
		{"unknown argument", `query { CoreProposedChange(state: "open") { count } }`, nil, "Unknown argument 'state' on field 'Query.CoreProposedChange'.", ""},
		{"unknown field", `query { CoreProposedChange { edges { node { id title { value } } } } }`, nil, "Cannot query field 'title' on type 'CoreProposedChange'.", ""},
		{"attribute without selection", `query { CoreProposedChange { edges { node { name } } } }`, nil, "Field 'name' of type 'TextAttribute' must have a selection of subfields.", ""},
		{"scalar with selection", `query { CoreProposedChange { count { value } } }`, nil, "Field 'count' must not have a selection", ""},
		{"root without selection", `query { CoreProposedChange }`, nil, "must have a selection of subfields", ""},
		{"missing variable", `query ($change: ID!) { CoreChangeComment(change__ids: [$change]) { count } }`, nil, "Variable '$change' of required type 'ID!' was not provided.", ""},
		{"variable of the wrong type", `mutation ($t: String!) { CoreChangeCommentCreate(data: {change: {id: "x"}, text: {value: $t}}) { ok } }`,
			map[string]any{"t": 5}, "Variable '$t' got invalid value 5; String cannot represent a non string value: 5", ""},
		{"fragment", `query { CoreProposedChange { ...F } } fragment F on PaginatedCoreProposedChange { count }`, nil, "does not support fragments", ""},
		{"missing data", `mutation { CoreChangeCommentCreate { ok } }`, nil, "argument 'data' of type 'CoreChangeCommentCreateInput!' is required", ""},
		{"missing text", `mutation { CoreChangeCommentCreate(data: {change: {id: "` + open + `"}}) { ok } }`, nil, "Field 'CoreChangeCommentCreateInput.text' of required type", ""},
		{"unknown input field", `mutation { CoreChangeCommentCreate(data: {change: {id: "` + open + `"}, text: {value: "x"}, body: "x"}) { ok } }`, nil,
			"Field 'body' is not defined by type 'CoreChangeCommentCreateInput'.", ""},
		{"unknown selection on a mutation", `mutation { CoreChangeCommentCreate(data: {change: {id: "` + open + `"}, text: {value: "x"}}) { ok object { id } done } }`, nil,
			"Cannot query field 'done' on type 'CoreChangeCommentCreate'.", ""},
		{"unknown change", `mutation { CoreChangeCommentCreate(data: {change: {id: "nope"}, text: {value: "x"}}) { ok } }`, nil,
			"Unable to find the node nope / CoreProposedChange in the database.", "CoreChangeCommentCreate"},
		{"unknown comment", `mutation { u: CoreChangeCommentUpdate(data: {id: "nope", text: {value: "x"}}) { ok } }`, nil,
			"Unable to find the node nope / CoreChangeComment in the database.", "u"},
		{"two operations, no name", `query A { CoreProposedChange { count } } query B { CoreProposedChange { count } }`, nil,
			"Must provide operation name if query contains multiple operations.", ""},
	}
	for _, tc := range tests {
		status, got := gql(t, url, "tok", tc.doc, tc.vars)
		errs, _ := got["errors"].([]any)
		if status != http.StatusOK || len(errs) != 1 || !strings.Contains(jsonString(errs[0]), tc.msg) {
			t.Errorf("%s: %d %s; want one error with %q", tc.name, status, jsonString(got), tc.msg)
			continue
		}
		wantData := "null"
		if tc.fieldNull != "" {
			wantData = `{"` + tc.fieldNull + `":null}`
		}
		if d := jsonString(got["data"]); d != wantData {
			t.Errorf("%s: data %s, want %s", tc.name, d, wantData)
		}
	}
	if cs := e.Comments(open); len(cs) != 0 {
		t.Errorf("refused documents made comments: %+v", cs)
	}
	// Authentication as for the other API routes.
	for _, key := range []string{"", "wrong"} {
		if status, got := gql(t, url, key, `{ CoreProposedChange { count } }`, nil); status != http.StatusUnauthorized || got["errors"] == nil {
			t.Errorf("key %q: %d %s, want 401", key, status, jsonString(got))
		}
	}
}

func TestProposedChangeControlRoutes(t *testing.T) {
	e := New(Options{APITokens: []string{"tok"}})
	srv := httptest.NewServer(e)
	defer srv.Close()
	do := func(method, path, body string) (int, []byte) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if s, _ := do("POST", "/emulator/proposed-changes", `{"name":"x"}`); s != http.StatusBadRequest {
		t.Errorf("no source branch: %d, want 400", s)
	}
	s, b := do("POST", "/emulator/proposed-changes", `{"name":"add-leaf","source_branch":"feature-a","destination_branch":"release"}`)
	var created struct{ ID string }
	_ = json.Unmarshal(b, &created)
	if s != http.StatusOK || created.ID == "" {
		t.Fatalf("create: %d %s", s, b)
	}
	if pcs := e.ProposedChanges(); len(pcs) != 1 || pcs[0] != (ProposedChange{ID: created.ID, Name: "add-leaf",
		SourceBranch: "feature-a", DestinationBranch: "release", State: "open"}) {
		t.Errorf("ProposedChanges = %+v", pcs)
	}
	if s, _ := do("PUT", "/emulator/proposed-changes/"+created.ID+"/state", `{"state":"approved"}`); s != http.StatusBadRequest {
		t.Errorf("unknown state: %d, want 400", s)
	}
	if s, _ := do("PUT", "/emulator/proposed-changes/nope/state", `{"state":"merged"}`); s != http.StatusNotFound {
		t.Errorf("unknown change: %d, want 404", s)
	}
	if s, b := do("PUT", "/emulator/proposed-changes/"+created.ID+"/state", `{"state":"merged"}`); s != http.StatusNoContent || e.ProposedChanges()[0].State != "merged" {
		t.Errorf("set state: %d %s; %+v", s, b, e.ProposedChanges())
	}
	if s, b := do("GET", "/emulator/proposed-changes/"+created.ID+"/comments", ""); s != http.StatusOK || string(b) != `{"comments":[]}`+"\n" {
		t.Errorf("no comments: %d %s", s, b)
	}
	c := newTestClient(t, client.Config{URL: srv.URL, APIToken: "tok"})
	id, err := c.CommentOnProposedChange(context.Background(), created.ID, "", "hello")
	if err != nil {
		t.Fatal(err)
	}
	s, b = do("GET", "/emulator/proposed-changes/"+created.ID+"/comments", "")
	var got struct{ Comments []Comment }
	_ = json.Unmarshal(b, &got)
	if s != http.StatusOK || len(got.Comments) != 1 || got.Comments[0].ID != id || got.Comments[0].Text != "hello" || got.Comments[0].CreatedAt.IsZero() {
		t.Errorf("comments: %d %s", s, b)
	}
	if s, _ := do("GET", "/emulator/proposed-changes/nope/comments", ""); s != http.StatusNotFound {
		t.Errorf("comments of an unknown change: %d, want 404", s)
	}
	if s, _ := do("PUT", "/emulator/faults/graphql", `{"kind":"status","status":503,"times":1}`); s != http.StatusNoContent {
		t.Errorf("graphql fault class: %d", s)
	}
	if _, err := c.ChangeComments(context.Background(), created.ID); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("with a graphql fault: %v, want ErrUnavailable", err)
	}
	if n := e.Counters(); n.GraphQL != 2 || n.Faulted != 1 {
		t.Errorf("counters %+v", n)
	}
}

package infrahub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// Target selects the version of Infrahub's data to read.
type Target struct {
	Branch string // "" means main
	At     string // targetDate: "" for now, RFC 3339 or now-<N>{h,m,s}; validated before use
}

func (t Target) values() (url.Values, error) {
	at, err := NormalizeTargetDate(t.At)
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Set("branch", t.Branch)
	if t.Branch == "" {
		q.Set("branch", DefaultBranch)
	}
	if at != "" {
		q.Set("at", at)
	}
	return q, nil
}

// Artifact is one CoreArtifact as returned by the stored query.
// StorageID does not change when the content does; compare Checksum.
type Artifact struct {
	ID        string
	Name      string
	StorageID string
	Checksum  string
}

// Content is a downloaded artifact.
type Content struct {
	Data        []byte
	ContentType string
}

// do sends an authenticated request; after a 401 it renews the token (refresh,
// else login) and tries once more, because access tokens expire or are revoked
// between reconciles.
func (c *Client) do(ctx context.Context, op, method, target string, body []byte, limit int64) (*response, error) {
	for attempt := 0; ; attempt++ {
		h := http.Header{}
		var used string
		if c.apiToken != "" {
			h.Set("X-INFRAHUB-KEY", c.apiToken)
		} else {
			tok, err := c.tokens.token(ctx)
			if err != nil {
				return nil, err
			}
			used = tok
			h.Set("Authorization", "Bearer "+tok)
		}
		r, err := c.send(ctx, op, method, target, body, h, limit)
		if err == nil && r.status == http.StatusUnauthorized && c.tokens != nil && attempt == 0 {
			c.tokens.invalidate(used)
			continue
		}
		return r, err
	}
}

// Login obtains a token now (no-op with API-token auth); useful to check
// credentials eagerly. Other methods log in on demand.
func (c *Client) Login(ctx context.Context) error {
	if c.tokens == nil {
		return nil
	}
	_, err := c.tokens.token(ctx)
	return err
}

// QueryArtifacts runs the stored query (DefaultQueryName when empty) with the
// variable artifactname and returns the CoreArtifact nodes it selects.
// An empty slice is a valid answer; the caller decides whether that is an error.
// When the answer carries CoreArtifact.count, it must equal the number of edges:
// a short answer fails with ErrIncompleteResult rather than look like deletions.
func (c *Client) QueryArtifacts(ctx context.Context, query, artifactName string, t Target) ([]Artifact, error) {
	if query == "" {
		query = DefaultQueryName
	}
	op := fmt.Sprintf("query %q", query)
	q, err := t.values()
	if err != nil {
		return nil, err
	}
	q.Set("update_group", "false")
	body, err := json.Marshal(map[string]any{"variables": map[string]any{"artifactname": artifactName}})
	if err != nil {
		return nil, &Error{Op: op, Kind: ErrInvalidRequest, Err: err}
	}
	r, err := c.do(ctx, op, http.MethodPost, c.endpoint("/api/query/"+url.PathEscape(query), q), body, c.jsonLimit())
	if err != nil {
		return nil, tooLargeOr(op, err)
	}
	var out struct {
		Data *struct {
			CoreArtifact *struct {
				// Count is how many artifacts the query selected; absent when the stored
				// query does not ask for it.
				Count *int `json:"count"`
				Edges []struct {
					Node struct {
						ID        string `json:"id"`
						StorageID struct {
							ID string `json:"id"`
						} `json:"storage_id"`
						Checksum struct {
							Value string `json:"value"`
						} `json:"checksum"`
						Name struct {
							Value string `json:"value"`
						} `json:"name"`
					} `json:"node"`
				} `json:"edges"`
			} `json:"CoreArtifact"`
		} `json:"data"`
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	jsonErr := json.Unmarshal(r.body, &out)
	switch {
	case r.status == http.StatusNotFound:
		return nil, &Error{Op: op, Kind: ErrQueryNotFound, StatusCode: r.status, Messages: serverMessages(r.body)}
	// Infrahub reports GraphQL errors of a stored query as 502 with an
	// errors list; a 502 without one is a proxy and means unavailable.
	case r.status == http.StatusBadGateway && len(out.Errors) > 0,
		r.status == http.StatusOK && len(out.Errors) > 0:
		return nil, &Error{Op: op, Kind: ErrQueryFailed, StatusCode: r.status, Messages: serverMessages(r.body)}
	case r.status != http.StatusOK:
		return nil, statusError(op, r)
	case jsonErr != nil:
		return nil, &Error{Op: op, Kind: ErrInvalidResponse, StatusCode: r.status, Err: jsonErr}
	case out.Data == nil || out.Data.CoreArtifact == nil:
		return nil, &Error{Op: op, Kind: ErrInvalidResponse, StatusCode: r.status,
			Err: errors.New("result has no data.CoreArtifact; the stored query must select CoreArtifact edges")}
	}
	if n := out.Data.CoreArtifact.Count; n != nil && *n != len(out.Data.CoreArtifact.Edges) {
		return nil, &Error{Op: op, Kind: ErrIncompleteResult, StatusCode: r.status,
			Err: fmt.Errorf("the answer has count %d but %d artifacts; not trusted", *n, len(out.Data.CoreArtifact.Edges))}
	}
	arts := make([]Artifact, 0, len(out.Data.CoreArtifact.Edges))
	for _, e := range out.Data.CoreArtifact.Edges {
		if e.Node.ID == "" {
			return nil, &Error{Op: op, Kind: ErrInvalidResponse, StatusCode: r.status, Err: errors.New("artifact without id")}
		}
		arts = append(arts, Artifact{
			ID:        e.Node.ID,
			Name:      e.Node.Name.Value,
			StorageID: e.Node.StorageID.ID,
			Checksum:  e.Node.Checksum.Value,
		})
	}
	return arts, nil
}

// DownloadArtifact fetches an artifact's content as of t. Bodies larger than
// MaxBodyBytes fail with ErrTooLarge rather than being truncated.
func (c *Client) DownloadArtifact(ctx context.Context, id string, t Target) (*Content, error) {
	op := fmt.Sprintf("download artifact %q", id)
	if id == "" {
		return nil, &Error{Op: op, Kind: ErrInvalidRequest, Err: errors.New("empty artifact id")}
	}
	q, err := t.values()
	if err != nil {
		return nil, err
	}
	r, err := c.do(ctx, op, http.MethodGet, c.endpoint("/api/artifact/"+url.PathEscape(id), q), nil, c.cfg.MaxBodyBytes)
	tooLarge := err == errTooLarge //nolint:errorlint // send returns the bare sentinel; a wrapped one came from the login
	if err != nil && !tooLarge {
		return nil, err
	}
	switch {
	case r.status == http.StatusNotFound:
		return nil, &Error{Op: op, Kind: ErrArtifactNotFound, StatusCode: r.status, Messages: serverMessages(r.body)}
	case r.status != http.StatusOK:
		return nil, statusError(op, r)
	case tooLarge:
		return nil, &Error{Op: op, Kind: ErrTooLarge, StatusCode: r.status,
			Err: fmt.Errorf("artifact exceeds %d bytes", c.cfg.MaxBodyBytes)}
	}
	return &Content{Data: r.body, ContentType: r.contentType}, nil
}

package infrahub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// ProposedChange is one CoreProposedChange: a review of merging SourceBranch into
// DestinationBranch.
type ProposedChange struct {
	ID                string
	Name              string
	SourceBranch      string
	DestinationBranch string
	State             string
}

// graphql runs a GraphQL document on the default branch's endpoint and decodes data into out.
// GraphQL errors fail it with ErrQueryFailed and their messages.
func (c *Client) graphql(ctx context.Context, op, doc string, vars map[string]any, out any) error {
	body, err := json.Marshal(map[string]any{"query": doc, "variables": vars})
	if err != nil {
		return &Error{Op: op, Kind: ErrInvalidRequest, Err: err}
	}
	r, err := c.do(ctx, op, http.MethodPost, c.endpoint("/graphql", nil), body, c.jsonLimit())
	if err != nil {
		return tooLargeOr(op, err)
	}
	var env struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	jsonErr := json.Unmarshal(r.body, &env)
	switch {
	case (r.status == http.StatusOK || r.status == http.StatusBadGateway) && jsonErr == nil && len(env.Errors) > 0:
		return &Error{Op: op, Kind: ErrQueryFailed, StatusCode: r.status, Messages: serverMessages(r.body)}
	case r.status != http.StatusOK:
		return statusError(op, r)
	case jsonErr != nil:
		return &Error{Op: op, Kind: ErrInvalidResponse, StatusCode: r.status, Err: jsonErr}
	case len(env.Data) == 0 || string(env.Data) == "null":
		return &Error{Op: op, Kind: ErrInvalidResponse, StatusCode: r.status, Err: errors.New("answer has no data")}
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		return &Error{Op: op, Kind: ErrInvalidResponse, StatusCode: r.status, Err: err}
	}
	return nil
}

const openProposedChanges = `query OpenProposedChanges {
  CoreProposedChange(state__value: "open") {
    edges { node { id name { value } source_branch { value } destination_branch { value } state { value } } }
  }
}`

// OpenProposedChanges lists the proposed changes that are open.
func (c *Client) OpenProposedChanges(ctx context.Context) ([]ProposedChange, error) {
	var out struct {
		CoreProposedChange *struct {
			Edges []struct {
				Node struct {
					ID   string `json:"id"`
					Name struct {
						Value string `json:"value"`
					} `json:"name"`
					Source struct {
						Value string `json:"value"`
					} `json:"source_branch"`
					Destination struct {
						Value string `json:"value"`
					} `json:"destination_branch"`
					State struct {
						Value string `json:"value"`
					} `json:"state"`
				} `json:"node"`
			} `json:"edges"`
		} `json:"CoreProposedChange"`
	}
	const op = "list open proposed changes"
	if err := c.graphql(ctx, op, openProposedChanges, nil, &out); err != nil {
		return nil, err
	}
	if out.CoreProposedChange == nil {
		return nil, &Error{Op: op, Kind: ErrInvalidResponse, Err: errors.New("answer has no CoreProposedChange")}
	}
	pcs := make([]ProposedChange, 0, len(out.CoreProposedChange.Edges))
	for _, e := range out.CoreProposedChange.Edges {
		n := e.Node
		pcs = append(pcs, ProposedChange{ID: n.ID, Name: n.Name.Value, SourceBranch: n.Source.Value,
			DestinationBranch: n.Destination.Value, State: n.State.Value})
	}
	return pcs, nil
}

const createComment = `mutation CreateChangeComment($change: String!, $text: String!) {
  CoreChangeCommentCreate(data: {change: {id: $change}, text: {value: $text}}) { ok object { id } }
}`

const updateComment = `mutation UpdateChangeComment($id: String!, $text: String!) {
  CoreChangeCommentUpdate(data: {id: $id, text: {value: $text}}) { ok }
}`

// CommentOnProposedChange posts text as a comment on the proposed change, or, with commentID,
// replaces that comment's text (one comment per preview, kept current, rather than one more on
// every change). It returns the comment's id.
func (c *Client) CommentOnProposedChange(ctx context.Context, change, commentID, text string) (string, error) {
	if commentID != "" {
		var out struct {
			Update *struct {
				OK bool `json:"ok"`
			} `json:"CoreChangeCommentUpdate"`
		}
		op := fmt.Sprintf("update comment %q", commentID)
		if err := c.graphql(ctx, op, updateComment, map[string]any{"id": commentID, "text": text}, &out); err != nil {
			return "", err
		}
		if out.Update == nil || !out.Update.OK {
			return "", &Error{Op: op, Kind: ErrQueryFailed, Err: errors.New("the update was not ok")}
		}
		return commentID, nil
	}
	var out struct {
		Create *struct {
			OK     bool `json:"ok"`
			Object struct {
				ID string `json:"id"`
			} `json:"object"`
		} `json:"CoreChangeCommentCreate"`
	}
	op := fmt.Sprintf("comment on proposed change %q", change)
	if err := c.graphql(ctx, op, createComment, map[string]any{"change": change, "text": text}, &out); err != nil {
		return "", err
	}
	if out.Create == nil || !out.Create.OK || out.Create.Object.ID == "" {
		return "", &Error{Op: op, Kind: ErrQueryFailed, Err: errors.New("the comment was not created")}
	}
	return out.Create.Object.ID, nil
}

// Comment is one CoreChangeComment.
type Comment struct {
	ID   string
	Text string
}

const changeComments = `query ChangeComments($change: ID!) {
  CoreChangeComment(change__ids: [$change]) { edges { node { id text { value } } } }
}`

// ChangeComments lists the comments on a proposed change.
func (c *Client) ChangeComments(ctx context.Context, change string) ([]Comment, error) {
	var out struct {
		CoreChangeComment *struct {
			Edges []struct {
				Node struct {
					ID   string `json:"id"`
					Text struct {
						Value string `json:"value"`
					} `json:"text"`
				} `json:"node"`
			} `json:"edges"`
		} `json:"CoreChangeComment"`
	}
	op := fmt.Sprintf("list the comments of proposed change %q", change)
	if err := c.graphql(ctx, op, changeComments, map[string]any{"change": change}, &out); err != nil {
		return nil, err
	}
	if out.CoreChangeComment == nil {
		return nil, &Error{Op: op, Kind: ErrInvalidResponse, Err: errors.New("answer has no CoreChangeComment")}
	}
	cs := make([]Comment, 0, len(out.CoreChangeComment.Edges))
	for _, e := range out.CoreChangeComment.Edges {
		cs = append(cs, Comment{ID: e.Node.ID, Text: e.Node.Text.Value})
	}
	return cs, nil
}

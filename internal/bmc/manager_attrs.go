package bmc

import (
	"context"
	"slices"
	"sort"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

// managerURI is the first manager of the service, as Manager reads it.
func (c *conn) managerURI(api *gofish.APIClient) (string, error) {
	if c.root.Managers.ID == "" {
		return "", newError(ReasonNotFound, "read manager", "service root has no Managers collection")
	}
	coll, err := schemas.GetCollection(api, c.root.Managers.ID)
	if err != nil {
		return "", err
	}
	if len(coll.ItemLinks) == 0 {
		return "", newError(ReasonNotFound, "read manager", "Managers collection is empty")
	}
	links := slices.Clone(coll.ItemLinks)
	sort.Strings(links)
	return links[0], nil
}

// ManagerAttributes implements BMC.
func (c *conn) ManagerAttributes(ctx context.Context) (map[string]any, error) {
	const op = "read manager attributes"
	api, err := c.client(ctx)
	if err != nil {
		return nil, wrap(op, err)
	}
	uri, err := c.managerURI(api)
	if err != nil {
		return nil, wrap(op, err)
	}
	var res struct{ Attributes map[string]any }
	if err := getJSON(api, uri+"/Attributes", &res); err != nil {
		if ReasonOf(err) == ReasonNotFound {
			return nil, newError(ReasonUnsupported, op, "the manager has no Attributes resource")
		}
		return nil, wrap(op, err)
	}
	return res.Attributes, nil
}

// SetManagerAttributes implements BMC.
func (c *conn) SetManagerAttributes(ctx context.Context, attrs map[string]any) error {
	const op = "set manager attributes"
	current, err := c.ManagerAttributes(ctx)
	if err != nil {
		return notSent(op, err)
	}
	for k := range attrs {
		if _, ok := current[k]; !ok {
			return newError(ReasonInvalidConfig, op, "the BMC has no attribute %q", k)
		}
	}
	api, err := c.client(ctx)
	if err != nil {
		return notSent(op, err)
	}
	uri, err := c.managerURI(api)
	if err != nil {
		return notSent(op, err)
	}
	resp, err := api.Patch(uri+"/Attributes", map[string]any{"Attributes": attrs})
	if err != nil {
		return wrap(op, err)
	}
	_ = resp.Body.Close()
	c.log.V(1).Info("manager attributes set", "count", len(attrs))
	return nil
}

package bmc

import (
	"context"

	"github.com/metalhub/metalhub/internal/bmc/wire"
)

// ManagerAttributes implements BMC.
func (c *conn) ManagerAttributes(ctx context.Context) (map[string]any, error) {
	const op = "read manager attributes"
	api, err := c.client(ctx)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	uri, err := wire.FirstManager(api, &c.root)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	var res struct{ Attributes map[string]any }
	if err := wire.GetJSON(api, uri+"/Attributes", &res); err != nil {
		if ReasonOf(err) == ReasonNotFound {
			return nil, wire.New(ReasonUnsupported, op, "the manager has no Attributes resource")
		}
		return nil, wire.Wrap(op, err)
	}
	return res.Attributes, nil
}

// SetManagerAttributes implements BMC.
func (c *conn) SetManagerAttributes(ctx context.Context, attrs map[string]any) error {
	const op = "set manager attributes"
	current, err := c.ManagerAttributes(ctx)
	if err != nil {
		return wire.NotSent(op, err)
	}
	for k := range attrs {
		if _, ok := current[k]; !ok {
			return wire.New(ReasonInvalidConfig, op, "the BMC has no attribute %q", k)
		}
	}
	api, err := c.client(ctx)
	if err != nil {
		return wire.NotSent(op, err)
	}
	uri, err := wire.FirstManager(api, &c.root)
	if err != nil {
		return wire.NotSent(op, err)
	}
	resp, err := api.Patch(uri+"/Attributes", map[string]any{"Attributes": attrs})
	if err != nil {
		return wire.Wrap(op, err)
	}
	_ = resp.Body.Close()
	c.log.V(1).Info("manager attributes set", "count", len(attrs))
	return nil
}

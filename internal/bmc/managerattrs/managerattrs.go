package managerattrs

import (
	"context"

	"github.com/metalhub/metalhub/internal/bmc/wire"
)

// Read does the work of bmc.BMC.ManagerAttributes.
func Read(ctx context.Context, c wire.Conn) (map[string]any, error) {
	const op = "read manager attributes"
	api, err := c.Client(ctx)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	uri, err := wire.FirstManager(api, c.Root())
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	var res struct{ Attributes map[string]any }
	if err := wire.GetJSON(api, uri+"/Attributes", &res); err != nil {
		if wire.ReasonOf(err) == wire.ReasonNotFound {
			return nil, wire.New(wire.ReasonUnsupported, op, "the manager has no Attributes resource")
		}
		return nil, wire.Wrap(op, err)
	}
	return res.Attributes, nil
}

// Set does the work of bmc.BMC.SetManagerAttributes.
func Set(ctx context.Context, c wire.Conn, attrs map[string]any) error {
	const op = "set manager attributes"
	current, err := Read(ctx, c)
	if err != nil {
		return wire.NotSent(op, err)
	}
	for k := range attrs {
		if _, ok := current[k]; !ok {
			return wire.New(wire.ReasonInvalidConfig, op, "the BMC has no attribute %q", k)
		}
	}
	api, err := c.Client(ctx)
	if err != nil {
		return wire.NotSent(op, err)
	}
	uri, err := wire.FirstManager(api, c.Root())
	if err != nil {
		return wire.NotSent(op, err)
	}
	resp, err := api.Patch(uri+"/Attributes", map[string]any{"Attributes": attrs})
	if err != nil {
		return wire.Wrap(op, err)
	}
	_ = resp.Body.Close()
	c.Log().V(1).Info("manager attributes set", "count", len(attrs))
	return nil
}

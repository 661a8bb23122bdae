package bmc

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/metalhub/metalhub/internal/bmc/wire"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

var _ BMC = (*conn)(nil)

// Systems implements BMC.
func (c *conn) Systems(ctx context.Context) ([]SystemSummary, error) {
	const op = "list systems"
	api, err := c.client(ctx)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	if c.root.Systems.ID == "" {
		return nil, wire.New(ReasonNotFound, op, "service root has no Systems collection")
	}
	systems, err := schemas.GetCollectionObjects[schemas.ComputerSystem](api, c.root.Systems.ID)
	if err != nil && len(systems) == 0 {
		return nil, wire.Wrap(op, err)
	}
	if err != nil {
		// Some members failed: return the ones we could read.
		c.log.Info("some systems could not be read", "error", err.Error())
	}
	out := make([]SystemSummary, 0, len(systems))
	c.mu.Lock()
	for _, s := range systems {
		c.systems[s.ID] = s.ODataID
		out = append(out, SystemSummary{
			ID: s.ID, ODataID: s.ODataID, Name: s.Name, UUID: s.UUID,
			Manufacturer: s.Manufacturer, Model: s.Model, SerialNumber: s.SerialNumber,
			PowerState: PowerState(s.PowerState),
		})
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ODataID < out[j].ODataID })
	return out, nil
}

// System implements BMC.
func (c *conn) System(ctx context.Context, systemID string) (*SystemStatus, error) {
	op := "read system " + systemID
	sys, err := c.getSystem(ctx, systemID)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	st := &SystemStatus{
		ID:           sys.ID,
		UUID:         sys.UUID,
		SerialNumber: sys.SerialNumber,
		PowerState:   PowerState(sys.PowerState),
		Health:       string(sys.Status.Health),
		Boot: BootOverride{
			Enabled:     string(sys.Boot.BootSourceOverrideEnabled),
			Target:      string(sys.Boot.BootSourceOverrideTarget),
			Mode:        string(sys.Boot.BootSourceOverrideMode),
			HTTPBootURI: sys.Boot.HTTPBootURI,
		},
		LastResetTime: sys.LastResetTime,
		BiosVersion:   sys.BiosVersion,
		IndicatorLED:  indicatorLED(sys),
	}
	allow := readBootAllowances(sys.RawData)
	st.BootTargets, st.HTTPBoot = allow.Targets, allow.httpBoot()
	st.BootOrder = sys.Boot.BootOrder
	// Only the inline annotation: reading ActionInfo here would double the
	// cost of every status poll.
	st.ResetTypes = inlineResetTypes(sys.RawData)
	return st, nil
}

// resetCandidates lists reset types for an action in order of preference.
func resetCandidates(action PowerAction, state PowerState, forceFallback bool) ([]schemas.ResetType, error) {
	switch action {
	case PowerOn:
		c := []schemas.ResetType{schemas.OnResetType, schemas.ForceOnResetType}
		if state == PowerStateOff {
			// A button push only means "on" when the system is off.
			c = append(c, schemas.PushPowerButtonResetType)
		}
		return c, nil
	case PowerOff:
		return []schemas.ResetType{schemas.ForceOffResetType}, nil
	case PowerGracefulOff:
		c := []schemas.ResetType{schemas.GracefulShutdownResetType}
		if forceFallback {
			c = append(c, schemas.ForceOffResetType)
		}
		return c, nil
	case PowerRestart:
		c := []schemas.ResetType{schemas.GracefulRestartResetType}
		if forceFallback {
			c = append(c, schemas.ForceRestartResetType, schemas.PowerCycleResetType)
		}
		return c, nil
	case PowerForceRestart:
		return []schemas.ResetType{schemas.ForceRestartResetType, schemas.PowerCycleResetType}, nil
	}
	return nil, fmt.Errorf("unknown power action %q", action)
}

// chooseResetType picks the first candidate the system allows. With no
// advertised list the first candidate is tried and the BMC has the last word.
func chooseResetType(candidates []schemas.ResetType, allowed []string) (schemas.ResetType, bool) {
	if len(allowed) == 0 {
		return candidates[0], true
	}
	for _, c := range candidates {
		if slices.Contains(allowed, string(c)) {
			return c, true
		}
	}
	return "", false
}

// alreadyThere reports whether the observed state makes the action a no-op.
func alreadyThere(action PowerAction, state PowerState) bool {
	switch action {
	case PowerOn:
		return state == PowerStateOn || state == PowerStatePoweringOn
	case PowerOff, PowerGracefulOff:
		return state == PowerStateOff || state == PowerStatePoweringOff
	}
	return false
}

// Power implements BMC.
func (c *conn) Power(ctx context.Context, systemID string, action PowerAction, opts ...PowerOption) error {
	req, err := c.PreparePower(ctx, systemID, action, opts...)
	if err != nil || req == nil {
		return err
	}
	return req.Send()
}

// PowerRequest is a reset PreparePower made ready: the system read, the reset type chosen.
type PowerRequest struct {
	c   *conn
	sys *schemas.ComputerSystem
	rt  schemas.ResetType
	op  string
}

// PreparePower implements BMC.
func (c *conn) PreparePower(ctx context.Context, systemID string, action PowerAction, opts ...PowerOption) (*PowerRequest, error) {
	op := fmt.Sprintf("power %s %s", action, systemID)
	var o powerOptions
	for _, f := range opts {
		f(&o)
	}
	sys, err := c.getSystem(ctx, systemID)
	if err != nil {
		return nil, wire.NotSent(op, err)
	}
	state := PowerState(sys.PowerState)
	candidates, err := resetCandidates(action, state, o.forceFallback)
	if err != nil {
		return nil, &Error{Reason: ReasonInvalidConfig, Op: op, Err: err}
	}
	if alreadyThere(action, state) {
		return nil, nil
	}
	allowed, err := c.resetTypes(sys)
	if err != nil {
		// Not knowing the list is not fatal: the BMC rejects what it lacks.
		c.log.V(1).Info("could not read allowed reset types", "system", sys.ID, "error", err.Error())
	}
	rt, ok := chooseResetType(candidates, allowed)
	if !ok {
		return nil, wire.New(ReasonUnsupported, op, "system allows reset types %v, none of %v", allowed, candidates)
	}
	return &PowerRequest{c: c, sys: sys, rt: rt, op: op}, nil
}

// PowerState is the system's power state as read just before the request.
func (r *PowerRequest) PowerState() PowerState { return PowerState(r.sys.PowerState) }

// LastResetTime is the system's LastResetTime as read just before the request ("" when the
// BMC does not say): a caller that cannot learn the request's outcome compares it later.
func (r *PowerRequest) LastResetTime() string { return r.sys.LastResetTime }

// Send sends the prepared reset, under the context it was prepared with.
func (r *PowerRequest) Send() error {
	// Actions are not conditional: an If-Match on POST only invites a 412
	// after the power state (and so the ETag) moved.
	r.sys.DisableEtagMatch(true)
	if _, err := r.sys.Reset(r.rt); err != nil {
		return wire.Wrap(fmt.Sprintf("%s (ResetType %s)", r.op, r.rt), err)
	}
	r.c.log.V(1).Info("reset accepted", "system", r.sys.ID, "resetType", r.rt)
	return nil
}

// resetTypes returns the advertised reset types, from the inline
// AllowableValues or the ActionInfo resource.
func (c *conn) resetTypes(sys *schemas.ComputerSystem) ([]string, error) {
	if inline := inlineResetTypes(sys.RawData); len(inline) > 0 {
		return inline, nil
	}
	types, err := sys.GetSupportedResetTypes()
	out := make([]string, 0, len(types))
	for _, t := range types {
		out = append(out, string(t))
	}
	return out, err
}

func inlineResetTypes(raw []byte) []string {
	var v struct {
		Actions struct {
			Reset struct {
				Allowed []string `json:"ResetType@Redfish.AllowableValues"`
			} `json:"#ComputerSystem.Reset"`
		}
	}
	_ = json.Unmarshal(raw, &v)
	return v.Actions.Reset.Allowed
}

// bootAllowances reads the Boot annotations gofish does not model.
type bootAllowances struct {
	Targets []string `json:"BootSourceOverrideTarget@Redfish.AllowableValues"`
	Modes   []string `json:"BootSourceOverrideMode@Redfish.AllowableValues"`
	// hasHTTPURI: the Boot object has the HttpBootUri property.
	hasHTTPURI bool
}

func readBootAllowances(raw []byte) bootAllowances {
	var v struct{ Boot bootAllowances }
	_ = json.Unmarshal(raw, &v)
	var keys struct{ Boot map[string]json.RawMessage }
	_ = json.Unmarshal(raw, &keys)
	_, v.Boot.hasHTTPURI = keys.Boot["HttpBootUri"]
	return v.Boot
}

// httpBoot reports whether the system can boot UefiHttp: listed as a target or, where the
// targets are not listed, a Boot object with HttpBootUri (the property comes with the feature).
// A system that says nothing either way is not sent one: an override it does not know is
// ignored by some BMCs, and the box would boot its disk instead.
func (a bootAllowances) httpBoot() bool {
	if len(a.Targets) > 0 {
		return slices.Contains(a.Targets, string(BootUefiHttp))
	}
	return a.hasHTTPURI
}

// SetBootOnce implements BMC.
func (c *conn) SetBootOnce(ctx context.Context, systemID string, target BootTarget, opts ...BootOption) error {
	var o bootOptions
	for _, opt := range opts {
		opt(&o)
	}
	op := fmt.Sprintf("set boot override %s once on %s", target, systemID)
	if o.httpURI != "" && target != BootUefiHttp {
		return wire.New(ReasonInvalidConfig, op, "an HTTP boot URI goes with the UefiHttp target only")
	}
	for attempt := 0; ; attempt++ {
		sys, err := c.getSystem(ctx, systemID)
		if err != nil {
			return wire.Wrap(op, err)
		}
		allow := readBootAllowances(sys.RawData)
		if len(allow.Targets) > 0 && !slices.Contains(allow.Targets, string(target)) {
			return wire.New(ReasonUnsupported, op, "system allows boot targets %v", allow.Targets)
		}
		if target == BootUefiHttp && !allow.httpBoot() {
			return wire.New(ReasonUnsupported, op, "system does not advertise UEFI HTTP boot")
		}
		boot := &schemas.Boot{
			BootSourceOverrideEnabled: schemas.OnceBootSourceOverrideEnabled,
			BootSourceOverrideTarget:  schemas.BootSource(target),
			HTTPBootURI:               o.httpURI,
		}
		// Setting the mode where it is not advertised gets 400 on some BMCs.
		if slices.Contains(allow.Modes, string(schemas.UEFIBootSourceOverrideMode)) {
			boot.BootSourceOverrideMode = schemas.UEFIBootSourceOverrideMode
		}
		// gofish sends If-Match with the ETag read above; a 412 means the
		// system changed in between: read it again once.
		err = sys.SetBoot(boot)
		if err == nil {
			c.log.V(1).Info("boot override set", "system", sys.ID, "target", target, "mode", boot.BootSourceOverrideMode)
			return nil
		}
		if attempt == 0 && schemas.Is412PreconditionFailed(err) {
			continue
		}
		return wire.Wrap(op, err)
	}
}

// indicatorLED reads the locator LED: IndicatorLED where reported, else LocationIndicatorActive.
func indicatorLED(sys *schemas.ComputerSystem) string {
	switch led := string(sys.IndicatorLED); {
	case led == "Lit" || led == "Blinking" || led == "Off":
		return led
	case sys.LocationIndicatorActive != nil && *sys.LocationIndicatorActive:
		return "Lit"
	case sys.LocationIndicatorActive != nil:
		return "Off"
	}
	return ""
}

// SetIndicatorLED implements BMC.
func (c *conn) SetIndicatorLED(ctx context.Context, systemID string, led string) error {
	op := fmt.Sprintf("set locator LED %s on %s", led, systemID)
	if led != "Lit" && led != "Blinking" && led != "Off" {
		return wire.New(ReasonUnsupported, op, "the LED can be Lit, Blinking or Off")
	}
	sys, err := c.getSystem(ctx, systemID)
	if err != nil {
		return wire.Wrap(op, err)
	}
	var body any = struct{ IndicatorLED string }{led}
	if sys.LocationIndicatorActive != nil && led != "Blinking" {
		body = struct{ LocationIndicatorActive bool }{led == "Lit"}
	}
	if err := sys.Patch(sys.ODataID, body); err != nil {
		return wire.Wrap(op, err)
	}
	c.log.V(1).Info("locator LED set", "system", sys.ID, "led", led)
	return nil
}

// Manager implements BMC.
func (c *conn) Manager(ctx context.Context) (*ManagerInfo, error) {
	const op = "read manager"
	api, err := c.client(ctx)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	uri, err := wire.FirstManager(api, &c.root)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	return c.readManager(api, uri)
}

// ResetManager implements BMC.
func (c *conn) ResetManager(ctx context.Context) error {
	const op = "reset manager"
	api, err := c.client(ctx)
	if err != nil {
		return wire.NotSent(op, err)
	}
	if c.root.Managers.ID == "" {
		return wire.New(ReasonNotFound, op, "service root has no Managers collection")
	}
	coll, err := schemas.GetCollection(api, c.root.Managers.ID)
	if err != nil {
		return wire.NotSent(op, err)
	}
	if len(coll.ItemLinks) == 0 {
		return wire.New(ReasonNotFound, op, "Managers collection is empty")
	}
	links := slices.Clone(coll.ItemLinks)
	sort.Strings(links)
	m, err := schemas.GetObject[schemas.Manager](api, links[0])
	if err != nil {
		return wire.NotSent(op, err)
	}
	rt := schemas.GracefulRestartResetType
	if len(m.SupportedResetTypes) > 0 && !slices.Contains(m.SupportedResetTypes, rt) {
		rt = schemas.ForceRestartResetType
	}
	m.DisableEtagMatch(true)
	if _, err := m.Reset(rt); err != nil {
		return wire.Wrap(fmt.Sprintf("%s (ResetType %s)", op, rt), err)
	}
	return nil
}

func (c *conn) readManager(api *gofish.APIClient, uri string) (*ManagerInfo, error) {
	m, err := schemas.GetObject[schemas.Manager](api, uri)
	if err != nil {
		return nil, wire.Wrap("read manager "+uri, err)
	}
	info := &ManagerInfo{
		ID: m.ID, Manufacturer: m.Manufacturer, Model: m.Model,
		FirmwareVersion: m.FirmwareVersion, UUID: m.UUID, LastResetTime: m.LastResetTime,
	}
	// The MAC is a nicety: a broken EthernetInterfaces must not hide the rest.
	if nics, err := m.EthernetInterfaces(); err == nil || len(nics) > 0 {
		sort.Slice(nics, func(i, j int) bool { return nics[i].ODataID < nics[j].ODataID })
		for _, n := range nics {
			if mac := cmp.Or(n.MACAddress, n.PermanentMACAddress); mac != "" {
				info.MACAddress = strings.ToLower(mac)
				break
			}
		}
	}
	return info, nil
}

// getSystem reads one ComputerSystem, resolving its Id to a URI through the
// Systems collection (cached; re-resolved once on 404).
func (c *conn) getSystem(ctx context.Context, systemID string) (*schemas.ComputerSystem, error) {
	if strings.TrimSpace(systemID) == "" {
		return nil, wire.New(ReasonInvalidConfig, "resolve system", "system ID is empty")
	}
	api, err := c.client(ctx)
	if err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 2; attempt++ {
		uri, cached, err := c.resolveSystem(api, systemID)
		if err != nil {
			return nil, err
		}
		sys, err := schemas.GetObject[schemas.ComputerSystem](api, uri)
		if err == nil {
			c.logs.saw(uri, sys, c.opts.Now())
			// The identity is checked in the read every action is prepared from, so nothing
			// lies between the proof and the request but the request itself.
			if err := checkIdentity(ctx, systemID, sys); err != nil {
				return nil, err
			}
			return sys, nil
		}
		if !cached || ReasonOf(err) != ReasonNotFound {
			return nil, wire.Wrap("read "+uri, err)
		}
		c.mu.Lock()
		delete(c.systems, systemID)
		c.mu.Unlock()
	}
	return nil, wire.New(ReasonNotFound, "resolve system", "system %q not found", systemID)
}

func (c *conn) resolveSystem(api *gofish.APIClient, systemID string) (uri string, cached bool, err error) {
	if strings.HasPrefix(systemID, "/redfish/") {
		return systemID, false, nil
	}
	c.mu.Lock()
	uri, ok := c.systems[systemID]
	c.mu.Unlock()
	if ok {
		return uri, true, nil
	}
	if c.root.Systems.ID == "" {
		return "", false, wire.New(ReasonNotFound, "resolve system", "service root has no Systems collection")
	}
	coll, err := schemas.GetCollection(api, c.root.Systems.ID)
	if err != nil {
		return "", false, wire.Wrap("list systems", err)
	}
	remember := func(id, uri string) {
		c.mu.Lock()
		c.systems[id] = uri
		c.mu.Unlock()
	}
	// Usually the Id is the last path segment; do not rely on it (aliases,
	// UUID paths): fall back to reading members.
	for _, link := range coll.ItemLinks {
		if wire.LastSegment(link) == systemID {
			remember(systemID, link)
			return link, false, nil
		}
	}
	ids := make([]string, 0, len(coll.ItemLinks))
	for _, link := range coll.ItemLinks {
		sys, err := schemas.GetObject[schemas.ComputerSystem](api, link)
		if err != nil {
			continue
		}
		ids = append(ids, sys.ID)
		if sys.ID == systemID || strings.EqualFold(sys.UUID, systemID) {
			remember(systemID, link)
			return link, false, nil
		}
	}
	return "", false, wire.New(ReasonNotFound, "resolve system", "system %q not found (systems: %s)", systemID, strings.Join(ids, ", "))
}

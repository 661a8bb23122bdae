package telemetry

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/metalhub/metalhub/internal/bmc/wire"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

// Telemetry is one system's readings, from the first chassis it links (its own enclosure: a
// blade's further chassis are the shared enclosure's, whose draw is not the blade's).
type Telemetry struct {
	// Chassis is the Id of the chassis read ("" when the system links none).
	Chassis string `json:"chassis,omitempty"`
	// PowerWatts is what the chassis draws; nil when the BMC does not say.
	PowerWatts *float64 `json:"powerWatts,omitempty"`
	// PowerSupplies are the chassis' power supplies (absent ones left out).
	PowerSupplies []PowerSupply `json:"powerSupplies,omitempty"`
	// Temperatures are the chassis' temperature sensors that have a reading.
	Temperatures []Temperature `json:"temperatures,omitempty"`
	// Fans are the chassis' fans (absent ones left out).
	Fans []Fan `json:"fans,omitempty"`
	// MemoryHealth and ProcessorHealth are the system's MemorySummary and ProcessorSummary
	// health rollups (OK, Warning, Critical; "" when the BMC does not say).
	MemoryHealth    string `json:"memoryHealth,omitempty"`
	ProcessorHealth string `json:"processorHealth,omitempty"`
	// Failed names the parts the BMC linked and failed to serve, with why.
	Failed []PartError `json:"failed,omitempty"`
}

// PowerSupply is one power supply's state and health as the BMC reports them.
type PowerSupply struct {
	Name   string `json:"name"`
	State  string `json:"state,omitempty"`
	Health string `json:"health,omitempty"`
}

// Healthy is the power supply's verdict: OK, or no health said (unknown is no failure: what
// alerts is a failure the BMC reports). Warning and Critical are not healthy.
func (p PowerSupply) Healthy() bool {
	return p.Health == "" || p.Health == string(schemas.OKHealth)
}

// Temperature is one temperature sensor's reading.
type Temperature struct {
	Name    string  `json:"name"`
	Celsius float64 `json:"celsius"`
}

// Fan is one fan's speed (in RPM where the BMC says so, else in percent) and health.
type Fan struct {
	Name    string   `json:"name"`
	RPM     *float64 `json:"rpm,omitempty"`
	Percent *float64 `json:"percent,omitempty"`
	Health  string   `json:"health,omitempty"`
}

// PartError is a part of the telemetry the BMC linked and failed to serve.
type PartError struct {
	Part string `json:"part"`
	Err  error  `json:"-"`
}

func (e PartError) Error() string { return e.Part + ": " + e.Err.Error() }

// Part names in PartError.
const (
	PartPower   = "power"
	PartThermal = "thermal"
	PartPSUs    = "powerSupplies"
	PartFans    = "fans"
	PartSensors = "sensors"
)

// chassisLinks are the telemetry links of a chassis, in either model.
type chassisLinks struct {
	ID               string `json:"Id"`
	Power            wire.Link
	Thermal          wire.Link
	PowerSubsystem   wire.Link
	ThermalSubsystem wire.Link
	Sensors          wire.Link
}

// Read reads the telemetry of systemID. Only reading the system and its chassis is fatal; the
// system's identity is proven as for every call on it (the conn's System).
func Read(ctx context.Context, c wire.Conn, systemID string) (*Telemetry, error) {
	op := "read telemetry of " + systemID
	sys, err := c.System(ctx, systemID)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	t := &Telemetry{
		MemoryHealth:    string(cmp.Or(sys.MemorySummary.Status.HealthRollup, sys.MemorySummary.Status.Health)),
		ProcessorHealth: string(cmp.Or(sys.ProcessorSummary.Status.HealthRollup, sys.ProcessorSummary.Status.Health)),
	}
	chassisURI := firstChassis(sys.RawData)
	if chassisURI == "" {
		return t, nil
	}
	api, err := c.Client(ctx)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	var ch chassisLinks
	if err := wire.GetJSON(api, chassisURI, &ch); err != nil {
		return nil, wire.Wrap(op, err)
	}
	t.Chassis = cmp.Or(ch.ID, wire.LastSegment(chassisURI))
	r := reader{api: api, t: t}
	r.power(ch)
	r.thermal(ch)
	r.sensors(ch)
	if err := ctx.Err(); err != nil {
		return nil, wire.Wrap(op, err)
	}
	slices.SortFunc(t.PowerSupplies, func(a, b PowerSupply) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(t.Temperatures, func(a, b Temperature) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(t.Fans, func(a, b Fan) int { return strings.Compare(a.Name, b.Name) })
	return t, nil
}

// firstChassis is the first chassis the system links ("" when none).
func firstChassis(raw []byte) string {
	var s struct {
		Links struct{ Chassis []wire.Link }
	}
	if json.Unmarshal(raw, &s) != nil || len(s.Links.Chassis) == 0 {
		return ""
	}
	return s.Links.Chassis[0].ID
}

type reader struct {
	api *gofish.APIClient
	t   *Telemetry
	// needPower and needTemps are what is left for the Sensors collection.
	needPower, needTemps bool
}

func (r *reader) fail(part string, err error) {
	r.t.Failed = append(r.t.Failed, PartError{Part: part, Err: err})
}

// power reads the draw and the supplies: Power where linked, else PowerSubsystem (supplies
// only: its draw is a sensor's).
func (r *reader) power(ch chassisLinks) {
	r.needPower = true
	if ch.Power.ID != "" {
		p, err := schemas.GetObject[schemas.Power](r.api, ch.Power.ID)
		if err == nil {
			for _, pc := range p.PowerControl {
				if pc.PowerConsumedWatts != nil {
					w := float64(*pc.PowerConsumedWatts)
					r.t.PowerWatts, r.needPower = &w, false
					break
				}
			}
			for i, s := range p.PowerSupplies {
				if s.Status.State == schemas.AbsentState {
					continue
				}
				r.t.PowerSupplies = append(r.t.PowerSupplies, PowerSupply{
					Name: cmp.Or(s.Name, s.MemberID, fmt.Sprintf("PSU%d", i+1)), State: string(s.Status.State), Health: string(s.Status.Health),
				})
			}
			return
		}
		r.fail(PartPower, err)
	}
	if ch.PowerSubsystem.ID == "" {
		return
	}
	var ps struct{ PowerSupplies wire.Link }
	if err := wire.GetJSON(r.api, ch.PowerSubsystem.ID, &ps); err != nil {
		r.fail(PartPSUs, err)
		return
	}
	if ps.PowerSupplies.ID == "" {
		return
	}
	var members []struct {
		ID     string `json:"Id"`
		Name   string
		Status schemas.Status
	}
	if err := readMembers(r.api, ps.PowerSupplies.ID, &members); err != nil {
		r.fail(PartPSUs, err)
	}
	for _, m := range members {
		if m.Status.State == schemas.AbsentState {
			continue
		}
		r.t.PowerSupplies = append(r.t.PowerSupplies, PowerSupply{Name: cmp.Or(m.Name, m.ID), State: string(m.Status.State), Health: string(m.Status.Health)})
	}
}

// thermal reads temperatures and fans: Thermal where linked, else ThermalSubsystem's fans (its
// temperatures are sensors).
func (r *reader) thermal(ch chassisLinks) {
	r.needTemps = true
	if ch.Thermal.ID != "" {
		th, err := schemas.GetObject[schemas.Thermal](r.api, ch.Thermal.ID)
		if err == nil {
			r.needTemps = false
			for i, tp := range th.Temperatures {
				if tp.ReadingCelsius == nil || tp.Status.State == schemas.AbsentState {
					continue
				}
				r.t.Temperatures = append(r.t.Temperatures, Temperature{Name: cmp.Or(tp.Name, tp.MemberID, fmt.Sprintf("Temp%d", i+1)), Celsius: *tp.ReadingCelsius})
			}
			for i, f := range th.Fans {
				if f.Status.State == schemas.AbsentState {
					continue
				}
				fan := Fan{Name: cmp.Or(f.Name, f.FanName, f.MemberID, fmt.Sprintf("Fan%d", i+1)), Health: string(f.Status.Health)}
				if f.Reading != nil {
					v := float64(*f.Reading)
					if f.ReadingUnits == schemas.PercentReadingUnits {
						fan.Percent = &v
					} else {
						// RPM is the default unit of Thermal fans.
						fan.RPM = &v
					}
				}
				r.t.Fans = append(r.t.Fans, fan)
			}
			return
		}
		r.fail(PartThermal, err)
	}
	if ch.ThermalSubsystem.ID == "" {
		return
	}
	var ts struct{ Fans wire.Link }
	if err := wire.GetJSON(r.api, ch.ThermalSubsystem.ID, &ts); err != nil {
		r.fail(PartFans, err)
		return
	}
	if ts.Fans.ID == "" {
		return
	}
	var members []struct {
		ID           string `json:"Id"`
		Name         string
		Status       schemas.Status
		SpeedPercent struct {
			Reading  *float64
			SpeedRPM *float64
		}
	}
	if err := readMembers(r.api, ts.Fans.ID, &members); err != nil {
		r.fail(PartFans, err)
	}
	for _, m := range members {
		if m.Status.State == schemas.AbsentState {
			continue
		}
		r.t.Fans = append(r.t.Fans, Fan{Name: cmp.Or(m.Name, m.ID), RPM: m.SpeedPercent.SpeedRPM, Percent: m.SpeedPercent.Reading, Health: string(m.Status.Health)})
	}
}

// sensors reads what the legacy resources did not give from the Sensors collection: the
// chassis' draw (a Power sensor of the chassis) and the temperatures.
func (r *reader) sensors(ch chassisLinks) {
	if ch.Sensors.ID == "" || (!r.needPower && !r.needTemps) {
		return
	}
	list, err := schemas.GetCollectionObjects[schemas.Sensor](r.api, ch.Sensors.ID)
	if err != nil {
		r.fail(PartSensors, err)
	}
	for _, s := range list {
		if s.Reading == nil || s.Status.State == schemas.AbsentState {
			continue
		}
		switch {
		case r.needTemps && s.ReadingType == schemas.TemperatureReadingType:
			r.t.Temperatures = append(r.t.Temperatures, Temperature{Name: cmp.Or(s.Name, s.ID), Celsius: *s.Reading})
		case r.needPower && s.ReadingType == schemas.PowerReadingType && isChassisDraw(s):
			w := *s.Reading
			r.t.PowerWatts, r.needPower = &w, false
		}
	}
}

// isChassisDraw tells the chassis' total draw among power sensors (a PSU's or a CPU's are not).
func isChassisDraw(s *schemas.Sensor) bool {
	if s.PhysicalContext == schemas.ChassisPhysicalContext || s.PhysicalContext == schemas.SystemBoardPhysicalContext {
		return true
	}
	n := strings.ToLower(s.ID + " " + s.Name)
	return strings.Contains(n, "total") || strings.Contains(n, "chassis")
}

// readMembers reads every member of a collection into out (a pointer to a slice), skipping
// members that fail; the first failure is returned with what was read.
func readMembers[T any](api *gofish.APIClient, uri string, out *[]T) error {
	var coll struct{ Members []wire.Link }
	if err := wire.GetJSON(api, uri, &coll); err != nil {
		return err
	}
	var first error
	for _, m := range coll.Members {
		var v T
		if err := wire.GetJSON(api, m.ID, &v); err != nil {
			first = cmp.Or(first, err)
			continue
		}
		*out = append(*out, v)
	}
	return first
}

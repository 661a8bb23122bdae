package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"sort"
	"time"
)

// lldpTimeout bounds lldpctl: it only asks the local lldpd, which answers at once or not at all.
const lldpTimeout = 10 * time.Second

// collectLLDP returns the neighbours by interface name: from `lldpctl -f json` under root "/"
// when lldpctl is on PATH, else from the fixture file. No lldpctl means no neighbours.
func collectLLDP(ctx context.Context, sfs sysfs, o Options) (map[string][]Neighbor, error) {
	var raw []byte
	if o.live() {
		path, err := exec.LookPath(o.LLDPCommand)
		if err != nil {
			return nil, nil
		}
		ctx, cancel := context.WithTimeout(ctx, lldpTimeout)
		defer cancel()
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, path, "-f", "json")
		cmd.Stderr = &stderr
		if raw, err = cmd.Output(); err != nil {
			return nil, fmt.Errorf("running %s -f json: %w (%s)", path, err, bytes.TrimSpace(stderr.Bytes()))
		}
	} else {
		var err error
		raw, err = os.ReadFile(sfs.path(FixtureLLDP))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading LLDP fixture: %w", err)
		}
	}
	return ParseLLDP(raw)
}

// ParseLLDP reads the output of `lldpctl -f json` (lldpd 0.9 and later). That format names
// objects after their content and turns them into arrays when there is more than one, so:
// "interface" is {"eth0": {...}} or [{"eth0": {...}}, {"eth0": {...}}] (several neighbours),
// and "chassis" is {"<sysname>": {...}} or, without a system name, the chassis itself.
func ParseLLDP(raw []byte) (map[string][]Neighbor, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, nil
	}
	var doc struct {
		LLDP json.RawMessage `json:"lldp"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("parsing lldpctl output: %w", err)
	}
	var lldp struct {
		Interface json.RawMessage `json:"interface"`
	}
	if len(doc.LLDP) > 0 && doc.LLDP[0] == '{' {
		if err := json.Unmarshal(doc.LLDP, &lldp); err != nil {
			return nil, fmt.Errorf("parsing lldpctl output: %w", err)
		}
	}
	entries, err := namedObjects(lldp.Interface)
	if err != nil {
		return nil, fmt.Errorf("parsing lldpctl interfaces: %w", err)
	}
	out := map[string][]Neighbor{}
	for _, e := range entries {
		var ifc struct {
			Chassis json.RawMessage `json:"chassis"`
			Port    struct {
				ID    lldpID     `json:"id"`
				Descr flexString `json:"descr"`
			} `json:"port"`
		}
		if err := json.Unmarshal(e.body, &ifc); err != nil {
			return nil, fmt.Errorf("parsing lldpctl interface %s: %w", e.name, err)
		}
		ch, err := parseChassis(ifc.Chassis)
		if err != nil {
			return nil, fmt.Errorf("parsing lldpctl chassis on %s: %w", e.name, err)
		}
		out[e.name] = append(out[e.name], Neighbor{
			ChassisID:         string(ch.ID.Value),
			ChassisIDType:     string(ch.ID.Type),
			SystemName:        ch.name,
			SystemDescription: string(ch.Descr),
			PortID:            string(ifc.Port.ID.Value),
			PortIDType:        string(ifc.Port.ID.Type),
			PortDescription:   string(ifc.Port.Descr),
		})
	}
	return out, nil
}

type namedObject struct {
	name string
	body json.RawMessage
}

// namedObjects flattens {"a": x, "b": y} or [{"a": x}, {"a": z}] into name/body pairs, in
// document order for arrays and name order for objects.
func namedObjects(raw json.RawMessage) ([]namedObject, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var maps []map[string]json.RawMessage
	if raw[0] == '[' {
		if err := json.Unmarshal(raw, &maps); err != nil {
			return nil, err
		}
	} else {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, err
		}
		maps = []map[string]json.RawMessage{m}
	}
	var out []namedObject
	for _, m := range maps {
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			out = append(out, namedObject{name: n, body: m[n]})
		}
	}
	return out, nil
}

type lldpID struct {
	Type  flexString `json:"type"`
	Value flexString `json:"value"`
}

type chassis struct {
	ID    lldpID     `json:"id"`
	Descr flexString `json:"descr"`
	Name  flexString `json:"name"` // only in some versions; usually the object's key
	name  string
}

func parseChassis(raw json.RawMessage) (chassis, error) {
	var c chassis
	if len(bytes.TrimSpace(raw)) == 0 {
		return c, nil
	}
	// Without a system name the chassis object is the chassis itself.
	if err := json.Unmarshal(raw, &c); err == nil && c.ID.Value != "" {
		c.name = string(c.Name)
		return c, nil
	}
	named, err := namedObjects(raw)
	if err != nil || len(named) == 0 {
		return c, err
	}
	c = chassis{}
	if err := json.Unmarshal(named[0].body, &c); err != nil {
		return c, err
	}
	c.name = named[0].name
	return c, nil
}

// flexString accepts a string, a number, or a list of them (lldpctl turns repeated values into
// lists, e.g. several descriptions or management addresses); a list yields its first element.
type flexString string

func (f *flexString) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		*f = ""
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*f = flexString(s)
	case b[0] == '[':
		var list []flexString
		if err := json.Unmarshal(b, &list); err != nil {
			return err
		}
		*f = ""
		if len(list) > 0 {
			*f = list[0]
		}
	case b[0] == '{':
		var v struct {
			Value flexString `json:"value"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*f = v.Value
	default:
		*f = flexString(b) // number or boolean, as written
	}
	return nil
}

package dashboard

import (
	"math"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/fleetops"
	"github.com/metalhub/metalhub/internal/telemetry/latest"
)

// Placement labels, as the metal-operator's visualizer reads them.
const (
	LabelLocation = "metadata.metal.ironcore.dev/location"
	LabelRack     = "metadata.metal.ironcore.dev/rack"
	LabelShelf    = "metadata.metal.ironcore.dev/shelf"
	LabelHeight   = "metadata.metal.ironcore.dev/height"
)

// syncLabel names a VidraResource's InfrahubSync (internal/controller/delivery/manifests.SyncLabel; not
// imported to keep the dashboard off the controller's dependencies).
const syncLabel = "infrahub.operators.com/sync"

// Placement is where a server sits: a rack in a row at a location, from the bottom unit Shelf
// up Height units. Placed is false without a rack label: the server goes to the unplaced shelf.
type Placement struct {
	Placed   bool   `json:"placed"`
	Location string `json:"location,omitempty"`
	Row      string `json:"row,omitempty"`
	Rack     string `json:"rack,omitempty"`
	// Shelf is the lowest unit (1 = bottom); 0 when unknown.
	Shelf  int `json:"shelf,omitempty"`
	Height int `json:"height,omitempty"`
}

// RackKey is the rack's identity in the page: data-rack="<location>/<rack label>".
func (p Placement) RackKey() string {
	if !p.Placed {
		return "unplaced"
	}
	return p.Location + "/" + p.Rack
}

var rackLabel = regexp.MustCompile(`^([0-9A-Za-z]+)-([0-9A-Za-z]+)$`)

// parsePlacement reads the placement labels. A rack label "<row>-<rack>" gives the row; any
// other rack label is a rack of its own in row "?"; a missing location is "?" too.
func parsePlacement(labels map[string]string) Placement {
	rack := strings.TrimSpace(labels[LabelRack])
	if rack == "" {
		return Placement{}
	}
	p := Placement{Placed: true, Rack: rack, Location: strings.TrimSpace(labels[LabelLocation]), Row: "?"}
	if p.Location == "" {
		p.Location = "?"
	}
	if m := rackLabel.FindStringSubmatch(rack); m != nil {
		p.Row = m[1]
	}
	if n, err := strconv.Atoi(strings.TrimSpace(labels[LabelShelf])); err == nil && n > 0 {
		p.Shelf = n
	}
	p.Height = 1
	if n, err := strconv.Atoi(strings.TrimSpace(labels[LabelHeight])); err == nil && n > 0 {
		p.Height = n
	}
	return p
}

// Summary is one server as a tile shows it.
type Summary struct {
	Name  string `json:"name"`
	State string `json:"state"`
	Power string `json:"power,omitempty"`
	// Claim is "<namespace>/<name>" of the bound ServerClaim.
	Claim string `json:"claim,omitempty"`
	LED   string `json:"led,omitempty"`
	BMC   string `json:"bmc,omitempty"`
	// BMCHealth is "ok", "error", "pending" or "unknown" (no BMC object seen, or no access).
	BMCHealth  string `json:"bmcHealth,omitempty"`
	BMCMessage string `json:"bmcMessage,omitempty"`
	// Maintenance is "<namespace>/<name>" of the ServerMaintenance holding the server.
	Maintenance string `json:"maintenance,omitempty"`
	Cordoned    bool   `json:"cordoned,omitempty"`
	Parked      bool   `json:"parked,omitempty"`
	// Health is "fault" (a critical event the BMC logged), "drift" (less hardware than the
	// baseline), "fault,drift" or "" from the durable records.
	Health string `json:"health,omitempty"`
	// Pending is an operation asked for and not yet reported.
	Pending string `json:"pending,omitempty"`
	// Cleaned is the server's Cleaned condition: its reason and message (the last cleaning's
	// proof, the one in progress, or the disk that failed).
	Cleaned   string    `json:"cleaned,omitempty"`
	Placement Placement `json:"placement"`
	// Telemetry is the server's latest telemetry reading, when the dashboard is given the
	// collector's (Options.Telemetry) and it has one for the server.
	Telemetry *TileTelemetry `json:"telemetry,omitempty"`
}

// TileTelemetry is a server's latest telemetry reading as its tile shows it.
type TileTelemetry struct {
	// At is when it was read (Unix seconds): a BMC that stopped answering leaves its last
	// reading, which the tile then says is old.
	At int64 `json:"at"`
	// PowerWatts and HottestCelsius are whole: what the tile shows, and a change below it is no
	// change to send.
	PowerWatts     *float64 `json:"powerWatts,omitempty"`
	HottestCelsius *float64 `json:"hottestCelsius,omitempty"`
	HottestSensor  string   `json:"hottestSensor,omitempty"`
	// FailedPSUs and FailedFans name the power supplies and fans whose health is Warning or
	// Critical: the tile's failure badge.
	FailedPSUs []string `json:"failedPSUs,omitempty"`
	FailedFans []string `json:"failedFans,omitempty"`
}

// tileTelemetry is r as a tile shows it.
func tileTelemetry(r latest.Reading) *TileTelemetry {
	whole := func(v *float64) *float64 {
		if v == nil {
			return nil
		}
		w := math.Round(*v)
		return &w
	}
	return &TileTelemetry{At: r.At.Unix(), PowerWatts: whole(r.PowerWatts), HottestCelsius: whole(r.HottestCelsius),
		HottestSensor: r.HottestSensor, FailedPSUs: r.FailedPSUs, FailedFans: r.FailedFans}
}

// summarize builds a server's tile; bmc is its BMC as watched, nil when unseen.
func summarize(s *metalv1alpha1.Server, bmc *metalv1alpha1.BMC) Summary {
	sum := Summary{
		Name:      s.Name,
		State:     fleetops.State(s),
		Power:     string(s.Status.PowerState),
		Cordoned:  s.Spec.Unclaimable,
		Pending:   fleetops.Pending(s),
		Placement: parsePlacement(s.Labels),
	}
	sum.Parked = sum.State == string(metalv1alpha1.ServerStateParked)
	var health []string
	if s.Annotations[metalv1alpha1.HardwareFaultAnnotation] != "" {
		health = append(health, "fault")
	}
	if s.Annotations[metalv1alpha1.InventoryDriftAnnotation] != "" {
		health = append(health, "drift")
	}
	sum.Health = strings.Join(health, ",")
	if c := meta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionCleaned); c != nil {
		sum.Cleaned = c.Reason + ": " + c.Message
	}
	if r := s.Spec.ServerClaimRef; r != nil {
		sum.Claim = r.Namespace + "/" + r.Name
	}
	if r := s.Spec.ServerMaintenanceRef; r != nil {
		sum.Maintenance = r.Namespace + "/" + r.Name
	}
	sum.LED = string(s.Status.IndicatorLED)
	if sum.LED == "" {
		sum.LED = string(s.Spec.IndicatorLED)
	}
	if s.Spec.BMCRef != nil {
		sum.BMC = s.Spec.BMCRef.Name
		sum.BMCHealth, sum.BMCMessage = bmcHealth(bmc)
	}
	return sum
}

// bmcHealth reads a BMC's Ready condition, else its state.
func bmcHealth(b *metalv1alpha1.BMC) (string, string) {
	if b == nil {
		return "unknown", ""
	}
	if c := meta.FindStatusCondition(b.Status.Conditions, metalv1alpha1.ConditionReady); c != nil {
		switch c.Status {
		case metav1.ConditionTrue:
			return "ok", ""
		case metav1.ConditionFalse:
			return "error", strings.TrimSpace(c.Reason + ": " + c.Message)
		}
	}
	switch b.Status.State {
	case metalv1alpha1.BMCStateEnabled:
		return "ok", ""
	case metalv1alpha1.BMCStateError:
		return "error", ""
	case metalv1alpha1.BMCStatePending:
		return "pending", ""
	}
	return "unknown", ""
}

// ClaimItem is one ServerClaim in the claims table.
type ClaimItem struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Server    string `json:"server,omitempty"`
	Phase     string `json:"phase,omitempty"`
	Power     string `json:"power,omitempty"`
	Ready     string `json:"ready,omitempty"`
}

func claimItem(c *metalv1alpha1.ServerClaim) ClaimItem {
	it := ClaimItem{Namespace: c.Namespace, Name: c.Name, Phase: string(c.Status.Phase), Power: string(c.Spec.Power)}
	if c.Spec.ServerRef != nil {
		it.Server = c.Spec.ServerRef.Name
	}
	it.Ready = conditionWord(c.Status.Conditions, metalv1alpha1.ConditionReady)
	return it
}

// MaintenanceItem is one ServerMaintenance in the maintenances table.
type MaintenanceItem struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Server    string `json:"server,omitempty"`
	Policy    string `json:"policy,omitempty"`
	Priority  int32  `json:"priority,omitempty"`
	State     string `json:"state,omitempty"`
}

func maintenanceItem(m *metalv1alpha1.ServerMaintenance) MaintenanceItem {
	it := MaintenanceItem{Namespace: m.Namespace, Name: m.Name, Policy: string(m.Spec.Policy), Priority: m.Spec.Priority, State: string(m.Status.State)}
	if m.Spec.ServerRef != nil {
		it.Server = m.Spec.ServerRef.Name
	}
	return it
}

// SyncItem is one InfrahubSync with the health of the VidraResources it delivers.
type SyncItem struct {
	Namespace string         `json:"namespace"`
	Name      string         `json:"name"`
	State     string         `json:"state,omitempty"`
	LastError string         `json:"lastError,omitempty"`
	LastSync  *metav1.Time   `json:"lastSync,omitempty"`
	Ready     string         `json:"ready,omitempty"`
	Resources []ResourceItem `json:"resources"`
}

// ResourceItem is one VidraResource's health.
type ResourceItem struct {
	Name      string `json:"name"`
	State     string `json:"state,omitempty"`
	Health    string `json:"health,omitempty"`
	Ready     string `json:"ready,omitempty"`
	LastError string `json:"lastError,omitempty"`
}

func syncItem(s *infrahubv1alpha1.InfrahubSync, resources []*infrahubv1alpha1.VidraResource) SyncItem {
	it := SyncItem{Namespace: s.Namespace, Name: s.Name, State: string(s.Status.SyncState), LastError: s.Status.LastError,
		LastSync: s.Status.LastSyncTime, Ready: conditionWord(s.Status.Conditions, infrahubv1alpha1.ConditionReady),
		Resources: []ResourceItem{}}
	for _, r := range resources {
		it.Resources = append(it.Resources, ResourceItem{Name: r.Name, State: string(r.Status.DeployState), Health: r.Status.Health,
			Ready: conditionWord(r.Status.Conditions, infrahubv1alpha1.ConditionReady), LastError: r.Status.LastError})
	}
	return it
}

// syncOf is the store key of the InfrahubSync a VidraResource belongs to: its controller owner
// of exactly this API's apiVersion and Kind (as delivery.SyncRefOf reads it), else its sync
// label. "" for neither.
func syncOf(r *infrahubv1alpha1.VidraResource) string {
	if ref := metav1.GetControllerOf(r); ref != nil && ref.Kind == "InfrahubSync" && ref.APIVersion == infrahubv1alpha1.GroupVersion.String() {
		return objectKey(r.Namespace, ref.Name)
	}
	if n := r.Labels[syncLabel]; n != "" {
		return objectKey(r.Namespace, n)
	}
	return ""
}

// objectKey is an informer store's key: "<namespace>/<name>", or the name of a cluster-scoped
// object (InfrahubSyncs and VidraResources are).
func objectKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// conditionWord is "True", "False (Reason)" or "" for a missing condition.
func conditionWord(conds []metav1.Condition, t string) string {
	c := meta.FindStatusCondition(conds, t)
	if c == nil {
		return ""
	}
	if c.Status == metav1.ConditionTrue || c.Reason == "" {
		return string(c.Status)
	}
	return string(c.Status) + " (" + c.Reason + ")"
}

// Package metrics exposes what the operator manages as Prometheus gauges on the manager's
// /metrics endpoint (controller-runtime's registry): servers per lifecycle state and power state,
// claims per phase, InfrahubSyncs and VidraResources per state, and whether this replica leads.
//
// The gauges are computed at scrape time from the manager's informer cache, and only by the
// leader (the replica whose controllers fill that cache): summing over replicas counts every
// object once. Every known label value is reported, at 0 when nothing is in it, so alerts and
// rate() work from the first scrape. Counters of events (discovery reports, BMC requests) live
// beside the code that counts them (internal/registry, internal/bmc).
package metrics

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	baseboardv1alpha1 "github.com/metalhub/metalhub/api/baseboard/v1alpha1"
	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// Label values reported even when no object has them.
var (
	ServerStates = []metalv1alpha1.ServerState{
		metalv1alpha1.ServerStateInitial, metalv1alpha1.ServerStateDiscovery, metalv1alpha1.ServerStateAvailable,
		metalv1alpha1.ServerStateReserved, metalv1alpha1.ServerStateReleased, metalv1alpha1.ServerStateError,
		metalv1alpha1.ServerStateMaintenance, metalv1alpha1.ServerStateParked, metalv1alpha1.ServerStateCleaning,
	}
	PowerStates = []metalv1alpha1.PowerState{
		metalv1alpha1.PowerStateOn, metalv1alpha1.PowerStateOff, metalv1alpha1.PowerStatePaused,
		metalv1alpha1.PowerStatePoweringOn, metalv1alpha1.PowerStatePoweringOff, metalv1alpha1.PowerStateUnknown,
	}
	ClaimPhases    = []metalv1alpha1.Phase{metalv1alpha1.PhaseBound, metalv1alpha1.PhaseUnbound}
	DeliveryStates = []infrahubv1alpha1.State{
		infrahubv1alpha1.StatePending, infrahubv1alpha1.StateRunning, infrahubv1alpha1.StateSucceeded,
		infrahubv1alpha1.StateFailed, infrahubv1alpha1.StateStale,
	}
)

var (
	leaderDesc = prometheus.NewDesc("metalhub_leader",
		"1 if this replica holds the leader-election lease (or runs without leader election), else 0.", nil, nil)
	serversDesc = prometheus.NewDesc("metalhub_servers",
		"Servers by lifecycle state (the controller's bookkeeping) and observed power state.", []string{"state", "power_state"}, nil)
	claimsDesc = prometheus.NewDesc("metalhub_server_claims",
		"ServerClaims by phase (Bound or Unbound).", []string{"phase"}, nil)
	syncsDesc = prometheus.NewDesc("metalhub_infrahub_syncs",
		"InfrahubSyncs by sync state.", []string{"state"}, nil)
	resourcesDesc = prometheus.NewDesc("metalhub_vidra_resources",
		"VidraResources (one per delivered artifact) by deploy state.", []string{"state"}, nil)
	appliedDesc = prometheus.NewDesc("metalhub_vidra_applied_objects",
		"Objects applied from artifacts (sum of the VidraResources' managed resources).", nil, nil)
	firmwareDesc = prometheus.NewDesc("metalhub_firmware_objects",
		"BIOS and BMC versions and settings by kind and state (Pending, InProgress, Completed, Failed), from their records.", []string{"kind", "state"}, nil)
	scrapeErrorsDesc = prometheus.NewDesc("metalhub_state_metrics_errors",
		"1 if the last computation of the metalhub_* state gauges failed to list from the cache.", nil, nil)
)

// Source is what the collector reads: the manager's cached client and its election channel.
type Source struct {
	Reader client.Reader
	// Elected is closed once this replica leads (the manager's Elected()).
	Elected <-chan struct{}
	// Reporter, if set, says whether this replica reports instead of Elected: with shards every
	// replica is elected, and the one holding shard 0 reports.
	Reporter func() bool
	Metal    bool
	// Delivery reports the delivery family's kinds.
	Delivery bool
	Logger   logr.Logger
}

// collector is registered once per process; Register points it at the current manager (tests
// run several managers in one process, one after another).
type collector struct {
	mu  sync.Mutex
	src *Source
}

var (
	the      = &collector{}
	register sync.Once
)

// Register makes the state gauges report from src. Safe to call more than once; the last call
// wins.
func Register(src Source) {
	the.mu.Lock()
	the.src = &src
	the.mu.Unlock()
	register.Do(func() { ctrlmetrics.Registry.MustRegister(the) })
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{leaderDesc, serversDesc, claimsDesc, syncsDesc, resourcesDesc, appliedDesc, firmwareDesc, scrapeErrorsDesc} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	src := c.src
	c.mu.Unlock()
	if src == nil {
		return
	}
	leader := false
	select {
	case <-src.Elected:
		leader = src.Reporter == nil || src.Reporter()
	default:
	}
	ch <- prometheus.MustNewConstMetric(leaderDesc, prometheus.GaugeValue, b2f(leader))
	if !leader {
		return // the leader reports; a standby too would count every object twice in a sum()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	failed := false
	if src.Metal {
		if err := collectMetal(ctx, src.Reader, ch); err != nil {
			src.Logger.Error(err, "computing metal state metrics")
			failed = true
		}
	}
	if src.Delivery {
		if err := collectDelivery(ctx, src.Reader, ch); err != nil {
			src.Logger.Error(err, "computing delivery state metrics")
			failed = true
		}
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrorsDesc, prometheus.GaugeValue, b2f(failed))
}

// ServerState is the lifecycle state a server is counted in: the durable annotation, else the
// mirrored status (objects not yet touched by this operator).
func ServerState(s *metalv1alpha1.Server) metalv1alpha1.ServerState {
	if v := s.Annotations[lifecycle.StateAnnotation]; v != "" {
		return metalv1alpha1.ServerState(v)
	}
	if s.Status.State != "" {
		return s.Status.State
	}
	return metalv1alpha1.ServerStateInitial
}

// The lists are read-only here, so they share the cache's objects instead of copying a fleet
// on every scrape (client.UnsafeDisableDeepCopy).

func collectMetal(ctx context.Context, r client.Reader, ch chan<- prometheus.Metric) error {
	var servers metalv1alpha1.ServerList
	if err := r.List(ctx, &servers, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	var claims metalv1alpha1.ServerClaimList
	if err := r.List(ctx, &claims, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	type key struct {
		state metalv1alpha1.ServerState
		power metalv1alpha1.PowerState
	}
	counts := map[key]int{}
	for _, st := range ServerStates {
		for _, p := range PowerStates {
			counts[key{st, p}] = 0
		}
	}
	for i := range servers.Items {
		s := &servers.Items[i]
		p := s.Status.PowerState
		if p == "" {
			p = metalv1alpha1.PowerStateUnknown
		}
		counts[key{ServerState(s), p}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(serversDesc, prometheus.GaugeValue, float64(n), string(k.state), string(k.power))
	}
	phases := map[metalv1alpha1.Phase]int{}
	for _, p := range ClaimPhases {
		phases[p] = 0
	}
	for i := range claims.Items {
		p := claims.Items[i].Status.Phase
		if p == "" {
			p = metalv1alpha1.PhaseUnbound
		}
		phases[p]++
	}
	for p, n := range phases {
		ch <- prometheus.MustNewConstMetric(claimsDesc, prometheus.GaugeValue, float64(n), string(p))
	}
	return collectFirmware(ctx, r, ch)
}

// collectFirmware counts the firmware objects by kind and the state their records say.
func collectFirmware(ctx context.Context, r client.Reader, ch chan<- prometheus.Metric) error {
	for _, l := range []client.ObjectList{&systemv1alpha1.BIOSVersionList{}, &systemv1alpha1.BIOSSettingsList{},
		&baseboardv1alpha1.BMCVersionList{}, &baseboardv1alpha1.BMCSettingsList{}} {
		if err := r.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		items, err := apimeta.ExtractList(l)
		if err != nil {
			return err
		}
		kind := strings.TrimSuffix(reflect.TypeOf(l).Elem().Name(), "List")
		counts := map[string]int{"Pending": 0, "InProgress": 0, "Completed": 0, "Failed": 0}
		for _, it := range items {
			if o, ok := it.(client.Object); ok {
				counts[record.State(o.GetAnnotations())]++
			}
		}
		for st, n := range counts {
			ch <- prometheus.MustNewConstMetric(firmwareDesc, prometheus.GaugeValue, float64(n), kind, st)
		}
	}
	return nil
}

func collectDelivery(ctx context.Context, r client.Reader, ch chan<- prometheus.Metric) error {
	var syncs infrahubv1alpha1.InfrahubSyncList
	if err := r.List(ctx, &syncs, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	var resources infrahubv1alpha1.VidraResourceList
	if err := r.List(ctx, &resources, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	states := func() map[infrahubv1alpha1.State]int {
		m := map[infrahubv1alpha1.State]int{}
		for _, s := range DeliveryStates {
			m[s] = 0
		}
		return m
	}
	byState := states()
	for i := range syncs.Items {
		s := syncs.Items[i].Status.SyncState
		if s == "" {
			s = infrahubv1alpha1.StatePending
		}
		byState[s]++
	}
	for s, n := range byState {
		ch <- prometheus.MustNewConstMetric(syncsDesc, prometheus.GaugeValue, float64(n), string(s))
	}
	byState = states()
	applied := 0
	for i := range resources.Items {
		vr := &resources.Items[i]
		s := vr.Status.DeployState
		if s == "" {
			s = infrahubv1alpha1.StatePending
		}
		byState[s]++
		applied += int(max(vr.Status.ManagedResourceCount, int32(len(vr.Status.ManagedResources)))) // the list stops at 1,000
	}
	for s, n := range byState {
		ch <- prometheus.MustNewConstMetric(resourcesDesc, prometheus.GaugeValue, float64(n), string(s))
	}
	ch <- prometheus.MustNewConstMetric(appliedDesc, prometheus.GaugeValue, float64(applied))
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

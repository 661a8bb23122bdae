package metal

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// Field indexes of the claim, boot configuration and maintenance controllers. Binding looks up
// candidates through them instead of scanning every server for every claim, and a changed server
// or Secret reaches only the objects that name it.
const (
	// indexServerClaimable holds, for servers a claim may bind (see serverClaimable), one of
	// claimBuckets bucket numbers: a claim looks at one bucket of the free pool at a time, so a
	// pass costs a fraction of the pool, however large the fleet.
	indexServerClaimable = "metalhub.claimable"
	// indexServerClaimRef holds "<namespace>/<name>" of the claim a server points at.
	indexServerClaimRef = "spec.serverClaimRef"
	// indexClaimServer holds the server a claim names (by the user, or by us once bound).
	indexClaimServer = "spec.serverRef.name"
	// indexClaimWaiting holds "true" for live claims that name no server yet: the ones a freed
	// server may wake.
	indexClaimWaiting = "metalhub.waiting"
	// indexIgnitionSecret holds the ignition Secret a claim or boot configuration names.
	indexIgnitionSecret = "spec.ignitionSecretRef.name"
	// indexMaintenanceServer holds the server a maintenance targets.
	indexMaintenanceServer = "spec.serverRef.name"
)

// ClaimOptions configure the claim, boot configuration and maintenance controllers. The zero
// value is usable: the built-in boot provider on, the default safety-net resync.
type ClaimOptions struct {
	// ExternalBootProvider leaves ServerBootConfigurations to another boot provider (the IronCore
	// boot-operator consumes the same objects and reports their state itself): the built-in
	// provider then only marks new ones Pending.
	ExternalBootProvider bool
	// Resync is how often a claim that could not bind looks again by itself. A freed server wakes
	// waiting claims at once, so this is only a safety net.
	Resync time.Duration
	// WakeFanOut bounds how many waiting claims one freed server wakes (oldest first).
	WakeFanOut int
	// Concurrency is the number of parallel claim reconciles; 0 takes the family's. Binding
	// makes no BMC calls, only API writes, so it runs wider than the Server controller: with
	// the API server busy a write takes ~100 ms, and a burst of 500 claims at 16 workers took
	// 9.5 s to bind, at 64 about 6 s.
	Concurrency int
}

const (
	defaultClaimResync = time.Minute
	defaultWakeFanOut  = 4
	// defaultClaimConcurrency: see ClaimOptions.Concurrency.
	defaultClaimConcurrency = 64
)

// DefaultClaimOptions are the settings for a real fleet.
func DefaultClaimOptions() ClaimOptions {
	return ClaimOptions{Resync: defaultClaimResync, WakeFanOut: defaultWakeFanOut, Concurrency: defaultClaimConcurrency}
}

// BindFlags registers the flags of the claim family.
func (o *ClaimOptions) BindFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.ExternalBootProvider, "external-boot-provider", o.ExternalBootProvider,
		"Another boot provider (the IronCore boot-operator) reports ServerBootConfigurations; the built-in one stays out.")
	fs.DurationVar(&o.Resync, "claim-resync", o.Resync, "Safety-net interval at which a claim that could not bind looks again.")
	fs.IntVar(&o.WakeFanOut, "claim-wake-fan-out", o.WakeFanOut, "Waiting claims one freed server wakes, oldest first.")
	fs.IntVar(&o.Concurrency, "claim-concurrency", o.Concurrency, "Parallel claim reconciles (0: --metal-concurrency); binding only writes to the API server, so it runs wider.")
}

func (o ClaimOptions) withDefaults() ClaimOptions {
	if o.Resync <= 0 {
		o.Resync = defaultClaimResync
	}
	if o.WakeFanOut <= 0 {
		o.WakeFanOut = defaultWakeFanOut
	}
	return o
}

// setupClaims registers the indexes and reconcilers of claims, boot configurations and
// maintenance.
func setupClaims(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if err := setupClaimIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	co := o.Claims.withDefaults()
	if err := (&ServerClaimReconciler{
		Client: mgr.GetClient(), Recorder: o.Events.Recorder("serverclaim-controller"),
		Options: co, Concurrency: cmp.Or(co.Concurrency, o.Concurrency), RetryAfter: o.RetryAfter,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("serverclaim controller: %w", err)
	}
	if err := (&ServerBootConfigurationReconciler{
		Client: mgr.GetClient(), Recorder: o.Events.Recorder("serverbootconfiguration-controller"),
		External: co.ExternalBootProvider, Concurrency: o.Concurrency,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("serverbootconfiguration controller: %w", err)
	}
	if err := (&ServerMaintenanceReconciler{
		Client: mgr.GetClient(), Recorder: o.Events.Recorder("servermaintenance-controller"),
		Concurrency: o.Concurrency, RetryAfter: o.RetryAfter,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("servermaintenance controller: %w", err)
	}
	return nil
}

func setupClaimIndexes(ctx context.Context, idx client.FieldIndexer) error {
	indexes := []struct {
		obj  client.Object
		name string
		fn   client.IndexerFunc
	}{
		{&metalv1alpha1.Server{}, indexServerClaimable, func(o client.Object) []string {
			if serverClaimable(o.(*metalv1alpha1.Server)) {
				return []string{claimBucket(o.GetName())}
			}
			return nil
		}},
		{&metalv1alpha1.Server{}, indexServerClaimRef, func(o client.Object) []string {
			if ref := o.(*metalv1alpha1.Server).Spec.ServerClaimRef; ref != nil {
				return []string{ref.Namespace + "/" + ref.Name}
			}
			return nil
		}},
		{&metalv1alpha1.ServerClaim{}, indexClaimServer, func(o client.Object) []string {
			if ref := o.(*metalv1alpha1.ServerClaim).Spec.ServerRef; ref != nil && ref.Name != "" {
				return []string{ref.Name}
			}
			return nil
		}},
		{&metalv1alpha1.ServerClaim{}, indexClaimWaiting, func(o client.Object) []string {
			c := o.(*metalv1alpha1.ServerClaim)
			if c.DeletionTimestamp.IsZero() && (c.Spec.ServerRef == nil || c.Spec.ServerRef.Name == "") {
				return []string{"true"}
			}
			return nil
		}},
		{&metalv1alpha1.ServerClaim{}, indexIgnitionSecret, func(o client.Object) []string {
			if ref := o.(*metalv1alpha1.ServerClaim).Spec.IgnitionSecretRef; ref != nil && ref.Name != "" {
				return []string{ref.Name}
			}
			return nil
		}},
		{&metalv1alpha1.ServerBootConfiguration{}, indexIgnitionSecret, func(o client.Object) []string {
			if ref := o.(*metalv1alpha1.ServerBootConfiguration).Spec.IgnitionSecretRef; ref != nil && ref.Name != "" {
				return []string{ref.Name}
			}
			return nil
		}},
		{&metalv1alpha1.ServerMaintenance{}, indexMaintenanceServer, func(o client.Object) []string {
			if ref := o.(*metalv1alpha1.ServerMaintenance).Spec.ServerRef; ref != nil && ref.Name != "" {
				return []string{ref.Name}
			}
			return nil
		}},
	}
	for _, i := range indexes {
		if err := idx.IndexField(ctx, i.obj, i.name, i.fn); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", i.obj, i.name, err)
		}
	}
	return nil
}

// claimBuckets is the number of buckets the claimable index spreads the free pool over.
const claimBuckets = 16

// claimBucket is the claimable-index bucket of a server, by its name.
func claimBucket(name string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return strconv.Itoa(int(h.Sum32() % claimBuckets))
}

// serverClaimable reports whether a claim may bind s, from the server alone: its durable state
// (never status.state) is Available, it is observed powered off, nobody holds it and it is not
// being deleted or ignored. Taints, selectors and pending maintenance depend on the claim and
// are checked per candidate.
func serverClaimable(s *metalv1alpha1.Server) bool {
	state, src := serverStore.Get(s)
	return src == lifecycle.FromAnnotation && state == metalv1alpha1.ServerStateAvailable &&
		s.DeletionTimestamp.IsZero() &&
		!s.Spec.Unclaimable &&
		s.Spec.ServerClaimRef == nil &&
		s.Spec.ServerMaintenanceRef == nil &&
		s.Status.PowerState == metalv1alpha1.PowerStateOff &&
		s.Annotations[metalv1alpha1.OperationAnnotation] != metalv1alpha1.OperationIgnore
}

// whyNotClaimable says, for a user, why serverClaimable is false.
func whyNotClaimable(s *metalv1alpha1.Server) string {
	state, src := serverStore.Get(s)
	switch {
	case !s.DeletionTimestamp.IsZero():
		return "is being deleted"
	case s.Spec.ServerClaimRef != nil:
		return fmt.Sprintf("is claimed by %s/%s", s.Spec.ServerClaimRef.Namespace, s.Spec.ServerClaimRef.Name)
	case s.Spec.ServerMaintenanceRef != nil:
		return fmt.Sprintf("is in maintenance %s/%s", s.Spec.ServerMaintenanceRef.Namespace, s.Spec.ServerMaintenanceRef.Name)
	case s.Spec.Unclaimable:
		return "is marked unclaimable"
	case src != lifecycle.FromAnnotation || state != metalv1alpha1.ServerStateAvailable:
		return fmt.Sprintf("is %s, not Available", state)
	case s.Status.PowerState != metalv1alpha1.PowerStateOff:
		return fmt.Sprintf("is not observed powered off (power %q)", s.Status.PowerState)
	case s.Annotations[metalv1alpha1.OperationAnnotation] == metalv1alpha1.OperationIgnore:
		return "is ignored by the operator"
	}
	return "is claimable"
}

// tolerates reports whether tolerations let a claim bind a server with taints. Both effects keep
// a claim away: Evict is NoBind plus eviction of bound claims.
func tolerates(tolerations []metalv1alpha1.Toleration, taints []metalv1alpha1.Taint) (bool, string) {
	for _, t := range taints {
		ok := false
		for _, tol := range tolerations {
			if toleratesTaint(tol, t) {
				ok = true
				break
			}
		}
		if !ok {
			return false, fmt.Sprintf("taint %s=%s:%s not tolerated", t.Key, t.Value, taintEffect(t))
		}
	}
	return true, ""
}

func taintEffect(t metalv1alpha1.Taint) metalv1alpha1.TaintEffect {
	if t.Effect == "" {
		return metalv1alpha1.TaintEffectNoBind
	}
	return t.Effect
}

func toleratesTaint(tol metalv1alpha1.Toleration, t metalv1alpha1.Taint) bool {
	if tol.Effect != "" && tol.Effect != taintEffect(t) {
		return false
	}
	if tol.Operator == metalv1alpha1.TolerationOpExists {
		return tol.Key == "" || tol.Key == t.Key
	}
	return tol.Key == t.Key && tol.Value == t.Value
}

// Package index holds the field indexes of the metal family (what they are named and what each
// holds), their registration with the manager, and the watch mapping that wakes only the objects
// naming a changed one. Controllers of other groups (a BMC's firmware) look Servers up with them
// too.
//
// It writes no object: it registers indexes and maps watch events to the objects to wake. It
// imports no controller package nor the assembly (hack/layers.sh).
package index

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	readinessv1alpha1 "github.com/metalhub/metalhub/api/readiness/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/claimable"
	"github.com/metalhub/metalhub/internal/metadata"
	"github.com/metalhub/metalhub/internal/registry"
)

// Field indexes the family's watches and lookups use instead of scanning every object.
const (
	// ServerBMC holds the BMC a Server belongs to.
	ServerBMC = "spec.bmcRef.name"
	// ServerUUID holds a server's system UUID, lower-cased (the reference lower-cases it,
	// users may not).
	ServerUUID = "spec.systemUUID"
	// BMCSecret and BMCEndpoint hold the BMCSecret and the Endpoint a BMC names.
	BMCSecret   = "spec.bmcSecretRef.name"
	BMCEndpoint = "spec.endpointRef.name"
	// BMCAddress holds where a BMC is reached: its inline address, or the Endpoint it names
	// (one Endpoint, one address). Two BMC objects with one key are one BMC registered twice.
	BMCAddress = "metalhub.bmcAddress"
	// EndpointHost holds an Endpoint's IP, normalised (NormalHost): BMC objects naming
	// different Endpoints of one address are one BMC registered twice.
	EndpointHost = "metalhub.endpointHost"
)

// Field indexes of the claim, boot configuration and maintenance controllers. Binding looks up
// candidates through them instead of scanning every server for every claim, and a changed server
// or Secret reaches only the objects that name it.
const (
	// ServerClaimable holds, for servers a claim may bind (see claimable.Server), one of
	// ClaimBuckets bucket numbers: a claim looks at one bucket of the free pool at a time, so a
	// pass costs a fraction of the pool, however large the fleet.
	ServerClaimable = "metalhub.claimable"
	// ServerClaimRef holds "<namespace>/<name>" of the claim a server points at.
	ServerClaimRef = "spec.serverClaimRef"
	// ClaimServer holds the server a claim names (by the user, or by us once bound).
	ClaimServer = "spec.serverRef.name"
	// ClaimWaiting holds "true" for live claims that name no server yet: the ones a freed
	// server may wake.
	ClaimWaiting = "metalhub.waiting"
	// IgnitionSecret holds the ignition Secret a claim or boot configuration names.
	IgnitionSecret = "spec.ignitionSecretRef.name"
	// MaintenanceServer holds the server a maintenance targets.
	MaintenanceServer = "spec.serverRef.name"
	// WiringServer holds the server a ServerWiring names: a Server's change wakes only the
	// wirings that name it.
	WiringServer = "spec.serverRef.name"
)

// Setup registers every index of the family with the manager's cache.
func Setup(ctx context.Context, mgr ctrl.Manager) error {
	if err := metadata.SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := registry.SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	for _, i := range bmcIndexes() {
		if err := mgr.GetFieldIndexer().IndexField(ctx, i.Obj, i.Name, i.Fn); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", i.Obj, i.Name, err)
		}
	}
	return nil
}

// bmcIndexes are the indexes of the BMC and Server controllers.
func bmcIndexes() []Field {
	return []Field{
		{&metalv1alpha1.Server{}, ServerBMC, func(o client.Object) []string {
			if ref := o.(*metalv1alpha1.Server).Spec.BMCRef; ref != nil && ref.Name != "" {
				return []string{ref.Name}
			}
			return nil
		}},
		{&metalv1alpha1.BMC{}, BMCSecret, func(o client.Object) []string {
			return []string{o.(*metalv1alpha1.BMC).Spec.BMCSecretRef.Name}
		}},
		{&metalv1alpha1.BMC{}, BMCAddress, func(o client.Object) []string {
			b := o.(*metalv1alpha1.BMC)
			var keys []string
			if k := BMCAddressKey(b); k != "" {
				keys = append(keys, k)
			}
			// Where its host name resolved to, as last observed: the same BMC written by IP finds it.
			if b.Status.IP != "" {
				if k := Address(b.Spec.Protocol, NormalHost(b.Status.IP)); !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
			}
			return keys
		}},
		{&metalv1alpha1.Endpoint{}, EndpointHost, func(o client.Object) []string {
			if ip := o.(*metalv1alpha1.Endpoint).Spec.IP; ip != "" {
				return []string{NormalHost(ip)}
			}
			return nil
		}},
		{&metalv1alpha1.BMC{}, BMCEndpoint, func(o client.Object) []string {
			if ref := o.(*metalv1alpha1.BMC).Spec.EndpointRef; ref != nil && ref.Name != "" {
				return []string{ref.Name}
			}
			return nil
		}},
	}
}

// Field is one field index: its object kind, name and extractor.
type Field struct {
	Obj  client.Object
	Name string
	Fn   client.IndexerFunc
}

// All are every index of the family, for a fake client that must answer the controllers'
// lookups as the manager's cache does.
func All() []Field { return slices.Concat(bmcIndexes(), claimIndexes(), wiringIndexes()) }

// SetupClaims registers the claim, boot configuration and maintenance controllers' indexes.
func SetupClaims(ctx context.Context, idx client.FieldIndexer) error {
	for _, i := range claimIndexes() {
		if err := idx.IndexField(ctx, i.Obj, i.Name, i.Fn); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", i.Obj, i.Name, err)
		}
	}
	return nil
}

// SetupWiring registers the index of the wiring controller.
func SetupWiring(ctx context.Context, idx client.FieldIndexer) error {
	for _, i := range wiringIndexes() {
		if err := idx.IndexField(ctx, i.Obj, i.Name, i.Fn); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", i.Obj, i.Name, err)
		}
	}
	return nil
}

// wiringIndexes are the indexes of the wiring controller.
func wiringIndexes() []Field {
	return []Field{
		{&readinessv1alpha1.ServerWiring{}, WiringServer, func(o client.Object) []string {
			if name := o.(*readinessv1alpha1.ServerWiring).Spec.ServerRef.Name; name != "" {
				return []string{name}
			}
			return nil
		}},
	}
}

// claimIndexes are the indexes of the claim, boot configuration and maintenance controllers.
func claimIndexes() []Field {
	return []Field{
		{&metalv1alpha1.Server{}, ServerClaimable, func(o client.Object) []string {
			if claimable.Server(o.(*metalv1alpha1.Server)) {
				return []string{claimBucket(o.GetName())}
			}
			return nil
		}},
		{&metalv1alpha1.Server{}, ServerClaimRef, func(o client.Object) []string {
			if ref := o.(*metalv1alpha1.Server).Spec.ServerClaimRef; ref != nil {
				return []string{ref.Namespace + "/" + ref.Name}
			}
			return nil
		}},
		{&metalv1alpha1.ServerClaim{}, ClaimServer, func(o client.Object) []string {
			if ref := o.(*metalv1alpha1.ServerClaim).Spec.ServerRef; ref != nil && ref.Name != "" {
				return []string{ref.Name}
			}
			return nil
		}},
		{&metalv1alpha1.ServerClaim{}, ClaimWaiting, func(o client.Object) []string {
			c := o.(*metalv1alpha1.ServerClaim)
			if c.DeletionTimestamp.IsZero() && (c.Spec.ServerRef == nil || c.Spec.ServerRef.Name == "") {
				return []string{"true"}
			}
			return nil
		}},
		{&metalv1alpha1.ServerClaim{}, IgnitionSecret, func(o client.Object) []string {
			if ref := o.(*metalv1alpha1.ServerClaim).Spec.IgnitionSecretRef; ref != nil && ref.Name != "" {
				return []string{ref.Name}
			}
			return nil
		}},
		{&metalv1alpha1.ServerBootConfiguration{}, IgnitionSecret, func(o client.Object) []string {
			if ref := o.(*metalv1alpha1.ServerBootConfiguration).Spec.IgnitionSecretRef; ref != nil && ref.Name != "" {
				return []string{ref.Name}
			}
			return nil
		}},
		{&metalv1alpha1.ServerMaintenance{}, MaintenanceServer, func(o client.Object) []string {
			if ref := o.(*metalv1alpha1.ServerMaintenance).Spec.ServerRef; ref != nil && ref.Name != "" {
				return []string{ref.Name}
			}
			return nil
		}},
	}
}

// ClaimBuckets is the number of buckets the claimable index spreads the free pool over: a bind
// lists one bucket, so the bucket, not the fleet, sets its cost; a claim that finds nothing
// looks into every bucket, an index lookup each.
const ClaimBuckets = 128

// claimBucket is the claimable-index bucket of a server, by its name.
func claimBucket(name string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return strconv.Itoa(int(h.Sum32() % ClaimBuckets))
}

// Naming maps an object to the objects of list's kind, in its namespace (all of them for a
// cluster-scoped one), whose field index names it: the watch of a Secret or an Endpoint wakes
// only the objects that reference it. The list is a template; each call lists into a fresh one.
func Naming(c client.Reader, list client.ObjectList, index string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		l := list.DeepCopyObject().(client.ObjectList)
		if err := c.List(ctx, l, client.InNamespace(o.GetNamespace()), client.MatchingFields{index: o.GetName()}); err != nil {
			return nil
		}
		items, err := apimeta.ExtractList(l)
		if err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(items))
		for _, item := range items {
			if obj, ok := item.(client.Object); ok {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
			}
		}
		return reqs
	}
}

// BMCAddressKey is a BMC's BMCAddress key: the base URL of its inline access (host
// normalised), or its Endpoint's name; "" when it names neither.
func BMCAddressKey(b *metalv1alpha1.BMC) string {
	switch {
	case b.Spec.Access != nil && b.Spec.Access.IP != "":
		return Address(b.Spec.Protocol, NormalHost(b.Spec.Access.IP))
	case b.Spec.EndpointRef != nil && b.Spec.EndpointRef.Name != "":
		return "endpoint:" + b.Spec.EndpointRef.Name
	}
	return ""
}

// NormalHost is the one spelling of a BMC host: an IP in its canonical form (IPv4-mapped IPv6,
// leading zeros and case do not make another address), a hostname lower-cased without a
// trailing dot. Host names are resolved by the BMC pass (BMCReconciler.resolve), not here: a
// lookup in an index would block the cache; the system UUID check finds the same BMC registered
// by a name that does not resolve.
func NormalHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().String()
	}
	return h
}

// Address builds the base URL of a BMC from its protocol and host.
func Address(p metalv1alpha1.Protocol, host string) string {
	scheme := string(p.Scheme)
	if scheme == "" {
		// The reference's local test protocol speaks plain HTTP; real BMCs HTTPS.
		scheme = "https"
		if p.Name == metalv1alpha1.ProtocolRedfishLocal {
			scheme = "http"
		}
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(int(p.Port)))
}

// ClaimRefKey is a claim's key in ServerClaimRef: "<namespace>/<name>".
func ClaimRefKey(c *metalv1alpha1.ServerClaim) string { return c.Namespace + "/" + c.Name }

// Package bmccontroller is the BMC controller: it connects to each BMC (proving what answers is
// the BMC registered), reports it, keeps one Server per Redfish system, keeps the event
// subscription, and carries out the BMC's own operations (graceful-restart-bmc through an
// intent, rotate-credentials of a BMCSecret only one BMC names). Named apart from internal/bmc,
// the Redfish client it acts through.
//
// It never powers or boots a Server's system and never moves a Server's lifecycle state: that is
// the Server controller's. It imports neither the assembly (internal/controller/metal) nor another
// controller (hack/layers.sh).
package bmccontroller

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/controller/metal/shardkey"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/registry"
	"github.com/metalhub/metalhub/internal/shard"
)

// Finalizer keeps a BMC until its Servers are gone and its session is logged out. The
// reference's name, so migrated objects are handled alike.
const Finalizer = "metal.ironcore.dev/bmc"

// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=bmcs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=bmcs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=bmcs/finalizers,verbs=update
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=bmcsecrets,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=endpoints,verbs=get;list;watch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servers,verbs=get;list;watch;create;delete

// Reconciler connects to each BMC, reports what it is, and keeps one Server per Redfish
// system. It never watches Server updates: a Server's writes are none of its business, only a
// Server's deletion (to recreate it) is.
type Reconciler struct {
	Client   client.Client
	Pool     *bmc.Pool
	Recorder events.EventRecorder
	// Resync is the steady-state look at a reachable BMC (two Redfish requests).
	Resync time.Duration
	// RetryAfter is the look after a failure; it doubles with each consecutive failure up to
	// Resync, and a BMC that is failing fast is not looked at before it is tried again.
	RetryAfter time.Duration
	// RequestTimeout bounds one Redfish request (a reset that must not be cut short gets at
	// least this much of the pass's time).
	RequestTimeout time.Duration
	// PassTimeout bounds every pass's BMC calls together, waits for the BMC's request slots
	// included: no pass outlasts it (zero: the request timeout).
	PassTimeout time.Duration
	// ResetSettle is how long after a BMC reset of unknown outcome an unchanged LastResetTime
	// is taken to mean it never arrived (a BMC that took it may answer for a moment before it
	// goes down). Zero means DefaultResetSettle.
	ResetSettle time.Duration
	// Resolve looks a BMC's host name up, so that the same BMC written by name and by IP is
	// known as one (nil: the system resolver). A name that does not resolve compares as written.
	Resolve func(ctx context.Context, host string) ([]string, error)
	// EventsURL is the manager's event receiver as BMCs reach it; set, each BMC with an
	// EventService keeps a subscription to it (bmc_events.go).
	EventsURL string
	// Shards, set, limits the reconciler to the BMCs of the shards this replica holds.
	Shards *shard.Set

	// failures counts consecutive failures per BMC, for the backoff (in memory, like the
	// Server controller's).
	failures sync.Map
	// outcomes holds what issuing an operation gave until the pass after reports it.
	outcomes intent.Outcomes
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, concurrency int) error {
	rec := lifecycle.NewReconciler(r.Client, func() *metalv1alpha1.BMC { return &metalv1alpha1.BMC{} }, r.handle)
	rec.Resync = r.Resync
	b := ctrl.NewControllerManagedBy(mgr).
		Named("bmc").
		For(&metalv1alpha1.BMC{}, builder.WithPredicates(lifecycle.Predicate())).
		// Only a Server's deletion concerns the BMC (to recreate it).
		Owns(&metalv1alpha1.Server{}, builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(event.CreateEvent) bool { return false },
			UpdateFunc:  func(event.UpdateEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		Watches(&metalv1alpha1.BMCSecret{}, handler.EnqueueRequestsFromMapFunc(index.Naming(r.Client, &metalv1alpha1.BMCList{}, index.BMCSecret))).
		Watches(&metalv1alpha1.Endpoint{}, handler.EnqueueRequestsFromMapFunc(index.Naming(r.Client, &metalv1alpha1.BMCList{}, index.BMCEndpoint))).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency})
	return shard.Gate(r.Shards, mgr.GetCache(), b, rec, func() client.ObjectList { return &metalv1alpha1.BMCList{} }, shardkey.ForBMC).Complete(rec)
}

// bmcPass is one pass over a BMC: what the connect step found, for the steps after it.
type bmcPass struct {
	*lifecycle.Pass[*metalv1alpha1.BMC]
	// bctx is the deadline every BMC call of the pass shares (the request timeout).
	bctx    context.Context
	ep      bmc.Endpoint
	conn    bmc.BMC
	info    *bmc.ManagerInfo
	systems []bmc.SystemSummary
	// ips are the addresses the BMC's host name resolves to (nil for an IP, or none found).
	ips []string
	// subscription is our event subscription on the BMC, to report.
	subscription string
}

// handle is the BMC's pass, as its list of steps; the first that acts ends it.
func (r *Reconciler) handle(ctx context.Context, lp *lifecycle.Pass[*metalv1alpha1.BMC]) (lifecycle.Result, error) {
	bctx, cancel := context.WithTimeout(ctx, max(r.PassTimeout, r.requestTimeout()))
	defer cancel()
	return lifecycle.Steps(ctx, &bmcPass{Pass: lp, bctx: bctx},
		lifecycle.OnDeletion(func(ctx context.Context, p *bmcPass) (lifecycle.Result, error) { return r.finalize(ctx, p.Pass) }),
		lifecycle.EnsureFinalizer[*bmcPass](Finalizer),
		lifecycle.DoneIf[*bmcPass](serverstate.Ignored),
		r.reportIssued,
		r.rotation,
		r.connect,
		// Its systems are proven to be its own before an operation: a BMC reset sent through an
		// address that now reaches another BMC would reset that one.
		r.syncServers,
		r.rotationSet,
		r.operation,
		r.subscription,
		r.reportConnected,
	)
}

// reportIssued reports an operation the previous pass issued, first, BMC or not.
func (r *Reconciler) reportIssued(ctx context.Context, p *bmcPass) (lifecycle.Result, error) {
	if i, ok := intent.Parse(p.Obj.Annotations[intent.Annotation], bmcOperation); ok && i.Phase == intent.Issuing {
		return r.reportOperation(ctx, p.Pass, i)
	}
	return lifecycle.Continue(), nil
}

// connect reaches the BMC and inspects it. It answers first: an operation is issued only to a
// BMC that just did, so one that hangs or is down keeps it owed instead of swallowing it.
func (r *Reconciler) connect(ctx context.Context, p *bmcPass) (lifecycle.Result, error) {
	var err error
	if p.ep, err = bmcaccess.Endpoint(ctx, p.Client(), p.Obj); err != nil {
		return r.failed(ctx, p.Pass, err)
	}
	if p.conn, err = r.Pool.Get(p.ep); err != nil {
		return r.failed(ctx, p.Pass, err)
	}
	if p.info, p.systems, err = r.inspect(p.bctx, p.conn); err != nil {
		return r.failed(ctx, p.Pass, err)
	}
	r.failures.Delete(p.Obj.Name)
	return lifecycle.Continue(), nil
}

// syncServers keeps one Server per Redfish system.
func (r *Reconciler) syncServers(ctx context.Context, p *bmcPass) (lifecycle.Result, error) {
	if host, err := bmcaccess.Host(ctx, p.Client(), p.Obj); err == nil {
		p.ips = r.resolve(p.bctx, host)
	}
	err := firstAtAddress(ctx, p.Client(), p.Obj, p.ips)
	if err == nil {
		err = r.ensureServers(ctx, p.Client(), p.Obj, p.systems)
	}
	if reason, ok := lifecycle.ReasonOf(err); ok && (reason == metalv1alpha1.ReasonDuplicateIdentity || reason == metalv1alpha1.ReasonIdentityMismatch) {
		return r.failed(ctx, p.Pass, err)
	}
	return lifecycle.Continue(), err
}

// reportConnected reports what the BMC is.
func (r *Reconciler) reportConnected(ctx context.Context, p *bmcPass) (lifecycle.Result, error) {
	b, info := p.Obj, p.info
	st := b.Status.DeepCopy()
	st.Manufacturer, st.Model, st.FirmwareVersion = info.Manufacturer, info.Model, info.FirmwareVersion
	if macPattern.MatchString(info.MACAddress) {
		st.MACAddress = info.MACAddress
	}
	if t, err := time.Parse(time.RFC3339, info.LastResetTime); err == nil {
		st.LastResetTime = &metav1.Time{Time: t}
	}
	if host, err := bmcaccess.Host(ctx, p.Client(), b); err == nil {
		st.IP = host
		if len(p.ips) > 0 {
			st.IP = p.ips[0] // what the name resolved to: indexed, so the same BMC by IP is found
		}
	}
	st.State = metalv1alpha1.BMCStateEnabled
	st.PowerState = metalv1alpha1.PowerStateOn
	st.EventsSubscriptionLink = p.subscription
	msg := fmt.Sprintf("connected to %s (%d systems)", p.ep.Address, len(p.systems))
	return r.reportStatus(p.Pass, st, metav1.ConditionTrue, metalv1alpha1.ReasonConnected, msg, lifecycle.Done())
}

func (r *Reconciler) requestTimeout() time.Duration {
	if r.RequestTimeout <= 0 {
		return bmc.DefaultRequestTimeout
	}
	return r.RequestTimeout
}

// inspect reads the manager and the systems under the pass's BMC deadline (bctx, the request
// timeout), so that a slow or hanging BMC never holds a worker longer. The two walks are
// independent and run side by side (the pool's per-BMC cap still applies).
func (r *Reconciler) inspect(bctx context.Context, conn bmc.BMC) (*bmc.ManagerInfo, []bmc.SystemSummary, error) {
	var (
		info    *bmc.ManagerInfo
		infoErr error
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		info, infoErr = conn.Manager(bctx)
	}()
	systems, err := conn.Systems(bctx)
	<-done
	if infoErr != nil {
		return nil, nil, infoErr
	}
	if err != nil {
		return nil, nil, err
	}
	return info, systems, nil
}

var macPattern = regexp.MustCompile(`^([0-9A-Fa-f]{2}[:-]){5}([0-9A-Fa-f]{2})$`)

// failed reports why the BMC cannot be managed and looks again later; it recovers by itself.
func (r *Reconciler) failed(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.BMC], err error) (lifecycle.Result, error) {
	if bmc.IsFenced(err) {
		return lifecycle.Done(), err // the BMC's shard moved on; not its failure
	}
	n := 1
	if v, ok := r.failures.Load(p.Obj.Name); ok {
		n = v.(int) + 1
	}
	r.failures.Store(p.Obj.Name, n)
	st := p.Obj.Status.DeepCopy()
	st.State = metalv1alpha1.BMCStateError
	st.PowerState = ""
	// Capped like the BMC's own unreachable window, so a healed BMC reports so soon after.
	retry := bmcaccess.FailureBackoff(r.RetryAfter, min(r.Resync, bmc.DefaultMaxUnreachableBackoff), n, err)
	return r.reportStatus(p, st, metav1.ConditionFalse, bmcaccess.ReasonOf(err), err.Error(), lifecycle.RequeueAfter(retry, "retry"))
}

// reportStatus reports st with the Ready condition, with an event when Ready changes; the
// Reconciler writes it if anything changed. Either way the pass ends with then: a status write
// brings no event by design.
func (r *Reconciler) reportStatus(p *lifecycle.Pass[*metalv1alpha1.BMC], st *metalv1alpha1.BMCStatus,
	ready metav1.ConditionStatus, reason, msg string, then lifecycle.Result) (lifecycle.Result, error) {
	b := p.Obj
	before := apimeta.FindStatusCondition(b.Status.Conditions, metalv1alpha1.ConditionReady)
	lifecycle.SetCondition(&st.Conditions, b.Generation, metalv1alpha1.ConditionReady, ready, reason, msg)
	if equality.Semantic.DeepEqual(*st, b.Status) {
		return then, nil
	}
	if before == nil || before.Status != ready || before.Reason != reason {
		typ := corev1.EventTypeNormal
		if ready != metav1.ConditionTrue {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(b, nil, typ, reason, "Connect", "%s", msg)
	}
	b.Status = *st // the Reconciler writes it
	return then, nil
}

// ServerName is the deterministic name of the Server for a BMC's system.
func ServerName(bmcName, systemID string) string {
	id := strings.Trim(nonDNS.ReplaceAllString(strings.ToLower(systemID), "-"), "-")
	if id == "" {
		id = "system"
	}
	return bmcName + "-" + id
}

var nonDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// ensureServers creates the Servers of systems that have none. A system's Server is found by
// identity, not name: the system UUID (any case) under this BMC, then the system URI, then our
// own name for it; so Servers another operator created (the reference names them
// <bmc>-system-<index>) are the system's Servers, never duplicated. A system whose UUID already
// has a Server under another BMC (the same BMC registered twice, or a UUID twice) fails the pass
// before anything is created. Existing Servers are left alone: their spec belongs to users and
// the Server controller from then on.
func (r *Reconciler) ensureServers(ctx context.Context, c client.Client, b *metalv1alpha1.BMC, systems []bmc.SystemSummary) error {
	own := &metalv1alpha1.ServerList{}
	if err := c.List(ctx, own, client.MatchingFields{index.ServerBMC: b.Name}); err != nil {
		return fmt.Errorf("listing the Servers of BMC %s: %w", b.Name, err)
	}
	if err := bmcaccess.SameMachines(own.Items, systems); err != nil {
		return err
	}
	var missing []bmc.SystemSummary
	for _, sys := range systems {
		mine := systemServer(own.Items, b.Name, sys)
		if err := r.firstWithSystem(ctx, c, b, sys, mine != nil); err != nil {
			return err
		}
		if mine == nil {
			missing = append(missing, sys)
		}
	}
	// One event for the Servers a pass creates: a chassis manager's systems come at once, and
	// an event each would be as many writes again as the Servers themselves.
	var created []string
	var first *metalv1alpha1.Server
	firstSys := ""
	defer func() {
		switch len(created) {
		case 0:
		case 1:
			r.Recorder.Eventf(b, first, corev1.EventTypeNormal, "ServerCreated", "Discover", "system %s became Server %s", firstSys, created[0])
		default:
			r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "ServerCreated", "Discover", "%d systems became Servers: %s", len(created), shortList(created))
		}
	}()
	for _, sys := range missing {
		name := ServerName(b.Name, sys.ID)
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &metalv1alpha1.Server{}); err == nil {
			// A Server of that name exists and is not this system's (another BMC's, a user's):
			// not to be overwritten or doubled.
			r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, metalv1alpha1.ReasonDuplicateIdentity, "Discover",
				"system %s would become Server %s, which exists and is not this system's; no Server created for it", sys.ID, name)
			continue
		} else if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading Server %s: %w", name, err)
		}
		uuid := sys.UUID
		if uuid == "" {
			uuid = sys.ID
		}
		s := &metalv1alpha1.Server{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: copyLabels(b.Labels)},
			Spec: metalv1alpha1.ServerSpec{
				SystemUUID: strings.ToLower(uuid),
				SystemURI:  sys.ODataID,
				BMCRef:     &corev1.LocalObjectReference{Name: b.Name},
			},
		}
		if err := controllerutil.SetControllerReference(b, s, c.Scheme()); err != nil {
			return err
		}
		if err := c.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating Server %s: %w", name, err)
		}
		if first == nil {
			first, firstSys = s, sys.ID
		}
		created = append(created, name)
	}
	return nil
}

// shortList names the created Servers within an event note's size (1 KiB).
func shortList(created []string) string {
	var names []string
	size := 0
	for i, n := range created {
		if size+len(n) > 800 {
			names = append(names, fmt.Sprintf("and %d more", len(created)-i))
			break
		}
		names = append(names, n)
		size += len(n) + 2
	}
	return strings.Join(names, ", ")
}

// firstWithSystem fails with DuplicateIdentity when sys (by UUID) is already the machine of a
// Server that is not this BMC's: another BMC's (the same BMC registered twice, or a system UUID
// twice) or one registered inline. The Server that holds a machine keeps it, however old the
// newcomer: a BMC that held nothing (its Secret was missing, a move recreated it in name order)
// never takes a system that has a Server, and never one it sees only because its address now
// answers for another box. Servers whose BMC is gone and that are being deleted hold nothing.
// When both BMCs hold a Server for it (created at once, or before this rule), the older BMC
// keeps it and the newer reports; the Servers themselves act through neither (uniqueStep) until
// a human removes one.
func (r *Reconciler) firstWithSystem(ctx context.Context, c client.Client, b *metalv1alpha1.BMC, sys bmc.SystemSummary, holding bool) error {
	uuid := registry.NormalizeUUID(sys.UUID)
	if uuid == "" {
		return nil
	}
	others := &metalv1alpha1.ServerList{}
	if err := c.List(ctx, others, client.MatchingFields{index.ServerUUID: uuid}); err != nil {
		return fmt.Errorf("looking up system %s: %w", uuid, err)
	}
	for _, o := range others.Items {
		if o.Spec.BMCRef != nil && o.Spec.BMCRef.Name == b.Name {
			continue
		}
		holder := "registered inline"
		if o.Spec.BMCRef == nil && holding {
			continue // two Servers of one machine: they report it themselves (uniqueStep)
		}
		if o.Spec.BMCRef != nil {
			holder = "of BMC " + o.Spec.BMCRef.Name
			other := &metalv1alpha1.BMC{}
			if err := c.Get(ctx, client.ObjectKey{Name: o.Spec.BMCRef.Name}, other); apierrors.IsNotFound(err) {
				if !o.DeletionTimestamp.IsZero() {
					continue // left by a BMC that is gone, on its way out
				}
			} else if err != nil {
				return fmt.Errorf("reading BMC %s: %w", o.Spec.BMCRef.Name, err)
			} else if holding && bmcBefore(b, other) {
				continue // both hold it: the older keeps it, the other reports
			}
		}
		return lifecycle.Reasonf(metalv1alpha1.ReasonDuplicateIdentity,
			"system %s (UUID %s) is Server %s %s already: this BMC is registered twice, or its address answers for a machine that has a Server; no Server is created from it",
			sys.ID, sys.UUID, o.Name, holder)
	}
	return nil
}

// firstAtAddress fails with DuplicateIdentity when another BMC object that was there first names
// the same address: b is that BMC registered twice (inline, through an Endpoint, in another
// spelling), and takes none of its systems, even before either has Servers. A BMC that holds
// Servers is never a duplicate by address alone: which of two holders is the right one is for
// the systems that answer to say (firstWithSystem), so an address edited onto another BMC's
// never takes that BMC's Servers from it. Of two that hold none, the older is first.
func firstAtAddress(ctx context.Context, c client.Reader, b *metalv1alpha1.BMC, ips []string) error {
	others, addr, err := sameAddress(ctx, c, b, ips)
	if err != nil || len(others) == 0 {
		return err
	}
	if holds, err := holdsServers(ctx, c, b.Name); err != nil || holds {
		return err
	}
	for _, o := range others {
		oHolds, err := holdsServers(ctx, c, o.Name)
		if err != nil {
			return err
		}
		if oHolds || bmcBefore(o, b) {
			return duplicateAt(o, addr)
		}
	}
	return nil
}

func duplicateAt(o *metalv1alpha1.BMC, addr string) error {
	return lifecycle.Reasonf(metalv1alpha1.ReasonDuplicateIdentity,
		"BMC %s was registered first at %s: this BMC is registered twice; no Server is created from it", o.Name, addr)
}

// holdsServers reports whether a BMC object has Servers.
func holdsServers(ctx context.Context, c client.Reader, bmcName string) (bool, error) {
	list := &metalv1alpha1.ServerList{}
	if err := c.List(ctx, list, client.MatchingFields{index.ServerBMC: bmcName}, client.Limit(1)); err != nil {
		return false, fmt.Errorf("listing the Servers of BMC %s: %w", bmcName, err)
	}
	return len(list.Items) > 0, nil
}

// sameAddress lists the other live BMC objects that reach b's address, and the address: those
// naming it inline in any spelling, those naming an Endpoint with its host (or the same
// Endpoint), and, where b's host is a name, those at the IPs it resolves to (ips) or whose own
// name resolved to b's IP (status.ip, indexed). b's own address is resolved through its
// Endpoint; an address that cannot be resolved yet compares by what it names.
func sameAddress(ctx context.Context, c client.Reader, b *metalv1alpha1.BMC, ips []string) ([]*metalv1alpha1.BMC, string, error) {
	keys := map[string]bool{}
	if k := index.BMCAddressKey(b); k != "" {
		keys[k] = true
	}
	addr := strings.TrimPrefix(index.BMCAddressKey(b), "endpoint:")
	addrs := map[string]bool{} // b's addresses, by name and by resolved IP
	if h, err := bmcaccess.Host(ctx, c, b); err == nil {
		addr = index.Address(b.Spec.Protocol, index.NormalHost(h))
		for _, host := range append([]string{index.NormalHost(h)}, ips...) {
			a := index.Address(b.Spec.Protocol, host)
			keys[a], addrs[a] = true, true
			eps := &metalv1alpha1.EndpointList{}
			if err := c.List(ctx, eps, client.MatchingFields{index.EndpointHost: host}); err != nil {
				return nil, "", fmt.Errorf("looking up Endpoints at %s: %w", host, err)
			}
			for i := range eps.Items {
				keys["endpoint:"+eps.Items[i].Name] = true
			}
		}
	}
	var out []*metalv1alpha1.BMC
	seen := map[string]bool{b.Name: true}
	for k := range keys {
		list := &metalv1alpha1.BMCList{}
		if err := c.List(ctx, list, client.MatchingFields{index.BMCAddress: k}); err != nil {
			return nil, "", fmt.Errorf("looking up BMCs at %s: %w", k, err)
		}
		for i := range list.Items {
			o := &list.Items[i]
			if seen[o.Name] || !o.DeletionTimestamp.IsZero() {
				continue
			}
			if strings.HasPrefix(k, "endpoint:") && len(addrs) > 0 {
				// Another Endpoint with this host: the same BMC only on the same scheme and port.
				if oh, err := bmcaccess.Host(ctx, c, o); err != nil || !addrs[index.Address(o.Spec.Protocol, index.NormalHost(oh))] {
					continue
				}
			}
			seen[o.Name] = true
			out = append(out, o)
		}
	}
	return out, addr, nil
}

// resolve returns the IPs a BMC host name resolves to, normalised; nil for an IP, a name that
// does not resolve, or a lookup that outlasts its second (a slow resolver costs the pass no more).
func (r *Reconciler) resolve(ctx context.Context, host string) []string {
	if host == "" {
		return nil
	}
	if _, err := netip.ParseAddr(index.NormalHost(host)); err == nil {
		return nil
	}
	lookup := r.Resolve
	if lookup == nil {
		lookup = net.DefaultResolver.LookupHost
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	got, err := lookup(ctx, index.NormalHost(host))
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(got))
	for _, ip := range got {
		if n := index.NormalHost(ip); !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// bmcBefore reports whether a was registered before b (creation time, then name).
func bmcBefore(a, b *metalv1alpha1.BMC) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// systemServer is the Server among servers (a BMC's) that is sys: by system UUID, case
// insensitive, then by system URI, then by the name this controller gives it.
func systemServer(servers []metalv1alpha1.Server, bmcName string, sys bmc.SystemSummary) *metalv1alpha1.Server {
	for i := range servers {
		if sys.UUID != "" && strings.EqualFold(servers[i].Spec.SystemUUID, sys.UUID) {
			return &servers[i]
		}
	}
	for i := range servers {
		if sys.ODataID != "" && strings.TrimSuffix(servers[i].Spec.SystemURI, "/") == strings.TrimSuffix(sys.ODataID, "/") {
			return &servers[i]
		}
	}
	for i := range servers {
		if servers[i].Name == ServerName(bmcName, sys.ID) {
			return &servers[i]
		}
	}
	return nil
}

// copyLabels copies a BMC's labels onto its Servers, so selectors written against BMC labels
// (manufacturer, rack, emulator) find the servers.
func copyLabels(in map[string]string) map[string]string {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// finalize deletes the BMC's Servers (their own finalizers power them off), logs out, and lets
// the BMC go once they are gone.
func (r *Reconciler) finalize(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.BMC]) (lifecycle.Result, error) {
	b, c := p.Obj, p.Client()
	if !controllerutil.ContainsFinalizer(b, Finalizer) {
		return lifecycle.Done(), nil
	}
	servers := &metalv1alpha1.ServerList{}
	if err := c.List(ctx, servers, client.MatchingFields{index.ServerBMC: b.Name}); err != nil {
		return lifecycle.Result{}, err
	}
	for i := range servers.Items {
		s := &servers.Items[i]
		if s.DeletionTimestamp.IsZero() {
			if err := c.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
				return lifecycle.Result{}, fmt.Errorf("deleting Server %s: %w", s.Name, err)
			}
		}
	}
	if len(servers.Items) > 0 {
		// Each Server's deletion event brings us back; the requeue is a safety net.
		return lifecycle.RequeueAfter(r.RetryAfter, "servers still present"), nil
	}
	if ep, err := bmcaccess.Endpoint(ctx, c, b); err == nil {
		if conn, err := r.Pool.Get(ep); err == nil {
			uctx, cancel := context.WithTimeout(ctx, r.requestTimeout())
			r.unsubscribe(uctx, conn, b)
			cancel()
		}
		r.Pool.Remove(ep.Address)
	}
	r.failures.Delete(b.Name)
	return lifecycle.Wrote("finalizer removed"), lifecycle.PatchMetadata(ctx, c, b, func(o client.Object) {
		controllerutil.RemoveFinalizer(o, Finalizer)
	})
}

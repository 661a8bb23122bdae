// Package wiring is the ServerWiring controller: it compares a wiring's expected cabling with the
// NICs discovery reported in its Server's status.networkInterfaces, reports ready and every
// mismatch on the wiring, and keeps the Server's NetworkReady condition as all the wirings
// naming that server say, so that a ServerReadinessRule can hold claims off a miswired server.
//
// It gates nothing itself: a wiring only sets a condition; a rule the cluster admin writes turns
// it into a taint. It imports no other controller nor the assembly (hack/layers.sh).
package wiring

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	readinessv1alpha1 "github.com/metalhub/metalhub/api/readiness/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/controller/metal/shardkey"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/shard"
)

// +kubebuilder:rbac:groups=readiness.metal.ironcore.dev,resources=serverwirings,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=readiness.metal.ironcore.dev,resources=serverwirings/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=readiness.metal.ironcore.dev,resources=serverwirings/finalizers,verbs=update
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servers,verbs=get;list;watch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servers/status,verbs=get;update;patch

const (
	// Finalizer lets a deleted wiring take its part of the Server's NetworkReady condition back
	// first. The reference's name, so a wiring it left behind is released here.
	Finalizer = "readiness.metal.ironcore.dev/serverwiring"
	// ServerAnnotation records, on the wiring, the Server whose condition it last wrote:
	// bookkeeping, so that a wiring re-pointed at another server (spec.serverRef is mutable, as
	// in the reference) or deleted releases the one it wrote, not only the one it names now.
	ServerAnnotation = "readiness.metalhub.io/server"
	// maxMessage bounds the condition messages: a wiring of many NICs all unplugged would
	// otherwise carry every mismatch into the Server.
	maxMessage = 1024
)

// Reconciler keeps a wiring's report and its Server's NetworkReady condition.
type Reconciler struct {
	// Shards, set, limits the reconciler to the wirings of the shards this replica holds: a
	// wiring goes with its server's BMC, so that all wirings of one server are judged by the
	// replica that holds it.
	Shards      *shard.Set
	Client      client.Client
	Recorder    events.EventRecorder
	Concurrency int
}

// SetupWithManager registers the reconciler (the WiringServer index must be registered:
// index.SetupWiring). A Server brings the wirings naming it when it comes or goes, when its
// discovered NICs change, or when its NetworkReady condition changes under us (a status
// restored from a backup); nothing else of its frequent status writes does.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	rec := lifecycle.NewReconciler(r.Client, func() *readinessv1alpha1.ServerWiring { return &readinessv1alpha1.ServerWiring{} }, r.handle)
	b := ctrl.NewControllerManagedBy(mgr).
		Named("serverwiring").
		For(&readinessv1alpha1.ServerWiring{}, builder.WithPredicates(predicate.Or(lifecycle.Predicate(),
			lifecycle.StatusWiped(func(o client.Object) bool {
				return apimeta.FindStatusCondition(o.(*readinessv1alpha1.ServerWiring).Status.Conditions, readinessv1alpha1.ConditionReady) == nil
			})))).
		Watches(&metalv1alpha1.Server{}, handler.EnqueueRequestsFromMapFunc(index.Naming(r.Client, &readinessv1alpha1.ServerWiringList{}, index.WiringServer)),
			builder.WithPredicates(ServerChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Concurrency, 1)})
	return shard.Gate(r.Shards, mgr.GetCache(), b, rec, func() client.ObjectList { return &readinessv1alpha1.ServerWiringList{} },
		shardkey.ForServerRef(r.Client, func(w *readinessv1alpha1.ServerWiring) string { return w.Spec.ServerRef.Name })).Complete(rec)
}

type wiringPass struct {
	*lifecycle.Pass[*readinessv1alpha1.ServerWiring]
	server *metalv1alpha1.Server // the Server the spec names; nil when not found
}

func (r *Reconciler) handle(ctx context.Context, lp *lifecycle.Pass[*readinessv1alpha1.ServerWiring]) (lifecycle.Result, error) {
	p := &wiringPass{Pass: lp}
	return lifecycle.Steps(ctx, p,
		r.read,
		lifecycle.OnDeletion(r.release),
		r.repoint,
		r.record,
		r.judge,
	)
}

// read finds the Server the wiring names.
func (r *Reconciler) read(ctx context.Context, p *wiringPass) (lifecycle.Result, error) {
	s, err := r.getServer(ctx, p.Client(), p.Obj.Spec.ServerRef.Name)
	if err != nil {
		return lifecycle.Result{}, err
	}
	p.server = s
	return lifecycle.Continue(), nil
}

// release gives the condition of every server the wiring wrote to back to the other wirings
// naming it (or removes it: none left), then lets the wiring go.
func (r *Reconciler) release(ctx context.Context, p *wiringPass) (lifecycle.Result, error) {
	if !controllerutil.ContainsFinalizer(p.Obj, Finalizer) {
		return lifecycle.Done(), nil
	}
	for _, name := range written(p.Obj) {
		if err := r.resync(ctx, p, name); err != nil {
			return lifecycle.Result{}, err
		}
	}
	return lifecycle.Wrote("finalizer removed"), lifecycle.PatchMetadata(ctx, p.Client(), p.Obj, func(o client.Object) {
		controllerutil.RemoveFinalizer(o, Finalizer)
		lifecycle.RemoveAnnotation(o, ServerAnnotation)
	})
}

// repoint releases the server a re-pointed wiring wrote to before, and records the new one.
func (r *Reconciler) repoint(ctx context.Context, p *wiringPass) (lifecycle.Result, error) {
	old, ok := p.Obj.Annotations[ServerAnnotation]
	if !ok || old == p.Obj.Spec.ServerRef.Name {
		return lifecycle.Continue(), nil
	}
	if err := r.resync(ctx, p, old); err != nil {
		return lifecycle.Result{}, err
	}
	return lifecycle.Wrote("re-pointed"), lifecycle.PatchMetadata(ctx, p.Client(), p.Obj, func(o client.Object) {
		lifecycle.SetAnnotation(o, ServerAnnotation, p.Obj.Spec.ServerRef.Name)
	})
}

// record adds the finalizer and the server annotation, in one write, before the wiring writes a
// server's condition it must take back.
func (r *Reconciler) record(ctx context.Context, p *wiringPass) (lifecycle.Result, error) {
	_, ok := p.Obj.Annotations[ServerAnnotation]
	if ok && controllerutil.ContainsFinalizer(p.Obj, Finalizer) {
		return lifecycle.Continue(), nil
	}
	return lifecycle.Wrote("finalizer"), lifecycle.PatchMetadata(ctx, p.Client(), p.Obj, func(o client.Object) {
		lifecycle.AddFinalizer(o, Finalizer)
		lifecycle.SetAnnotation(o, ServerAnnotation, p.Obj.Spec.ServerRef.Name)
	})
}

// judge compares the wiring with its server, reports it and brings the server's condition in
// line with every wiring naming it.
func (r *Reconciler) judge(ctx context.Context, p *wiringPass) (lifecycle.Result, error) {
	w := p.Obj
	st := w.Status.DeepCopy()
	before := apimeta.FindStatusCondition(w.Status.Conditions, readinessv1alpha1.ConditionReady)
	var status metav1.ConditionStatus
	var reason, msg string
	var err error
	if p.server == nil {
		st.Ready, st.Mismatches = false, nil
		status, reason = metav1.ConditionFalse, readinessv1alpha1.ReasonServerNotFound
		msg = fmt.Sprintf("Server %s not found: nothing compared", w.Spec.ServerRef.Name)
	} else {
		st.Mismatches = Compare(w.Spec.Network.Interfaces, p.server.Status.NetworkInterfaces)
		st.Ready = len(st.Mismatches) == 0
		status, reason, msg = verdict(w, st.Mismatches)
		err = r.resync(ctx, p, p.server.Name)
	}
	lifecycle.SetCondition(&st.Conditions, w.Generation, readinessv1alpha1.ConditionReady, status, reason, msg)
	if before == nil || before.Status != status || before.Reason != reason || before.Message != msg {
		typ, evReason := corev1.EventTypeNormal, readinessv1alpha1.ReasonWiringVerified
		if status != metav1.ConditionTrue {
			typ, evReason = corev1.EventTypeWarning, readinessv1alpha1.ReasonWiringMismatch
		}
		var related runtime.Object // a nil *Server would be a non-nil interface
		if p.server != nil {
			related = p.server
		}
		r.Recorder.Eventf(w, related, typ, evReason, "Verify", "%s: %s", reason, msg)
	}
	w.Status = *st // the Reconciler writes it when it changed, also when the server's write failed
	if err != nil {
		return lifecycle.Result{}, err
	}
	return lifecycle.Done(), nil
}

// verdict is a compared wiring's Ready condition.
func verdict(w *readinessv1alpha1.ServerWiring, ms []readinessv1alpha1.InterfaceMismatch) (metav1.ConditionStatus, string, string) {
	switch {
	case len(w.Spec.Network.Interfaces) == 0:
		return metav1.ConditionTrue, readinessv1alpha1.ReasonNoExpectedSpec, "no interfaces expected: nothing to check"
	case len(ms) == 0:
		return metav1.ConditionTrue, readinessv1alpha1.ReasonMatch, fmt.Sprintf("all %d expected interfaces seen as expected", len(w.Spec.Network.Interfaces))
	}
	parts := make([]string, 0, len(ms))
	for _, m := range ms {
		parts = append(parts, m.Message)
	}
	return metav1.ConditionFalse, Gravest(ms), truncate(fmt.Sprintf("%d mismatches: %s", len(ms), strings.Join(parts, "; ")))
}

// resync sets the NetworkReady condition of the server named name from the wirings that name it
// now (the pass's own wiring only while it is not being deleted), or removes it when none does.
// The write is optimistically locked: a server changed meanwhile is judged again.
func (r *Reconciler) resync(ctx context.Context, p *wiringPass, name string) error {
	s := p.server
	if s == nil || s.Name != name {
		var err error
		if s, err = r.getServer(ctx, p.Client(), name); err != nil || s == nil {
			return err
		}
	}
	var list readinessv1alpha1.ServerWiringList
	if err := p.Client().List(ctx, &list, client.MatchingFields{index.WiringServer: name}); err != nil {
		return fmt.Errorf("listing the ServerWirings of server %s: %w", name, err)
	}
	wirings := make([]readinessv1alpha1.ServerWiring, 0, len(list.Items)+1)
	for _, w := range list.Items {
		if w.UID != p.Obj.UID && w.DeletionTimestamp.IsZero() {
			wirings = append(wirings, w)
		}
	}
	if p.Obj.DeletionTimestamp.IsZero() && p.Obj.Spec.ServerRef.Name == name {
		wirings = append(wirings, *p.Obj) // as this pass sees it, not as the cache may still have it
	}
	base := s.DeepCopy()
	cond := ServerCondition(s, wirings)
	var changed bool
	if cond == nil {
		changed = apimeta.RemoveStatusCondition(&s.Status.Conditions, readinessv1alpha1.ConditionNetworkReady)
	} else {
		changed = lifecycle.SetCondition(&s.Status.Conditions, s.Generation, cond.Type, cond.Status, cond.Reason, cond.Message)
	}
	if !changed {
		return nil
	}
	if err := p.Client().Status().Patch(ctx, s, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("writing condition %s of server %s: %w", readinessv1alpha1.ConditionNetworkReady, name, err)
	}
	old := apimeta.FindStatusCondition(base.Status.Conditions, readinessv1alpha1.ConditionNetworkReady)
	switch {
	case cond == nil:
		r.Recorder.Eventf(s, p.Obj, corev1.EventTypeNormal, "NetworkReadyRemoved", "Verify", "no ServerWiring names the server any more")
	case old == nil || old.Status != cond.Status:
		r.Recorder.Eventf(s, p.Obj, eventType(cond.Status), cond.Reason, "Verify", "NetworkReady %s: %s", cond.Status, cond.Message)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("server condition written", "server", name, "condition", readinessv1alpha1.ConditionNetworkReady, "present", cond != nil)
	return nil
}

// ServerCondition is the NetworkReady condition the wirings naming s give it (nil: none names
// it). True when every one matches, else False with the gravest reason of all their mismatches;
// the message names the wirings. Each wiring is compared here, from its spec, rather than read
// from its status: another wiring's report may be older than the server.
func ServerCondition(s *metalv1alpha1.Server, wirings []readinessv1alpha1.ServerWiring) *metav1.Condition {
	if len(wirings) == 0 {
		return nil
	}
	slices.SortFunc(wirings, func(a, b readinessv1alpha1.ServerWiring) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	var all []readinessv1alpha1.InterfaceMismatch
	var bad, names []string
	empty := true
	for i := range wirings {
		w := &wirings[i]
		names = append(names, w.Namespace+"/"+w.Name)
		empty = empty && len(w.Spec.Network.Interfaces) == 0
		ms := Compare(w.Spec.Network.Interfaces, s.Status.NetworkInterfaces)
		all = append(all, ms...)
		for _, m := range ms {
			bad = append(bad, fmt.Sprintf("%s/%s: %s", w.Namespace, w.Name, m.Message))
		}
	}
	c := &metav1.Condition{Type: readinessv1alpha1.ConditionNetworkReady, Status: metav1.ConditionTrue, Reason: readinessv1alpha1.ReasonMatch}
	switch {
	case len(all) > 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, Gravest(all), truncate(strings.Join(bad, "; "))
	case empty:
		c.Reason, c.Message = readinessv1alpha1.ReasonNoExpectedSpec, truncate("ServerWiring "+strings.Join(names, ", ")+" expects no interfaces")
	default:
		c.Message = truncate("cabled as ServerWiring " + strings.Join(names, ", ") + " expects")
	}
	return c
}

func (r *Reconciler) getServer(ctx context.Context, c client.Reader, name string) (*metalv1alpha1.Server, error) {
	s := &metalv1alpha1.Server{}
	err := c.Get(ctx, client.ObjectKey{Name: name}, s)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading server %s: %w", name, err)
	}
	return s, nil
}

// written are the servers whose condition the wiring may have written: the one recorded and the
// one it names.
func written(w *readinessv1alpha1.ServerWiring) []string {
	out := []string{w.Spec.ServerRef.Name}
	if old, ok := w.Annotations[ServerAnnotation]; ok && old != w.Spec.ServerRef.Name {
		out = append(out, old)
	}
	return out
}

func eventType(s metav1.ConditionStatus) string {
	if s == metav1.ConditionTrue {
		return corev1.EventTypeNormal
	}
	return corev1.EventTypeWarning
}

func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage-3] + "..."
}

// ServerChanged passes the Server events a wiring judges by: creation and deletion, a change of
// the discovered NICs as the comparison sees them (MAC, carrier, LLDP neighbours), and a
// NetworkReady condition changed or removed by someone. Power, state and inventory writes do
// not pass.
func ServerChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okO := e.ObjectOld.(*metalv1alpha1.Server)
			n, okN := e.ObjectNew.(*metalv1alpha1.Server)
			if !okO || !okN {
				return true
			}
			return !equality.Semantic.DeepEqual(observed(o), observed(n)) || !sameCondition(o, n)
		},
	}
}

// seenNIC is what the comparison reads of a NIC.
type seenNIC struct {
	MAC, Carrier string
	Neighbors    [][2]string
}

func observed(s *metalv1alpha1.Server) []seenNIC {
	out := make([]seenNIC, 0, len(s.Status.NetworkInterfaces))
	for _, n := range s.Status.NetworkInterfaces {
		x := seenNIC{MAC: NormalMAC(n.MACAddress), Carrier: n.CarrierStatus}
		for _, nb := range n.Neighbors {
			x.Neighbors = append(x.Neighbors, [2]string{nb.SystemName, nb.PortID})
		}
		out = append(out, x)
	}
	return out
}

func sameCondition(a, b *metalv1alpha1.Server) bool {
	x := apimeta.FindStatusCondition(a.Status.Conditions, readinessv1alpha1.ConditionNetworkReady)
	y := apimeta.FindStatusCondition(b.Status.Conditions, readinessv1alpha1.ConditionNetworkReady)
	if x == nil || y == nil {
		return x == y
	}
	return x.Status == y.Status && x.Reason == y.Reason && x.Message == y.Message
}

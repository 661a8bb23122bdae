package work

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// ServerPass is one pass over a per-server object: its lifecycle pass with the Work beside it.
type ServerPass interface {
	lifecycle.PassOf
	ServerWork() *Work
}

// ServerWork is the Work itself (a pass that embeds it answers ServerPass with it).
func (w *Work) ServerWork() *Work { return w }

// NewServerWork begins the Work of one pass over self, a per-server object: server, maintenance
// reference and policy from its spec, its BMC calls bounded by the request timeout until cancel.
func (a *Actor) NewServerWork(ctx context.Context, self client.Object, c client.Client, server *corev1.LocalObjectReference,
	maint **metalv1alpha1.ObjectReference, policy metalv1alpha1.ServerMaintenancePolicy) (w *Work, cancel context.CancelFunc) {
	bctx, cancel := context.WithTimeout(ctx, a.Options.RequestTimeout)
	w = &Work{Self: self, C: c, BMCContext: bctx, MaintRef: maint, Policy: policy}
	if server != nil {
		w.ServerName = server.Name
	}
	return w, cancel
}

// OpenServerPass are the steps each pass over a per-server object begins with: its finalizer,
// the read of its server, record and maintenance, and leaving a maintenance it is done with.
func OpenServerPass[P ServerPass](a *Actor) []lifecycle.Step[P] {
	return []lifecycle.Step[P]{
		lifecycle.EnsureFinalizer[P](Finalizer),
		func(ctx context.Context, p P) (lifecycle.Result, error) { return a.Read(ctx, p.ServerWork()) },
		func(ctx context.Context, p P) (lifecycle.Result, error) {
			w := p.ServerWork()
			return a.Leave(ctx, w, w.Maint)
		},
	}
}

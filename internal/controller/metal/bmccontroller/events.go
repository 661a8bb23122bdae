package bmccontroller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcevents"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// ReasonSubscriptionFailed is the reason of the Warning event on a BMC that has an EventService
// but refused metalhub's subscription; its servers' logs are still polled.
const ReasonSubscriptionFailed = "EventSubscriptionFailed"

// subscription keeps one event subscription of ours on the BMC, to EventsURL: found again by its
// Context (bmcevents.SubscriptionContext) after a restart or a wiped status, so never made twice; one to
// an older URL is replaced. The BMC itself is the bookkeeping: status only reports the link. A
// BMC without an EventService is left to the log polling.
func (r *Reconciler) subscription(ctx context.Context, p *bmcPass) (lifecycle.Result, error) {
	p.subscription = p.Obj.Status.EventsSubscriptionLink
	if r.EventsURL == "" {
		return lifecycle.Continue(), nil
	}
	log := ctrl.LoggerFrom(ctx)
	subs, err := p.conn.Subscriptions(p.bctx)
	if err != nil {
		if bmc.ReasonOf(err) == bmc.ReasonUnsupported {
			p.subscription = ""
		} else {
			log.Info("listing the BMC's event subscriptions failed", "error", err.Error())
		}
		return lifecycle.Continue(), nil
	}
	want := bmcevents.SubscriptionContext(p.Obj.Name)
	found := ""
	for _, s := range subs {
		if s.Context != want {
			continue
		}
		if s.Destination == r.EventsURL && found == "" {
			found = s.URI
			continue
		}
		// Ours to an older receiver URL, or a duplicate: gone, so events arrive once.
		if err := p.conn.Unsubscribe(p.bctx, s.URI); err != nil {
			log.Info("removing a stale event subscription failed", "subscription", s.URI, "error", err.Error())
		}
	}
	if found == "" {
		if found, err = p.conn.Subscribe(p.bctx, r.EventsURL, want); err != nil {
			r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, ReasonSubscriptionFailed, "Subscribe",
				"subscribing to the BMC's events failed (its servers' logs are polled instead): %v", err)
			found = ""
		}
	}
	p.subscription = found
	return lifecycle.Continue(), nil
}

// unsubscribe removes our subscription from a BMC that is being deleted, best effort: a BMC that
// cannot be reached keeps it until someone removes it there.
func (r *Reconciler) unsubscribe(ctx context.Context, conn bmc.BMC, b *metalv1alpha1.BMC) {
	if b.Status.EventsSubscriptionLink == "" {
		return
	}
	if err := conn.Unsubscribe(ctx, b.Status.EventsSubscriptionLink); err != nil {
		ctrl.LoggerFrom(ctx).Info("removing the event subscription of a deleted BMC failed", "error", err.Error())
	}
}

package server

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/discovery"
	"github.com/metalhub/metalhub/internal/inventory"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// releasePolicy is what a release of s is cleaned by: the policy recorded when it was reserved
// (the claim's narrowing included), else the server's own or the fleet's (a server claimed
// before metalhub ran, or whose mark was lost with its reservation).
func (r *Reconciler) releasePolicy(s *metalv1alpha1.Server) metalv1alpha1.CleaningPolicy {
	if p := metalv1alpha1.CleaningPolicy(s.Annotations[serverstate.CleaningAnnotation]); cleaning.Valid(p) {
		return p
	}
	return cleaning.Effective(r.Options.CleaningPolicy, s.Spec.CleaningPolicy, "")
}

// markForCleaning records, in the write that reserves s for claim, what its release will be
// cleaned by (None too: the claim's narrowing must outlive the claim). A mark of a release not
// cleaned yet is only ever widened: that tenant's data is still on the disks.
func (r *Reconciler) markForCleaning(s *metalv1alpha1.Server, claim *metalv1alpha1.ServerClaim) {
	var asked metalv1alpha1.CleaningPolicy
	if claim != nil {
		asked = claim.Spec.CleaningPolicy
	}
	p := cleaning.Effective(r.Options.CleaningPolicy, s.Spec.CleaningPolicy, asked)
	if prev := metalv1alpha1.CleaningPolicy(s.Annotations[serverstate.CleaningAnnotation]); cleaning.Valid(prev) {
		p = cleaning.Wider(p, prev)
	}
	lifecycle.SetAnnotation(s, serverstate.CleaningAnnotation, string(p))
}

// cleaningRound is the round a server in Cleaning was booted into, and when.
type cleaningRound struct {
	id string
	at time.Time
}

func (c cleaningRound) String() string { return c.id + "@" + strconv.FormatInt(c.at.Unix(), 10) }

func parseCleaningRound(v string) (cleaningRound, bool) {
	id, at, ok := strings.Cut(v, "@")
	secs, err := strconv.ParseInt(at, 10, 64)
	if !ok || id == "" || err != nil {
		return cleaningRound{}, false
	}
	return cleaningRound{id: id, at: time.Unix(secs, 0)}, true
}

// cleaning erases a released server's disks before it is Available again: it boots the
// discovery image for a cleaning round (as Initial does for discovery: the round's objects, a
// one-time boot and a power-on, recorded in one write), keeps the box on until the agent's
// report is in the server's cleaning record, and judges it: every disk the policy covers erased
// and read back as erased takes the server to Available (powered off, its mark gone, in one
// write); anything else, or no report within CleaningTimeout, to Error naming the disk. Every
// step is bookkeeping in metadata, so a restart, a wiped status or another replica resumes the
// round where it is and never hands the server out before the verdict.
func (r *Reconciler) cleaning(bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	s := p.Obj
	policy := r.releasePolicy(s)
	if policy == metalv1alpha1.CleaningPolicyNone {
		if err := r.settleOwed(ctx, s); err != nil {
			return lifecycle.Result{}, err
		}
		return r.transition(ctx, p, metalv1alpha1.ServerStateAvailable, "cleaning policy None", func(s *metalv1alpha1.Server) {
			endCleaning(s, r.Options.DiscoveryNamespace)
		})
	}
	round, booted := parseCleaningRound(s.Annotations[serverstate.CleaningRoundAnnotation])
	if !booted {
		if r.Options.CleaningBMCErase && policy == metalv1alpha1.CleaningPolicyAllDisks {
			if res, ok, err := r.startBMCErase(bctx, ctx, p); ok || err != nil {
				return res, err
			}
		}
		return r.startCleaning(bctx, ctx, p, policy)
	}
	if isBMCRound(round) {
		return r.bmcErase(bctx, ctx, p, policy, round)
	}
	if discovery.Cleaned(s, round.id) {
		return r.judgeCleaning(bctx, ctx, p, policy, round)
	}
	left := r.Options.CleaningTimeout - r.Now().Sub(round.at)
	if left <= 0 {
		return r.cleaningFailed(bctx, ctx, p, fmt.Sprintf("no cleaning report within %s of round %s's boot", r.Options.CleaningTimeout, round.id))
	}
	if p.sys.PowerState == bmc.PowerStateOff && !r.inFlight(p, metalv1alpha1.PowerOn) {
		// The box went off before its agent reported (a crash, someone's hand): powered on
		// alone it would boot its disk, the last tenant's OS. The round is booted again.
		rec, end, err := r.bootRound(bctx, ctx, p, "cleaning round "+round.id+", again")
		if err != nil || end != nil || rec == "" {
			return deref(end), err
		}
		return lifecycle.Wrote("cleaning round booted again"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
			lifecycle.SetAnnotation(s, serverstate.PowerAnnotation, rec)
		})
	}
	return lifecycle.RequeueAfter(min(left, r.Options.ServerResync), "waiting for the cleaning report"), nil
}

// startCleaning boots a new cleaning round. A round Secret that is not a fresh cleaning round
// of this server (discovery's, or a cleaning round already reported) is removed first.
func (r *Reconciler) startCleaning(bctx, ctx context.Context, p *serverPass, policy metalv1alpha1.CleaningPolicy) (lifecycle.Result, error) {
	sec, err := r.roundSecret(ctx, p)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if sec != nil && (sec.Labels[discovery.PurposeLabel] != discovery.PurposeCleaning ||
		discovery.Cleaned(p.Obj, sec.Labels[discovery.RoundLabel]) || sec.Labels[discovery.CleaningPolicyLabel] != string(policy)) {
		return lifecycle.RequeueAfter(r.Options.PowerPoll, "removing an earlier round"), r.deleteRound(ctx, p)
	}
	if sec == nil {
		// The agent is booted from a powered-off box, so the network boot really happens.
		if res, err := r.converge(ctx, p, metalv1alpha1.PowerOff, false); err != nil || !res.IsContinue() {
			return res, err
		}
	}
	if sec, err = r.ensureRound(ctx, p, sec, policy); err != nil {
		return lifecycle.Result{}, err
	}
	id := sec.Labels[discovery.RoundLabel]
	rec, end, err := r.bootRound(bctx, ctx, p, "cleaning round "+id)
	if err != nil || end != nil {
		return deref(end), err
	}
	ref := r.discoveryRef()
	ref.Name = discovery.ObjectName(p.Obj.Name)
	return lifecycle.Wrote("cleaning round"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		lifecycle.SetAnnotation(s, serverstate.CleaningAnnotation, string(policy))
		lifecycle.SetAnnotation(s, serverstate.CleaningRoundAnnotation, cleaningRound{id: id, at: r.Now()}.String())
		lifecycle.SetAnnotation(s, discovery.RoundAnnotation, id)
		lifecycle.SetAnnotation(s, serverstate.BootOnceAnnotation, id)
		if rec != "" {
			lifecycle.SetAnnotation(s, serverstate.PowerAnnotation, rec)
		}
		s.Spec.BootConfigurationRef = ref
	})
}

// judgeCleaning reads the round's entry of the cleaning record and decides.
func (r *Reconciler) judgeCleaning(bctx, ctx context.Context, p *serverPass, policy metalv1alpha1.CleaningPolicy, round cleaningRound) (lifecycle.Result, error) {
	rd := r.reader()
	cm := &corev1.ConfigMap{}
	err := rd.Get(ctx, client.ObjectKey{Namespace: r.Options.DiscoveryNamespace, Name: cleaning.ObjectName(p.Obj.Name)}, cm)
	if apierrors.IsNotFound(err) {
		return r.cleaningFailed(bctx, ctx, p, fmt.Sprintf("round %s was reported, but the cleaning record is gone", round.id))
	}
	if err != nil {
		return lifecycle.Result{}, fmt.Errorf("reading the cleaning record: %w", err)
	}
	rec, err := cleaning.Decode(cm)
	if err != nil {
		return r.cleaningFailed(bctx, ctx, p, err.Error())
	}
	entry, ok := rec.Of(round.id)
	if !ok {
		return r.cleaningFailed(bctx, ctx, p, fmt.Sprintf("round %s was reported, but the cleaning record has no entry of it", round.id))
	}
	expected, err := r.inventoryDisks(ctx, p.Obj)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if good, why := cleaning.Verdict(entry, policy, expected); !good {
		return r.cleaningFailed(bctx, ctx, p, why)
	}
	return r.cleaned(bctx, ctx, p, policy, entry)
}

// cleaned ends a cleaning whose entry proved it: the box off, Available, the mark gone, the
// summary kept, in one write (an owed record it settles removed just before).
func (r *Reconciler) cleaned(bctx, ctx context.Context, p *serverPass, policy metalv1alpha1.CleaningPolicy, entry cleaning.Entry) (lifecycle.Result, error) {
	if err := r.settleOwed(ctx, p.Obj); err != nil {
		return lifecycle.Result{}, err
	}
	issued, _, err := r.powerAction(bctx, p, metalv1alpha1.PowerOff, false)
	if err != nil {
		return lifecycle.Result{}, err
	}
	// The transition's event carries the proof's summary: one event per cleaning, not two.
	summary := cleaning.Summary(entry)
	cleaningsTotal.WithLabelValues(string(policy), "verified").Inc()
	return r.transition(ctx, p, metalv1alpha1.ServerStateAvailable, "disks cleaned and verified: "+summary, func(s *metalv1alpha1.Server) {
		if issued {
			lifecycle.SetAnnotation(s, serverstate.PowerAnnotation, powerRecord{target: metalv1alpha1.PowerOff, at: r.Now()}.String())
		}
		lifecycle.SetAnnotation(s, serverstate.LastCleaningAnnotation, summary)
		endCleaning(s, r.Options.DiscoveryNamespace)
	})
}

// cleaningFailed powers the box off, removes the round (a late report of it is refused) and
// puts the server in Error saying why; it keeps its mark, so no claim binds it, and a retry
// cleans it again with a new round.
func (r *Reconciler) cleaningFailed(bctx, ctx context.Context, p *serverPass, why string) (lifecycle.Result, error) {
	issued, _, err := r.powerAction(bctx, p, metalv1alpha1.PowerOff, false)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if err := r.deleteRound(ctx, p); err != nil {
		return lifecycle.Result{}, err
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, metalv1alpha1.ReasonCleaningFailed, "Clean", "%s", why)
	cleaningsTotal.WithLabelValues(string(r.releasePolicy(p.Obj)), "failed").Inc()
	return r.transition(ctx, p, metalv1alpha1.ServerStateError, "cleaning failed: "+why, func(s *metalv1alpha1.Server) {
		if issued {
			lifecycle.SetAnnotation(s, serverstate.PowerAnnotation, powerRecord{target: metalv1alpha1.PowerOff, at: r.Now()}.String())
		}
		lifecycle.SetAnnotation(s, serverstate.PreviousStateAnnotation, string(metalv1alpha1.ServerStateCleaning))
		lifecycle.SetAnnotation(s, serverstate.CleaningFailedAnnotation, why)
		lifecycle.RemoveAnnotation(s, serverstate.CleaningRoundAnnotation)
		lifecycle.RemoveAnnotation(s, serverstate.CleaningTasksAnnotation)
		clearDiscovery(s, r.Options.DiscoveryNamespace)
	})
}

// endCleaning removes a finished cleaning's bookkeeping: the mark, the round, its boot, the
// owed record's note (settleOwed removed the record).
func endCleaning(s *metalv1alpha1.Server, ns string) {
	lifecycle.RemoveAnnotation(s, serverstate.CleaningAnnotation)
	lifecycle.RemoveAnnotation(s, serverstate.CleaningRoundAnnotation)
	lifecycle.RemoveAnnotation(s, serverstate.CleaningFailedAnnotation)
	lifecycle.RemoveAnnotation(s, serverstate.CleaningOwedAnnotation)
	lifecycle.RemoveAnnotation(s, serverstate.CleaningTasksAnnotation)
	clearDiscovery(s, ns)
}

// inventoryDisks are the drives discovery found on the server (kernel names, or serials where
// known), from its inventory record: a cleaning report that leaves one out proves nothing about
// it. None when there is no record.
func (r *Reconciler) inventoryDisks(ctx context.Context, s *metalv1alpha1.Server) ([]string, error) {
	cm := &corev1.ConfigMap{}
	err := r.reader().Get(ctx, client.ObjectKey{Namespace: r.Options.DiscoveryNamespace, Name: inventory.ObjectName(s.Name)}, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the inventory record: %w", err)
	}
	rec, err := inventory.Decode(cm)
	if err != nil {
		return nil, nil // unreadable: the report's own list stands
	}
	var out []string
	for _, st := range rec.Current.Storages {
		for _, d := range st.Drives {
			out = append(out, cmp.Or(d.SerialNumber, d.Name))
		}
	}
	return out, nil
}

// cleaningsTotal counts finished cleanings by policy and outcome.
var cleaningsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "metalhub_server_cleanings_total",
	Help: "Cleanings of released servers judged by the Server controller, by policy and result (verified, failed).",
}, []string{"policy", "result"})

func init() { metrics.Registry.MustRegister(cleaningsTotal) }

// reader reads past the cache where the caller must not act on a stale object.
func (r *Reconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

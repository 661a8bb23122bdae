package delivery

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/preview"
	"github.com/metalhub/metalhub/internal/infrahub"
)

// DefaultPreviewInterval is how often the proposed changes of a sync with spec.preview are
// looked at.
const DefaultPreviewInterval = time.Minute

// maxCommentBytes keeps a preview's comment within what a reviewer reads (and Infrahub stores).
const maxCommentBytes = 60 << 10

// previewReconciler posts, to each open proposed change into a sync's branch that changes the
// sync's artifacts, what it would do to the live objects. The comment itself is the bookkeeping:
// the preview's comment is found on the proposed change by its first line and replaced only
// when its text changes, so a restart, a wiped status or a second replica never posts twice.
// Its own controller and worker: a preview downloads and dry-runs, and must not hold a sync's
// delivery back.
type previewReconciler struct {
	rs       *reconcilers
	interval time.Duration
	now      func() time.Time
}

func previewOn(s *infrahubv1alpha1.InfrahubSync) bool {
	return s.Spec.Preview != nil && s.Spec.Preview.ProposedChanges
}

func (p *previewReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	r := p.rs.sync
	s := &infrahubv1alpha1.InfrahubSync{}
	if err := r.client.Get(ctx, req.NamespacedName, s); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !s.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	var previews []infrahubv1alpha1.PreviewStatus
	if previewOn(s) {
		var err error
		if previews, err = p.previewAll(ctx, s); err != nil {
			return reconcile.Result{}, err
		}
	}
	if !equality.Semantic.DeepEqual(previews, s.Status.Previews) {
		patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
		s.Status.Previews = previews
		if err := r.client.Status().Patch(ctx, s, patch); err != nil {
			if apierrors.IsConflict(err) {
				return reconcile.Result{Requeue: true}, nil
			}
			return reconcile.Result{}, fmt.Errorf("reporting previews: %w", err)
		}
	}
	if !previewOn(s) {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{RequeueAfter: p.interval}, nil
}

// previewAll previews every open proposed change into s's branch; a failure of one is reported
// on it, a failure to reach Infrahub at all fails the pass.
func (p *previewReconciler) previewAll(ctx context.Context, s *infrahubv1alpha1.InfrahubSync) ([]infrahubv1alpha1.PreviewStatus, error) {
	r := p.rs.sync
	cfg, err := r.creds.Config(ctx, s)
	if err != nil {
		return nil, err
	}
	ic, err := r.clients.Get(cfg)
	if err != nil {
		return nil, err
	}
	pcs, err := ic.OpenProposedChanges(ctx)
	if err != nil {
		return nil, err
	}
	base := s.Spec.Source.TargetBranch
	if base == "" {
		base = infrahub.DefaultBranch
	}
	slices.SortFunc(pcs, func(a, b infrahub.ProposedChange) int { return strings.Compare(a.ID, b.ID) })
	before := map[string]infrahubv1alpha1.PreviewStatus{}
	for _, ps := range s.Status.Previews {
		before[ps.ProposedChange] = ps
	}
	var out []infrahubv1alpha1.PreviewStatus
	for _, pc := range pcs {
		if pc.DestinationBranch != base || pc.SourceBranch == base || len(out) == 20 {
			continue
		}
		ps, touched := p.previewOne(ctx, ic, s, pc, before[pc.ID])
		if touched {
			out = append(out, ps)
		}
	}
	return out, nil
}

// previewOne previews one proposed change and posts or updates its comment; touched is false for
// a proposed change that changes none of the sync's artifacts and was never commented on.
func (p *previewReconciler) previewOne(ctx context.Context, ic *infrahub.Client, s *infrahubv1alpha1.InfrahubSync, pc infrahub.ProposedChange, last infrahubv1alpha1.PreviewStatus) (infrahubv1alpha1.PreviewStatus, bool) {
	log := logf.FromContext(ctx).WithValues("proposedChange", pc.ID, "branch", pc.SourceBranch)
	ps := infrahubv1alpha1.PreviewStatus{ProposedChange: pc.ID, Name: pc.Name, Branch: pc.SourceBranch, Time: last.Time}
	fail := func(err error) (infrahubv1alpha1.PreviewStatus, bool) {
		ps.Error = clip(err.Error())
		if ps.Error != last.Error {
			p.rs.sync.recorder.Eventf(s, nil, "Warning", infrahubv1alpha1.ReasonPreviewFailed, "Preview",
				"proposed change %s (%s): %s", pc.Name, pc.ID, clipNote(err.Error()))
		}
		return ps, true
	}
	rep, err := p.rs.preview(ctx, s, pc.SourceBranch)
	if err != nil {
		return fail(err)
	}
	c := rep.Counts()
	ps.Created, ps.Changed, ps.Deleted, ps.Refused = int32(c[preview.Create]), int32(c[preview.Change]), int32(c[preview.Delete]), int32(c[preview.Refused])
	text := rep.Markdown()
	if len(text) > maxCommentBytes {
		text = text[:maxCommentBytes] + "\n\n… cut; `metalhub delivery diff " + s.Name + " --branch " + pc.SourceBranch + "` prints all of it.\n"
	}
	header, _, _ := strings.Cut(text, "\n")
	comments, err := ic.ChangeComments(ctx, pc.ID)
	if err != nil {
		return fail(err)
	}
	var mine *infrahub.Comment
	for i := range comments {
		if first, _, _ := strings.Cut(comments[i].Text, "\n"); first == header {
			mine = &comments[i]
			break
		}
	}
	touches := rep.Changed+rep.Removed > 0
	switch {
	case mine == nil && !touches:
		return ps, false
	case mine != nil && mine.Text == text:
		return ps, true
	}
	id := ""
	if mine != nil {
		id = mine.ID
	}
	if _, err := ic.CommentOnProposedChange(ctx, pc.ID, id, text); err != nil {
		return fail(err)
	}
	now := metav1.NewTime(p.now().Truncate(time.Second))
	ps.Time = &now
	log.Info("Posted the preview of a proposed change", "created", ps.Created, "changed", ps.Changed, "deleted", ps.Deleted, "refused", ps.Refused)
	p.rs.sync.recorder.Eventf(s, nil, "Normal", infrahubv1alpha1.ReasonPreviewPosted, "Preview",
		"proposed change %s: %d to create, %d to change, %d to delete, %d refused", pc.Name, ps.Created, ps.Changed, ps.Deleted, ps.Refused)
	return ps, true
}

package policy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// Limits bound what one sync may cost everyone else: the artifacts it keeps, the bytes of its
// manifests (each is stored in a VidraResource and cached whole), and how long one pass may
// hold a sync worker. An admin lowers them per sync with annotations, never raises them.
type Limits struct {
	// MaxArtifacts is the most artifacts one sync's answer may name.
	MaxArtifacts int
	// MaxManifestBytes is the largest artifact downloaded.
	MaxManifestBytes int64
	// MaxSyncBytes is the most manifest bytes one sync's VidraResources may hold together.
	MaxSyncBytes int64
	// PassTimeout bounds a sync pass: the query and the downloads.
	PassTimeout time.Duration
	// ApplyWindow is the most VidraResources of one sync written and not yet applied (their
	// status.observedGeneration behind their generation); the sync writes more as they apply.
	ApplyWindow int
	// MaxObjectsPerWriter is the most InfrahubSyncs, and apart the most VidraResources, one
	// writer may have (not the operator's own: a sync's are bounded by the limits above),
	// enforced at admission; 0: no bound. Not defaulted by withDefaults (0 is a value):
	// BindFlags offers DefaultMaxObjectsPerWriter.
	MaxObjectsPerWriter int
}

// DefaultLimits: room for the largest syncs seen in practice (hundreds of artifacts of some
// kilobytes), far below what would crowd out the other tenants or etcd's object size.
func DefaultLimits() Limits {
	return Limits{MaxArtifacts: 1000, MaxManifestBytes: 1 << 20, MaxSyncBytes: 32 << 20, PassTimeout: 2 * time.Minute, ApplyWindow: 100}
}

func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MaxArtifacts <= 0 {
		l.MaxArtifacts = d.MaxArtifacts
	}
	if l.MaxManifestBytes <= 0 {
		l.MaxManifestBytes = d.MaxManifestBytes
	}
	if l.MaxSyncBytes <= 0 {
		l.MaxSyncBytes = d.MaxSyncBytes
	}
	if l.PassTimeout <= 0 {
		l.PassTimeout = d.PassTimeout
	}
	if l.ApplyWindow <= 0 {
		l.ApplyWindow = d.ApplyWindow
	}
	return l
}

// ForSync lowers the limits by the sync's annotations (a value above the flag's is ignored).
func (l Limits) ForSync(s *infrahubv1alpha1.InfrahubSync) Limits {
	if v, err := strconv.Atoi(s.Annotations[infrahubv1alpha1.MaxArtifactsAnnotation]); err == nil && v > 0 && v < l.MaxArtifacts {
		l.MaxArtifacts = v
	}
	if v, err := strconv.ParseInt(s.Annotations[infrahubv1alpha1.MaxSyncBytesAnnotation], 10, 64); err == nil && v > 0 && v < l.MaxSyncBytes {
		l.MaxSyncBytes = v
	}
	return l
}

// TooManyArtifacts refuses an answer naming more distinct artifacts than the limit: nothing is
// delivered or deleted.
func TooManyArtifacts(ids int, l Limits) error {
	if ids <= l.MaxArtifacts {
		return nil
	}
	return lifecycle.Reasonf(infrahubv1alpha1.ReasonTooManyArtifacts,
		"the query names %d artifacts, more than the %d one sync may keep (--delivery-max-artifacts-per-sync, annotation %s); nothing was delivered or deleted",
		ids, l.MaxArtifacts, infrahubv1alpha1.MaxArtifactsAnnotation)
}

// ByteBudget is what is left of a sync's manifest bytes in one pass, shared by its downloads.
type ByteBudget struct {
	left  atomic.Int64
	limit int64
}

func NewByteBudget(limit int64) *ByteBudget {
	b := &ByteBudget{limit: limit}
	b.left.Store(limit)
	return b
}

// Take charges n bytes of artifact id; past the limit the artifact is refused.
func (b *ByteBudget) Take(id string, n int) error {
	if b == nil || b.left.Add(-int64(n)) >= 0 {
		return nil
	}
	return lifecycle.Reasonf(infrahubv1alpha1.ReasonSyncTooLarge,
		"artifact %s (%d bytes) would take the sync's manifests past %d bytes (--delivery-max-sync-bytes, annotation %s); not delivered",
		id, n, b.limit, infrahubv1alpha1.MaxSyncBytesAnnotation)
}

// WriteSlots are the VidraResource writes one sync pass may still make: what its apply window
// leaves. The VidraResource workers are shared by every sync and take their work in order, so a
// sync delivering a thousand artifacts at once would put a thousand passes ahead of every other
// tenant's; within its window it keeps at most that many queued, and goes on as they apply.
type WriteSlots struct{ left atomic.Int64 }

func NewWriteSlots(n int) *WriteSlots {
	w := &WriteSlots{}
	w.left.Store(int64(n))
	return w
}

// Take reports whether one more write fits.
func (w *WriteSlots) Take() bool {
	return w == nil || w.left.Add(-1) >= 0
}

// Unsettled counts the VidraResources written and not yet applied by their controller.
func Unsettled(owned map[string]*infrahubv1alpha1.VidraResource) int {
	n := 0
	for _, vr := range owned {
		if vr.DeletionTimestamp.IsZero() && vr.Status.ObservedGeneration < vr.Generation {
			n++
		}
	}
	return n
}

// DeadlineError says a pass stopped at its deadline: what was delivered stays, the next pass
// goes on from there (unchanged artifacts are not downloaded again).
func DeadlineError(ctx context.Context, l Limits, delivered, total int) error {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil
	}
	return lifecycle.WithReason(infrahubv1alpha1.ReasonPassDeadline, fmt.Errorf(
		"the pass stopped after %s (--delivery-sync-pass-timeout) with %d of %d artifacts delivered; the next pass goes on", l.PassTimeout, delivered, total))
}

// DefaultMaxObjectsPerWriter is --delivery-max-objects-per-writer's default: far more syncs and
// hand-made VidraResources than one team writes, far fewer than would crowd out the others.
const DefaultMaxObjectsPerWriter = 500

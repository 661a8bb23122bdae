package shard

import (
	"context"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// One shard Lease: reading who holds it and until when, taking it, renewing it, giving it up;
// and the member Lease.

const shardAnnotation = "metalhub.io/shard"

func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func (s *Set) duration(l *coordinationv1.Lease) time.Duration {
	if l != nil && l.Spec.LeaseDurationSeconds != nil {
		return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return s.o.LeaseDuration
}

// observe notes when l last changed and reports whether it has expired.
func (s *Set) observe(l *coordinationv1.Lease, now time.Time) bool {
	s.mu.Lock()
	o, ok := s.observed[l.Name]
	if !ok || o.rv != l.ResourceVersion {
		o = observation{rv: l.ResourceVersion, seen: now}
		s.observed[l.Name] = o
	}
	s.mu.Unlock()
	return !now.Before(o.seen.Add(s.duration(l)))
}

func (s *Set) expired(l *coordinationv1.Lease, now time.Time) bool {
	s.mu.Lock()
	o, ok := s.observed[l.Name]
	s.mu.Unlock()
	return ok && !now.Before(o.seen.Add(s.duration(l)))
}

func (s *Set) forget(seen map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.observed {
		if !seen[name] {
			delete(s.observed, name)
		}
	}
}

func (s *Set) holds(i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[i] != nil
}

// drop forgets shard i at once (another replica holds it; no request of ours may start).
func (s *Set) drop(i int) {
	s.mu.Lock()
	h := s.held[i]
	delete(s.held, i)
	s.mu.Unlock()
	if h != nil {
		h.mu.Lock()
		h.gone = true
		h.expire()
		h.mu.Unlock()
		s.o.Logger.Info("shard no longer held", "shard", i)
	}
}

// expire forgets the shards whose certainty ran out (the API server cannot be reached).
func (s *Set) expire() {
	now := s.o.Now()
	for _, i := range s.Held() {
		s.mu.Lock()
		h := s.held[i]
		s.mu.Unlock()
		h.mu.Lock()
		over := !now.Before(h.validity)
		h.mu.Unlock()
		if over {
			s.drop(i)
		}
	}
}

func (s *Set) lease(i int) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: s.o.Namespace, Name: fmt.Sprintf("%s-%d", s.o.Name, i),
		Labels:      map[string]string{SetLabel: s.o.Name, RoleLabel: RoleShard},
		Annotations: map[string]string{shardAnnotation: strconv.Itoa(i)}}}
}

// renew moves shard i's renewTime; the certainty is counted from before the request went out.
func (s *Set) renew(ctx context.Context, i int, l *coordinationv1.Lease) error {
	start := s.o.Now()
	if l == nil {
		s.expire()
		return fmt.Errorf("shard %d: its lease is gone", i)
	}
	// Updated in place (no copy): a release later in this round must send the renewed resourceVersion.
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(start))
	if err := s.o.Client.Update(ctx, l); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Changed since the list: the next round reads who holds it now.
			s.expire()
			return nil
		}
		s.expire()
		return fmt.Errorf("renewing shard %d: %w", i, err)
	}
	s.extend(i, start)
	return nil
}

func (s *Set) extend(i int, start time.Time) {
	s.mu.Lock()
	h := s.held[i]
	s.mu.Unlock()
	if h == nil {
		return
	}
	h.mu.Lock()
	if v := start.Add(s.o.RenewDeadline); v.After(h.validity) {
		h.validity = v
	}
	if !h.gone {
		select {
		case <-h.expired:
			// The end passed before this renewal came back (a slow API server): the requests in
			// flight were cut. The renewal makes the shard certain again; requests after it get a
			// channel of their own, or each would be cut as it starts until the shard moved.
			h.expired = make(chan struct{})
		default:
		}
		h.setEnd(start.Add(s.o.LeaseDuration-HandoverMargin(s.o.RetryPeriod)), s.o.Now)
	}
	h.mu.Unlock()
}

// acquire takes shard i: free (no holder), expired, or not created yet.
func (s *Set) acquire(ctx context.Context, i int, l *coordinationv1.Lease) error {
	start := s.o.Now()
	now := metav1.NewMicroTime(start)
	var err error
	replaced := ""
	if l != nil {
		replaced = l.ResourceVersion
	}
	if l == nil {
		l = s.lease(i)
		l.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To(s.o.Identity), LeaseDurationSeconds: ptr.To(int32(s.o.LeaseDuration / time.Second)),
			AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To(int32(0))}
		err = s.o.Client.Create(ctx, l)
	} else {
		l = l.DeepCopy()
		l.Spec.HolderIdentity = ptr.To(s.o.Identity)
		l.Spec.LeaseDurationSeconds = ptr.To(int32(s.o.LeaseDuration / time.Second))
		l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		err = s.o.Client.Update(ctx, l)
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return nil // another replica was faster
	}
	if err != nil {
		return fmt.Errorf("taking shard %d: %w", i, err)
	}
	s.mu.Lock()
	h := &holding{validity: start.Add(s.o.RenewDeadline), replaced: replaced, expired: make(chan struct{})}
	h.mu.Lock()
	h.setEnd(start.Add(s.o.LeaseDuration-HandoverMargin(s.o.RetryPeriod)), s.o.Now)
	h.mu.Unlock()
	s.held[i] = h
	gates := append([]acquirer(nil), s.gates...)
	s.mu.Unlock()
	s.o.Logger.Info("shard taken", "shard", i, "identity", s.o.Identity)
	for _, g := range gates {
		g.acquired(i)
	}
	return nil
}

// tryRelease gives shard i up if it is marked for release and no request under it is in
// flight: the Lease without a holder, which the next replica short of its share takes at once.
func (s *Set) tryRelease(ctx context.Context, i int, l *coordinationv1.Lease) {
	h := s.holding(i)
	if h == nil {
		return
	}
	h.mu.Lock()
	releasing := h.releasing
	h.mu.Unlock()
	// Marked, no request starts under it; taken for writing, none is in flight.
	if !releasing || !h.inflight.TryLock() {
		return
	}
	defer h.inflight.Unlock()
	s.release(ctx, i, l)
}

// release drops shard i and writes its Lease without a holder. No request may be in flight
// under it.
func (s *Set) release(ctx context.Context, i int, l *coordinationv1.Lease) {
	s.drop(i)
	if l == nil || holderOf(l) != s.o.Identity {
		return
	}
	l = l.DeepCopy()
	for try := 0; ; try++ {
		l.Spec.HolderIdentity = nil
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(s.o.Now()))
		err := s.o.Client.Update(ctx, l)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || try > 0 {
			s.o.Logger.Info("releasing shard", "shard", i, "error", err.Error())
			return
		}
		// Our view was behind (a cache): read the Lease itself; still ours, give it up.
		if err := s.o.Client.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil || holderOf(l) != s.o.Identity {
			return
		}
	}
}

// renewMember keeps this replica's member Lease current, creating it when missing.
func (s *Set) renewMember(ctx context.Context, l *coordinationv1.Lease, start time.Time) error {
	now := metav1.NewMicroTime(start)
	if l == nil {
		return s.o.Client.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.o.Namespace, Name: s.memberID, Labels: map[string]string{SetLabel: s.o.Name, RoleLabel: RoleMember}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(s.o.Identity), LeaseDurationSeconds: ptr.To(int32(s.o.LeaseDuration / time.Second)),
				AcquireTime: &now, RenewTime: &now},
		})
	}
	l = l.DeepCopy()
	l.Spec.RenewTime = &now
	return s.o.Client.Update(ctx, l)
}

// leave gives up every shard and deletes the member Lease, on a clean stop. A shard with a
// request still in flight is only dropped: its Lease expires by itself, after that request has
// most likely ended, instead of being handed over while it runs.
func (s *Set) leave() {
	for _, i := range s.Held() {
		s.setReleasing(i, true)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.o.RenewDeadline)
	defer cancel()
	var list coordinationv1.LeaseList
	if err := s.o.Client.List(ctx, &list, client.InNamespace(s.o.Namespace), client.MatchingLabels{SetLabel: s.o.Name}); err == nil {
		for k := range list.Items {
			l := &list.Items[k]
			switch {
			case l.Name == s.memberID:
				_ = s.o.Client.Delete(ctx, l)
			case l.Labels[RoleLabel] == RoleShard:
				if i, err := strconv.Atoi(l.Annotations[shardAnnotation]); err == nil {
					s.tryRelease(ctx, i, l)
				}
			}
		}
	}
	for _, i := range s.Held() {
		s.drop(i)
	}
}

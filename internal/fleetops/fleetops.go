// Package fleetops holds the writes a person makes to drive a server by hand — cordon, park,
// power operations — so that `metalhub` CLI commands and the dashboard's buttons write exactly
// the same thing, with the caller's own credentials (and so RBAC).
//
// Power operations go through the operation annotation with a requester token: the operator
// issues them exactly once and answers in the operation-result annotation under that token.
// A request while another operation on the same server is pending is refused (ErrPending),
// decided against the server as stored, with an optimistic lock, so two people asking at once
// cannot both win.
//
// It only writes what a person asks for: it must not talk to a BMC nor act with the operator's
// own identity; the operator acts on these writes.
package fleetops

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// PowerOps maps the power verbs people type to the operator's operations.
var PowerOps = map[string]string{
	"on":           metalv1alpha1.OperationForceOnServer,
	"off":          metalv1alpha1.OperationForceOffServer,
	"restart":      metalv1alpha1.OperationGracefulRestartServer,
	"hard-restart": metalv1alpha1.OperationHardRestartServer,
	"cycle":        metalv1alpha1.OperationPowerCycleServer,
}

// PowerVerbs are PowerOps' keys, sorted.
func PowerVerbs() []string {
	v := slices.Sorted(maps.Keys(PowerOps))
	return v
}

// ErrPending: another operation on the server has not finished.
var ErrPending = errors.New("another operation is pending")

// PendingError says which operation holds the server.
type PendingError struct {
	Server, Operation string
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("server %s: operation %s is still pending; wait for it to finish (kubectl describe server %s shows its events)", e.Server, e.Operation, e.Server)
}

func (e *PendingError) Unwrap() error { return ErrPending }

// State is a server's lifecycle state as people should see it: the operator's own record (the
// annotation, which survives a wiped status), else the reported status, else Initial.
func State(s *metalv1alpha1.Server) string {
	if v := s.Annotations[lifecycle.StateAnnotation]; v != "" {
		return v
	}
	if s.Status.State != "" {
		return string(s.Status.State)
	}
	return string(metalv1alpha1.ServerStateInitial)
}

// Pending returns the operation still pending on s: asked for and not yet taken up, or taken up
// and not yet reported. "" when none is.
func Pending(s *metalv1alpha1.Server) string {
	if op := s.Annotations[metalv1alpha1.OperationAnnotation]; op != "" {
		return op
	}
	if intent := s.Annotations[intent.Annotation]; intent != "" {
		op, _, _ := strings.Cut(intent, "/")
		return op
	}
	return ""
}

// conflictRetries bounds the re-reads after a write lost to another writer.
const conflictRetries = 5

// update reads the server, lets mutate change it and writes it with an optimistic lock, reading
// again after a conflict. mutate returning false writes nothing.
func update(ctx context.Context, c client.Client, name string, mutate func(s *metalv1alpha1.Server) (bool, error)) (*metalv1alpha1.Server, error) {
	for attempt := 0; ; attempt++ {
		s := &metalv1alpha1.Server{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
			return nil, fmt.Errorf("reading server %s: %w", name, err)
		}
		before := s.DeepCopy()
		change, err := mutate(s)
		if err != nil || !change {
			return s, err
		}
		err = c.Patch(ctx, s, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		if err == nil {
			return s, nil
		}
		if !apierrors.IsConflict(err) || attempt >= conflictRetries {
			return nil, fmt.Errorf("writing server %s: %w", name, err)
		}
	}
}

// SetUnclaimable cordons (true) or uncordons (false) a server: claims never bind a cordoned one.
// It reports whether anything changed.
func SetUnclaimable(ctx context.Context, c client.Client, name string, on bool) (bool, error) {
	changed := false
	_, err := update(ctx, c, name, func(s *metalv1alpha1.Server) (bool, error) {
		changed = s.Spec.Unclaimable != on
		s.Spec.Unclaimable = on
		return changed, nil
	})
	return changed, err
}

// Park asks the operator to park (true) or unpark (false) a server. Parking a parked server, or
// unparking one that is not, changes nothing and reports false.
func Park(ctx context.Context, c client.Client, name string, park bool) (bool, error) {
	op := metalv1alpha1.OperationUnpark
	if park {
		op = metalv1alpha1.OperationPark
	}
	changed := false
	_, err := update(ctx, c, name, func(s *metalv1alpha1.Server) (bool, error) {
		parked := s.Annotations[lifecycle.StateAnnotation] == string(metalv1alpha1.ServerStateParked)
		if parked == park {
			return false, nil
		}
		if p := Pending(s); p != "" && p != op {
			return false, &PendingError{Server: name, Operation: p}
		}
		changed = s.Annotations[metalv1alpha1.OperationAnnotation] != op
		lifecycle.SetAnnotation(s, metalv1alpha1.OperationAnnotation, op)
		return changed, nil
	})
	return changed, err
}

// Request asks the operator for an operation that needs no request token (rediscover,
// accept-inventory) on a server. It is refused with a *PendingError while another operation is
// pending; asking again for the pending one changes nothing and reports false.
func Request(ctx context.Context, c client.Client, name, op string) (bool, error) {
	changed := false
	_, err := update(ctx, c, name, func(s *metalv1alpha1.Server) (bool, error) {
		if p := Pending(s); p != "" && p != op {
			return false, &PendingError{Server: name, Operation: p}
		}
		changed = s.Annotations[metalv1alpha1.OperationAnnotation] != op
		lifecycle.SetAnnotation(s, metalv1alpha1.OperationAnnotation, op)
		return changed, nil
	})
	return changed, err
}

// RequestPower asks for one of PowerOps' verbs on a server and returns the token its outcome
// will be reported under (Outcome). It is refused with a *PendingError while another operation
// on the server is pending.
func RequestPower(ctx context.Context, c client.Client, name, verb string) (string, error) {
	op, ok := PowerOps[verb]
	if !ok {
		return "", fmt.Errorf("unknown power operation %q: one of %s", verb, strings.Join(PowerVerbs(), ", "))
	}
	token, err := newToken()
	if err != nil {
		return "", err
	}
	_, err = update(ctx, c, name, func(s *metalv1alpha1.Server) (bool, error) {
		if p := Pending(s); p != "" {
			return false, &PendingError{Server: name, Operation: p}
		}
		lifecycle.SetAnnotation(s, metalv1alpha1.OperationAnnotation, op)
		lifecycle.SetAnnotation(s, intent.RequesterAnnotation, token)
		return true, nil
	})
	if err != nil {
		return "", err
	}
	return token, nil
}

// newToken names one request: "cli-" and random hex, no spaces (the operator drops tokens that
// have any).
func newToken() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making a request token: %w", err)
	}
	return "cli-" + hex.EncodeToString(b), nil
}

// Outcome returns how the operation requested under token ended (intent.ResultDone,
// ResultRefused or ResultUncertain), and false while it has not.
func Outcome(s *metalv1alpha1.Server, token string) (string, bool) {
	for _, r := range strings.Split(s.Annotations[intent.ResultAnnotation], ",") {
		tok, outcome, ok := strings.Cut(strings.TrimSpace(r), " ")
		if ok && tok == token {
			return outcome, true
		}
	}
	return "", false
}

// WaitOutcome watches the server until the operation requested under token has ended, ctx ends,
// or the server is deleted.
func WaitOutcome(ctx context.Context, c client.WithWatch, name, token string) (string, error) {
	for {
		list := &metalv1alpha1.ServerList{}
		sel := client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)}
		if err := c.List(ctx, list, sel); err != nil {
			return "", fmt.Errorf("reading server %s: %w", name, err)
		}
		if len(list.Items) == 0 {
			return "", fmt.Errorf("server %s was deleted", name)
		}
		if out, ok := Outcome(&list.Items[0], token); ok {
			return out, nil
		}
		// From the list's version on, so no change between the read and the watch is missed.
		w, err := c.Watch(ctx, &metalv1alpha1.ServerList{}, sel, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			return "", fmt.Errorf("watching server %s: %w", name, err)
		}
		out, done, err := waitOn(ctx, w, token)
		w.Stop()
		if done || err != nil {
			return out, err
		}
		// The watch ended (a timeout on the server side): read and watch again.
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitOn reads w until the outcome under token shows; done is false when the watch ended first.
func waitOn(ctx context.Context, w watch.Interface, token string) (string, bool, error) {
	for {
		select {
		case <-ctx.Done():
			return "", true, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return "", false, nil
			}
			switch ev.Type {
			case watch.Deleted:
				return "", true, errors.New("the server was deleted")
			case watch.Error:
				return "", false, nil
			}
			if s, ok := ev.Object.(*metalv1alpha1.Server); ok {
				if out, ok := Outcome(s, token); ok {
					return out, true, nil
				}
			}
		}
	}
}

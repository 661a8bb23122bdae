package server

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// bootOrderStep applies spec.bootOrder: its entries, by priority, first in the system's
// Boot.BootOrder, the system's other entries after them in their order. Like the LED it is
// observed every pass (status.bootOrder) and needs no record: an order found as asked sends
// nothing. An entry is matched by its device (a BootOptionReference) or else by its name (a
// boot option's DisplayName); one that matches nothing is a Warning, and the rest is applied.
func (r *Reconciler) bootOrderStep(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	entries := p.Obj.Spec.BootOrder
	if len(entries) == 0 || p.sys == nil || len(p.sys.BootOrder) == 0 || !p.Obj.DeletionTimestamp.IsZero() ||
		p.state == metalv1alpha1.ServerStateParked || p.settingsOnly != "" {
		// A settings-only server boots as its owner says.
		return lifecycle.Continue(), nil
	}
	options, err := p.conn.BootEntries(p.bctx, p.sysID)
	if err != nil {
		return lifecycle.Result{}, fmt.Errorf("reading boot options: %w", err)
	}
	want, missing := desiredBootOrder(entries, options, p.sys.BootOrder)
	if slices.Equal(want, p.sys.BootOrder) {
		return lifecycle.Continue(), nil
	}
	key := strings.Join(want, ",")
	if last, ok := r.bootOrderSetAt.Load(p.Obj.UID); ok && last.(ledWrite).led == key && r.Now().Sub(last.(ledWrite).at) < r.Options.ServerResync {
		return lifecycle.Continue(), nil
	}
	r.bootOrderSetAt.Store(p.Obj.UID, ledWrite{led: key, at: r.Now()})
	if len(missing) > 0 {
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, "BootOrderEntryNotFound", "SetBootOrder", "no boot option matches %s; the other entries are applied", strings.Join(missing, ", "))
	}
	if err := p.conn.SetBootOrder(p.bctx, p.sysID, want); err != nil {
		if bmc.ReasonOf(err) == bmc.ReasonUnsupported {
			r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, "BootOrderUnsupported", "SetBootOrder", "%v", err)
			return lifecycle.Continue(), nil
		}
		return lifecycle.Result{}, fmt.Errorf("setting the boot order: %w", err)
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "BootOrder", "SetBootOrder", "boot order set to %s (was %s)", key, strings.Join(p.sys.BootOrder, ","))
	p.lookAgain = r.Options.PowerPoll
	return lifecycle.Continue(), nil
}

// desiredBootOrder is the full order spec entries ask for on a system with options and order
// current, and the entries that match no option.
func desiredBootOrder(entries []metalv1alpha1.BootOrder, options []bmc.BootEntry, current []string) ([]string, []string) {
	sorted := slices.Clone(entries)
	slices.SortStableFunc(sorted, func(a, b metalv1alpha1.BootOrder) int { return cmp.Compare(a.Priority, b.Priority) })
	var head, missing []string
	for _, e := range sorted {
		ref := ""
		for _, o := range options {
			if o.Ref == e.Device && e.Device != "" {
				ref = o.Ref
				break
			}
		}
		if ref == "" {
			for _, o := range options {
				if e.Name != "" && strings.EqualFold(o.Name, e.Name) {
					ref = o.Ref
					break
				}
			}
		}
		switch {
		case ref == "" || !slices.Contains(current, ref):
			missing = append(missing, cmp.Or(e.Device, e.Name))
		case !slices.Contains(head, ref):
			head = append(head, ref)
		}
	}
	out := slices.Clone(head)
	for _, ref := range current {
		if !slices.Contains(out, ref) {
			out = append(out, ref)
		}
	}
	return out, missing
}

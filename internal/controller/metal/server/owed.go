package server

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
)

// owedPolicy is what a deleted server's machine is owed: its mark of a release not cleaned yet,
// or, claimed or Reserved without one (reserved before metalhub cleaned), its release policy.
func (r *Reconciler) owedPolicy(p *serverPass) metalv1alpha1.CleaningPolicy {
	s := p.Obj
	if mark := metalv1alpha1.CleaningPolicy(s.Annotations[serverstate.CleaningAnnotation]); mark != "" {
		if !cleaning.Valid(mark) {
			return metalv1alpha1.CleaningPolicyAllDisks
		}
		return mark
	}
	if s.Spec.ServerClaimRef != nil || p.state == metalv1alpha1.ServerStateReserved {
		return r.releasePolicy(s)
	}
	return metalv1alpha1.CleaningPolicyNone
}

// oweCleaning records, before a deleted server's finalizer goes, the cleaning its machine is
// still owed (cleaning.Owed), so the Server its BMC makes anew is cleaned before any claim binds
// it. An existing record is only widened. Idempotent: a crash before the finalizer's removal
// writes it again.
func (r *Reconciler) oweCleaning(ctx context.Context, p *serverPass) error {
	policy := r.owedPolicy(p)
	if policy == metalv1alpha1.CleaningPolicyNone {
		return nil
	}
	uuid := cleaning.NormalizeUUID(p.Obj.Spec.SystemUUID)
	if uuid == "" {
		// Never discovered, so never Available, so never claimed by what it holds.
		return nil
	}
	want := cleaning.OwedConfigMap(r.Options.DiscoveryNamespace, cleaning.Owed{SystemUUID: uuid, Policy: policy, Server: p.Obj.Name, Since: r.Now()})
	cur := &corev1.ConfigMap{}
	err := r.reader().Get(ctx, client.ObjectKeyFromObject(want), cur)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, want); err != nil {
			// AlreadyExists too: another Server of the machine wrote it meanwhile; the retry widens it.
			return fmt.Errorf("recording the cleaning owed to machine %s: %w", uuid, err)
		}
	case err != nil:
		return fmt.Errorf("reading the cleaning owed to machine %s: %w", uuid, err)
	default:
		o := cleaning.DecodeOwed(cur)
		if wider := cleaning.Wider(o.Policy, policy); wider != o.Policy || cur.Labels[cleaning.OwedLabel] != uuid {
			o.Policy, o.SystemUUID = wider, uuid
			upd := cleaning.OwedConfigMap(r.Options.DiscoveryNamespace, o)
			upd.ResourceVersion = cur.ResourceVersion
			if err := r.Client.Update(ctx, upd); err != nil {
				return fmt.Errorf("widening the cleaning owed to machine %s: %w", uuid, err)
			}
		}
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, metalv1alpha1.ReasonCleaningOwed, "Delete",
		"deleted before its release was cleaned: cleaning %s is owed to machine %s and done before a Server of it is Available again", policy, uuid)
	return nil
}

// owedCleaning reads the cleaning owed to the machine of s, if any. It reads past the cache: a
// record written by the replica that let the last Server go must not be missed.
func (r *Reconciler) owedCleaning(ctx context.Context, s *metalv1alpha1.Server) (*cleaning.Owed, error) {
	uuid := cleaning.NormalizeUUID(s.Spec.SystemUUID)
	if uuid == "" {
		return nil, nil
	}
	cm := &corev1.ConfigMap{}
	err := r.reader().Get(ctx, client.ObjectKey{Namespace: r.Options.DiscoveryNamespace, Name: cleaning.OwedName(uuid)}, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the cleaning owed to machine %s: %w", uuid, err)
	}
	o := cleaning.DecodeOwed(cm)
	return &o, nil
}

// settleOwed removes the owed record a cleaning of a server it sent to Cleaning settled, before
// the write that removes the server's mark: a crash between leaves the mark and the cleaning is
// judged again; a record is never left behind a finished cleaning to clean the machine again.
func (r *Reconciler) settleOwed(ctx context.Context, s *metalv1alpha1.Server) error {
	if s.Annotations[serverstate.CleaningOwedAnnotation] == "" {
		return nil
	}
	uuid := cleaning.NormalizeUUID(s.Spec.SystemUUID)
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = r.Options.DiscoveryNamespace, cleaning.OwedName(uuid)
	if err := r.Client.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the cleaning owed to machine %s: %w", uuid, err)
	}
	return nil
}

package claim

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

type bindRecord struct {
	claim    types.UID
	server   string
	replaced string
	at       time.Time
}

// bindInFlight reports whether the claim's last binding is not in the cache yet.
func (r *Reconciler) bindInFlight(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerClaim]) bool {
	r.mu.Lock()
	b, ok := r.binds[p.Obj.UID]
	r.mu.Unlock()
	if !ok {
		return false
	}
	s := &metalv1alpha1.Server{}
	err := p.Client().Get(ctx, client.ObjectKey{Name: b.server}, s)
	if err == nil && s.ResourceVersion == b.replaced && time.Since(b.at) < bindTTL {
		return true
	}
	r.mu.Lock()
	delete(r.binds, p.Obj.UID)
	if cur, ok := r.binding[b.server]; ok && cur.claim == p.Obj.UID {
		delete(r.binding, b.server)
	}
	r.mu.Unlock()
	return false
}

// lock marks a server as being bound by claim, false if another claim is binding it: an
// in-memory lock, not the Server's Reserved state.
func (r *Reconciler) lock(server string, claim types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.binding[server]; ok && cur.claim != claim && time.Since(cur.at) < bindTTL {
		return false
	}
	r.binding[server] = bindRecord{claim: claim, server: server, at: time.Now()}
	return true
}

func (r *Reconciler) lockedByOther(server string, claim types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.binding[server]
	return ok && cur.claim != claim && time.Since(cur.at) < bindTTL
}

func (r *Reconciler) unlock(server string, claim types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.binding[server]; ok && cur.claim == claim {
		delete(r.binding, server)
	}
}

func (r *Reconciler) recordBind(claim types.UID, server, replaced string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := bindRecord{claim: claim, server: server, replaced: replaced, at: time.Now()}
	r.binds[claim] = rec
	r.binding[server] = rec
}

func (r *Reconciler) unwake(c *metalv1alpha1.ServerClaim) {
	r.mu.Lock()
	delete(r.woken, client.ObjectKeyFromObject(c))
	r.mu.Unlock()
}

// madeRecord is a boot configuration made (or found) for a claim: with which spec, and when.
type madeRecord struct {
	spec metalv1alpha1.ServerBootConfigurationSpec
	at   time.Time
}

// noteMade records that claim c's boot configuration exists with spec.
func (r *Reconciler) noteMade(c *metalv1alpha1.ServerClaim, spec metalv1alpha1.ServerBootConfigurationSpec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if len(r.made) >= 1024 {
		// Claims whose next pass never came (deleted meanwhile): drop what has expired.
		for uid, m := range r.made {
			if now.Sub(m.at) >= bindTTL {
				delete(r.made, uid)
			}
		}
	}
	r.made[c.UID] = madeRecord{spec: spec, at: now}
}

// madeUnseen reports whether claim c's boot configuration was made by this replica with spec
// moments ago and the cache has not shown it yet: it exists, and creating it again would only be
// refused. Once the cache shows it (or the record is old, or the claim wants another spec), the
// record goes and the configuration is checked as usual; its watch event brings that pass.
func (r *Reconciler) madeUnseen(ctx context.Context, cl client.Reader, c *metalv1alpha1.ServerClaim, spec metalv1alpha1.ServerBootConfigurationSpec) bool {
	r.mu.Lock()
	m, ok := r.made[c.UID]
	r.mu.Unlock()
	if !ok {
		return false
	}
	if time.Since(m.at) < bindTTL && equality.Semantic.DeepEqual(m.spec, spec) &&
		apierrors.IsNotFound(cl.Get(ctx, client.ObjectKeyFromObject(c), &metalv1alpha1.ServerBootConfiguration{})) {
		return true
	}
	r.mu.Lock()
	delete(r.made, c.UID)
	r.mu.Unlock()
	return false
}

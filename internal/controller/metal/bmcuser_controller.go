package metal

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/shard"
)

// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=bmcusers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=bmcusers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=bmcsecrets,verbs=create

const (
	// BMCUserFinalizer lets a deleted BMCUser remove its account from the BMC first.
	BMCUserFinalizer = "metal.metalhub.io/bmcuser"
	// AccountAppliedAnnotation records, on a BMCUser, what was last set on the BMC: the BMC's
	// UID, the password Secret's UID and resourceVersion, the role, and when. Passwords cannot
	// be read back from a BMC: this record is how a pass knows the account is as asked without
	// sending the password again, and when a rotation is due.
	AccountAppliedAnnotation = "lifecycle.metalhub.io/account-applied"
)

// Reasons of a BMCUser's Ready condition and its events.
const (
	reasonAccountSet      = "AccountSet"
	reasonAccountFailed   = "AccountFailed"
	reasonAccountDeleted  = "AccountDeleted"
	reasonPasswordRotated = "PasswordRotated"
)

// BMCUserReconciler keeps a BMCUser's account on its BMC: there, enabled, with the password of
// its BMCSecret (generated into a new BMCSecret when it names none) and its role; the password
// rotated every rotationPeriod; the account removed when the BMCUser goes. The BMC is reached
// with the BMC object's own credentials; that account is never changed or removed here.
type BMCUserReconciler struct {
	// Shards, set, limits the reconciler to the objects of the shards this replica holds.
	Shards   *shard.Set
	Client   client.Client
	Pool     *bmc.Pool
	Recorder events.EventRecorder
	// RetryAfter is the look after a failure.
	RetryAfter time.Duration
	// RequestTimeout bounds a pass's BMC calls.
	RequestTimeout time.Duration
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

type bmcUserPass = lifecycle.Pass[*metalv1alpha1.BMCUser]

func (r *BMCUserReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// SetupWithManager registers the reconciler; a BMCSecret's change brings the BMCUsers that
// name it.
func (r *BMCUserReconciler) SetupWithManager(mgr ctrl.Manager) error {
	rec := lifecycle.NewReconciler(r.Client, func() *metalv1alpha1.BMCUser { return &metalv1alpha1.BMCUser{} }, r.handle)
	b := ctrl.NewControllerManagedBy(mgr).
		Named("bmcuser").
		For(&metalv1alpha1.BMCUser{}, builder.WithPredicates(lifecycle.Predicate())).
		Watches(&metalv1alpha1.BMCSecret{}, handler.EnqueueRequestsFromMapFunc(r.usersOfSecret)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1})
	return shard.Gate(r.Shards, mgr.GetCache(), b, rec, func() client.ObjectList { return &metalv1alpha1.BMCUserList{} }, bmcUserShardKey).Complete(rec)
}

func (r *BMCUserReconciler) usersOfSecret(ctx context.Context, o client.Object) []reconcile.Request {
	var list metalv1alpha1.BMCUserList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, u := range list.Items {
		if secretOf(&u) == o.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Name: u.Name}})
		}
	}
	return reqs
}

// secretOf is the BMCSecret with the account's password: the one named, else the one metalhub
// generates for it.
func secretOf(u *metalv1alpha1.BMCUser) string {
	if u.Spec.BMCSecretRef != nil && u.Spec.BMCSecretRef.Name != "" {
		return u.Spec.BMCSecretRef.Name
	}
	return "bmcuser-" + u.Name
}

func (r *BMCUserReconciler) handle(ctx context.Context, p *bmcUserPass) (lifecycle.Result, error) {
	return lifecycle.Steps(ctx, p,
		lifecycle.OnDeletion(r.deleteAccount),
		lifecycle.EnsureFinalizer[*bmcUserPass](BMCUserFinalizer),
		r.apply,
	)
}

// target resolves what a pass needs: the BMC's admin connection, the BMC's own login user and
// the account's password Secret (nil when it does not exist).
func (r *BMCUserReconciler) target(ctx context.Context, p *bmcUserPass) (*metalv1alpha1.BMC, bmc.BMC, string, *metalv1alpha1.BMCSecret, error) {
	u := p.Obj
	if u.Spec.BMCRef == nil || u.Spec.BMCRef.Name == "" || u.Spec.UserName == "" {
		return nil, nil, "", nil, accessErr(metalv1alpha1.ReasonInvalidSpec, "spec.bmcRef and spec.userName are required")
	}
	b := &metalv1alpha1.BMC{}
	if err := p.Client().Get(ctx, client.ObjectKey{Name: u.Spec.BMCRef.Name}, b); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, "", nil, accessErr(metalv1alpha1.ReasonBMCNotFound, "BMC %q not found", u.Spec.BMCRef.Name)
		}
		return nil, nil, "", nil, err
	}
	ep, err := bmcEndpoint(ctx, p.Client(), b)
	if err != nil {
		return nil, nil, "", nil, err
	}
	conn, err := r.Pool.Get(ep)
	if err != nil {
		return nil, nil, "", nil, err
	}
	sec := &metalv1alpha1.BMCSecret{}
	if err := p.Client().Get(ctx, client.ObjectKey{Name: secretOf(u)}, sec); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, nil, "", nil, err
		}
		sec = nil
	}
	return b, conn, ep.Username, sec, nil
}

// appliedRecord is what AccountAppliedAnnotation holds.
type appliedRecord struct {
	bmcUID, secretUID, secretVersion, role string
	at                                     time.Time
}

func (a appliedRecord) String() string {
	return strings.Join([]string{a.bmcUID, a.secretUID, a.secretVersion, a.role, a.at.UTC().Format(time.RFC3339)}, "/")
}

func parseApplied(s string) (appliedRecord, bool) {
	f := strings.Split(s, "/")
	if len(f) != 5 {
		return appliedRecord{}, false
	}
	at, err := time.Parse(time.RFC3339, f[4])
	return appliedRecord{bmcUID: f[0], secretUID: f[1], secretVersion: f[2], role: f[3], at: at}, err == nil
}

// apply brings the account to what the BMCUser asks, one write per pass: a generated Secret
// when it names none; a rotation's new password written aside (pendingPassword) before it is
// sent; the account set and the record of it.
func (r *BMCUserReconciler) apply(ctx context.Context, p *bmcUserPass) (lifecycle.Result, error) {
	u := p.Obj
	bctx, cancel := context.WithTimeout(ctx, cmpDuration(r.RequestTimeout, 30*time.Second))
	defer cancel()
	b, conn, adminUser, sec, err := r.target(ctx, p)
	if err != nil {
		return r.failed(p, err)
	}
	if u.Spec.UserName == adminUser {
		return r.failed(p, accessErr(metalv1alpha1.ReasonInvalidSpec, "user %q is the account BMC %s logs in with; rotate it with the rotate-credentials operation", adminUser, b.Name))
	}
	if sec == nil {
		if u.Spec.BMCSecretRef != nil && u.Spec.BMCSecretRef.Name != "" {
			return r.failed(p, accessErr(metalv1alpha1.ReasonSecretNotFound, "BMCSecret %q not found", u.Spec.BMCSecretRef.Name))
		}
		pw, err := newPassword()
		if err != nil {
			return lifecycle.Result{}, err
		}
		gen := &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: secretOf(u)},
			Data: map[string][]byte{metalv1alpha1.BMCSecretUsernameKey: []byte(u.Spec.UserName), metalv1alpha1.BMCSecretPasswordKey: []byte(pw)}}
		if err := controllerutil.SetControllerReference(u, gen, p.Client().Scheme()); err != nil {
			return lifecycle.Result{}, err
		}
		if err := p.Client().Create(ctx, gen); err != nil && !apierrors.IsAlreadyExists(err) {
			return lifecycle.Result{}, fmt.Errorf("creating BMCSecret %s: %w", gen.Name, err)
		}
		return lifecycle.Wrote("password generated"), nil
	}
	password, ok := sec.Value(metalv1alpha1.BMCSecretPasswordKey)
	if !ok || password == "" {
		return r.failed(p, accessErr(metalv1alpha1.ReasonSecretInvalid, "BMCSecret %q has no %q", sec.Name, metalv1alpha1.BMCSecretPasswordKey))
	}
	rec, _ := parseApplied(u.Annotations[AccountAppliedAnnotation])
	pending, rotating := sec.Value(metalv1alpha1.BMCSecretPendingPasswordKey)
	due := u.Spec.RotationPeriod != nil && u.Spec.RotationPeriod.Duration > 0 && !rec.at.IsZero() &&
		!r.now().Before(rec.at.Add(u.Spec.RotationPeriod.Duration))
	switch {
	case rotating:
		// Set it, prove it, commit it: a crash anywhere leaves either password in the Secret
		// that opens the account (the admin connection sets it again, the same password).
		if err := r.prove(ctx, bctx, p, b, conn); err != nil {
			return r.failed(p, err)
		}
		if err := conn.SetAccount(bctx, u.Spec.UserName, pending, u.Spec.RoleID); err != nil {
			return r.failed(p, err)
		}
		sec.SetValue(metalv1alpha1.BMCSecretPasswordKey, pending)
		sec.DeleteValue(metalv1alpha1.BMCSecretPendingPasswordKey)
		if err := p.Client().Update(ctx, sec); err != nil {
			return lifecycle.Result{}, fmt.Errorf("committing the rotated password to BMCSecret %s: %w", sec.Name, err)
		}
		r.Recorder.Eventf(u, b, corev1.EventTypeNormal, reasonPasswordRotated, "Rotate", "password of %s rotated on BMC %s", u.Spec.UserName, b.Name)
		return lifecycle.Wrote("password rotated"), nil
	case due && (sec.Immutable == nil || !*sec.Immutable):
		pw, err := newPassword()
		if err != nil {
			return lifecycle.Result{}, err
		}
		sec.SetValue(metalv1alpha1.BMCSecretPendingPasswordKey, pw)
		if err := p.Client().Update(ctx, sec); err != nil {
			return lifecycle.Result{}, fmt.Errorf("writing the rotated password aside in BMCSecret %s: %w", sec.Name, err)
		}
		return lifecycle.Wrote("rotation password written aside"), nil
	}
	want := appliedRecord{bmcUID: string(b.UID), secretUID: string(sec.UID), secretVersion: sec.ResourceVersion, role: u.Spec.RoleID}
	if rec.bmcUID == want.bmcUID && rec.secretUID == want.secretUID && rec.secretVersion == want.secretVersion && rec.role == want.role {
		accts, err := conn.Accounts(bctx)
		if err != nil {
			return r.failed(p, err)
		}
		if slices.ContainsFunc(accts, func(a bmc.Account) bool { return a.UserName == u.Spec.UserName && a.Enabled }) {
			r.ready(p, metav1.ConditionTrue, reasonAccountSet, fmt.Sprintf("account %s is on BMC %s", u.Spec.UserName, b.Name))
			if u.Spec.RotationPeriod != nil && u.Spec.RotationPeriod.Duration > 0 {
				return lifecycle.RequeueAfter(time.Until(rec.at.Add(u.Spec.RotationPeriod.Duration)), "next rotation"), nil
			}
			return lifecycle.Done(), nil
		}
		// Gone from the BMC (removed by hand, a BMC reset to defaults): set it again.
	}
	if err := r.prove(ctx, bctx, p, b, conn); err != nil {
		return r.failed(p, err)
	}
	if err := conn.SetAccount(bctx, u.Spec.UserName, password, u.Spec.RoleID); err != nil {
		return r.failed(p, err)
	}
	r.Recorder.Eventf(u, b, corev1.EventTypeNormal, reasonAccountSet, "SetAccount", "account %s set on BMC %s", u.Spec.UserName, b.Name)
	want.at = r.now()
	if rec.secretUID == want.secretUID && rec.secretVersion == want.secretVersion && !rec.at.IsZero() {
		want.at = rec.at // same password (a changed role, a re-created account): the rotation period runs on
	}
	return lifecycle.Wrote("account set"), lifecycle.PatchMetadata(ctx, p.Client(), u, func(o client.Object) {
		lifecycle.SetAnnotation(o, AccountAppliedAnnotation, want.String())
	})
}

// prove checks that the BMC at b's address is b before an account is changed on it: an address
// that now reaches another BMC with the same factory credentials would otherwise get the account.
func (r *BMCUserReconciler) prove(ctx, bctx context.Context, p *bmcUserPass, b *metalv1alpha1.BMC, conn bmc.BMC) error {
	systems, err := conn.Systems(bctx)
	if err != nil {
		return err
	}
	return proveBMC(ctx, p.Client(), b, systems)
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func (r *BMCUserReconciler) ready(p *bmcUserPass, status metav1.ConditionStatus, reason, msg string) {
	lifecycle.SetCondition(&p.Obj.Status.Conditions, p.Obj.Generation, metalv1alpha1.ConditionReady, status, reason, msg)
}

// failed reports why the account is not as asked and looks again later.
func (r *BMCUserReconciler) failed(p *bmcUserPass, err error) (lifecycle.Result, error) {
	reason := reasonOf(err)
	if reason == "" || reason == string(bmc.ReasonUnknown) {
		reason = reasonAccountFailed
	}
	r.ready(p, metav1.ConditionFalse, reason, err.Error())
	return lifecycle.RequeueAfter(cmpDuration(r.RetryAfter, 10*time.Second), reason), nil
}

// deleteAccount removes the account from the BMC, then the finalizer. A BMC that is gone takes
// its accounts with it.
func (r *BMCUserReconciler) deleteAccount(ctx context.Context, p *bmcUserPass) (lifecycle.Result, error) {
	u := p.Obj
	if !slices.Contains(u.Finalizers, BMCUserFinalizer) {
		return lifecycle.Done(), nil
	}
	bctx, cancel := context.WithTimeout(ctx, cmpDuration(r.RequestTimeout, 30*time.Second))
	defer cancel()
	b, conn, adminUser, _, err := r.target(ctx, p)
	reason, isAccess := lifecycle.ReasonOf(err)
	switch {
	case isAccess && (reason == metalv1alpha1.ReasonBMCNotFound || reason == metalv1alpha1.ReasonInvalidSpec):
	case err != nil:
		return r.failed(p, err)
	case u.Spec.UserName != adminUser:
		if err := r.prove(ctx, bctx, p, b, conn); err != nil {
			return r.failed(p, err)
		}
		if err := conn.DeleteAccount(bctx, u.Spec.UserName); err != nil {
			return r.failed(p, err)
		}
		r.Recorder.Eventf(u, b, corev1.EventTypeNormal, reasonAccountDeleted, "DeleteAccount", "account %s removed from BMC %s", u.Spec.UserName, b.Name)
	}
	return lifecycle.Wrote("account removed"), lifecycle.PatchMetadata(ctx, p.Client(), u, func(o client.Object) {
		controllerutil.RemoveFinalizer(o, BMCUserFinalizer)
	})
}

// Package bmcuser is the BMCUser controller: an account on a BMC kept as its BMCUser says (there,
// enabled, with its Secret's password and its role, rotated on schedule), every account it made
// recorded before it is made and removed when the BMCUser moves or goes. It reaches the BMC only
// through bmcaccess, after proving the BMC is the one named.
//
// It never changes or removes the account of the BMC object's own credentials. It imports neither
// the assembly (internal/controller/metal) nor another controller (hack/layers.sh).
package bmcuser

import (
	"context"
	"encoding/json"
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
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/controller/metal/shardkey"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/shard"
)

// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=bmcusers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=bmcusers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=bmcsecrets,verbs=create

const (
	// Finalizer lets a deleted BMCUser remove its account from the BMC first.
	Finalizer = "metal.metalhub.io/bmcuser"
	// AccountAppliedAnnotation records, on a BMCUser, what was last set on the BMC: the BMC's
	// UID, the password Secret's UID and resourceVersion, the role, and when. Passwords cannot
	// be read back from a BMC: this record is how a pass knows the account is as asked without
	// sending the password again, and when a rotation is due.
	AccountAppliedAnnotation = "lifecycle.metalhub.io/account-applied"
	// AccountsAnnotation records, on a BMCUser, every account it made or is about to make, as a
	// JSON list of {"bmc": name, "uid": the BMC object's UID, "user": user name}. An entry is
	// written before its account is created and dropped only once the account is removed (or
	// its BMC object is gone): a renamed or moved BMCUser removes its earlier account first, and
	// a deleted one removes them all, whatever its spec says by then.
	AccountsAnnotation = "lifecycle.metalhub.io/accounts"
)

// Reconciler keeps a BMCUser's account on its BMC: there, enabled, with the password of
// its BMCSecret (generated into a new BMCSecret when it names none) and its role; the password
// rotated every rotationPeriod; the account removed when the BMCUser goes. The BMC is reached
// with the BMC object's own credentials; that account is never changed or removed here.
type Reconciler struct {
	// Shards, set, limits the reconciler to the objects of the shards this replica holds.
	Shards   *shard.Set
	Client   client.Client
	Pool     *bmc.Pool
	Recorder events.EventRecorder
	// RetryAfter is the look after a failure.
	RetryAfter time.Duration
	// RequestTimeout bounds one Redfish request; PassTimeout a pass's requests together, the
	// waits for the BMC's request slots included (a pass makes several in turn, and a chassis
	// manager's systems share its slots). The larger bounds the pass; 30s when neither is set.
	RequestTimeout time.Duration
	PassTimeout    time.Duration
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

type bmcUserPass = lifecycle.Pass[*metalv1alpha1.BMCUser]

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// SetupWithManager registers the reconciler; a BMCSecret's change brings the BMCUsers that
// name it.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	rec := lifecycle.NewReconciler(r.Client, func() *metalv1alpha1.BMCUser { return &metalv1alpha1.BMCUser{} }, r.handle)
	b := ctrl.NewControllerManagedBy(mgr).
		Named("bmcuser").
		For(&metalv1alpha1.BMCUser{}, builder.WithPredicates(lifecycle.Predicate())).
		Watches(&metalv1alpha1.BMCSecret{}, handler.EnqueueRequestsFromMapFunc(r.usersOfSecret)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1})
	return shard.Gate(r.Shards, mgr.GetCache(), b, rec, func() client.ObjectList { return &metalv1alpha1.BMCUserList{} }, shardkey.ForBMCUser).Complete(rec)
}

func (r *Reconciler) usersOfSecret(ctx context.Context, o client.Object) []reconcile.Request {
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

func (r *Reconciler) handle(ctx context.Context, p *bmcUserPass) (lifecycle.Result, error) {
	return lifecycle.Steps(ctx, p,
		lifecycle.OnDeletion(r.deleteAccount),
		lifecycle.EnsureFinalizer[*bmcUserPass](Finalizer),
		r.adoptAccounts,
		r.removeEarlier,
		r.apply,
	)
}

// madeAccount is one entry of AccountsAnnotation.
type madeAccount struct {
	BMC  string `json:"bmc"`
	UID  string `json:"uid"`
	User string `json:"user"`
}

// madeAccounts reads AccountsAnnotation; recorded is false when there is none (or it does not
// parse). A BMCUser from before the record that did set an account (AccountAppliedAnnotation)
// made the one its spec names: that is the best that can be known of it.
func madeAccounts(u *metalv1alpha1.BMCUser) (made []madeAccount, recorded bool) {
	if v, ok := u.Annotations[AccountsAnnotation]; ok && json.Unmarshal([]byte(v), &made) == nil {
		return made, true
	}
	if rec, ok := parseApplied(u.Annotations[AccountAppliedAnnotation]); ok && u.Spec.BMCRef != nil && u.Spec.UserName != "" {
		return []madeAccount{{BMC: u.Spec.BMCRef.Name, UID: rec.bmcUID, User: u.Spec.UserName}}, false
	}
	return nil, false
}

func setMadeAccounts(o client.Object, made []madeAccount) {
	if made == nil {
		made = []madeAccount{}
	}
	v, _ := json.Marshal(made) // a slice of strings always marshals
	lifecycle.SetAnnotation(o, AccountsAnnotation, string(v))
}

// adoptAccounts writes down what a BMCUser from before AccountsAnnotation made, in its first
// pass, before its spec can change again.
func (r *Reconciler) adoptAccounts(ctx context.Context, p *bmcUserPass) (lifecycle.Result, error) {
	made, recorded := madeAccounts(p.Obj)
	if recorded || len(made) == 0 {
		return lifecycle.Continue(), nil
	}
	return lifecycle.Wrote("accounts recorded"), lifecycle.PatchMetadata(ctx, p.Client(), p.Obj, func(o client.Object) {
		setMadeAccounts(o, made)
	})
}

// removeEarlier takes an account the BMCUser made that its spec no longer names (a renamed
// user, another BMC) off its BMC, one per pass, before the account it names now is created.
func (r *Reconciler) removeEarlier(ctx context.Context, p *bmcUserPass) (lifecycle.Result, error) {
	u := p.Obj
	made, _ := madeAccounts(u)
	if len(made) == 0 {
		return lifecycle.Continue(), nil
	}
	var curUID string
	if u.Spec.BMCRef != nil && u.Spec.BMCRef.Name != "" {
		b := &metalv1alpha1.BMC{}
		if err := p.Client().Get(ctx, client.ObjectKey{Name: u.Spec.BMCRef.Name}, b); err != nil && !apierrors.IsNotFound(err) {
			return lifecycle.Result{}, fmt.Errorf("reading BMC %s: %w", u.Spec.BMCRef.Name, err)
		}
		curUID = string(b.UID)
	}
	for i, a := range made {
		if curUID == "" || a.BMC != u.Spec.BMCRef.Name || a.UID != curUID || a.User != u.Spec.UserName {
			return r.removeMade(ctx, p, made, i)
		}
	}
	return lifecycle.Continue(), nil
}

// removeMade removes made[i] from its BMC and drops it from the record in one write (with the
// finalizer, when the BMCUser is being deleted and it was the last). An account is not removed,
// only dropped, when its BMC object is gone or replaced (its UID differs: nothing proves what
// answers there is the BMC it was made on), when another BMCUser names it now, or when it is
// the account its BMC object logs in with.
func (r *Reconciler) removeMade(ctx context.Context, p *bmcUserPass, made []madeAccount, i int) (lifecycle.Result, error) {
	u, a := p.Obj, made[i]
	drop := func(why string) (lifecycle.Result, error) {
		rest := slices.Delete(slices.Clone(made), i, i+1)
		return lifecycle.Wrote(why), lifecycle.PatchMetadata(ctx, p.Client(), u, func(o client.Object) {
			setMadeAccounts(o, rest)
			if len(rest) == 0 && !o.GetDeletionTimestamp().IsZero() {
				controllerutil.RemoveFinalizer(o, Finalizer)
			}
		})
	}
	b := &metalv1alpha1.BMC{}
	if err := p.Client().Get(ctx, client.ObjectKey{Name: a.BMC}, b); err != nil {
		if !apierrors.IsNotFound(err) {
			return lifecycle.Result{}, fmt.Errorf("reading BMC %s: %w", a.BMC, err)
		}
		return drop("BMC gone") // a BMC that is gone takes its accounts with it
	}
	if a.UID != "" && string(b.UID) != a.UID {
		r.Recorder.Eventf(u, b, corev1.EventTypeWarning, metalv1alpha1.ReasonAccountLeft, "DeleteAccount",
			"account %s was made on an earlier BMC object %s; the BMC %s is another object and is not changed", a.User, a.BMC, b.Name)
		return drop("BMC replaced")
	}
	others := &metalv1alpha1.BMCUserList{}
	if err := r.Client.List(ctx, others); err != nil {
		return lifecycle.Result{}, fmt.Errorf("listing BMCUsers: %w", err)
	}
	for _, o := range others.Items {
		if o.UID != u.UID && o.DeletionTimestamp.IsZero() && o.Spec.BMCRef != nil && o.Spec.BMCRef.Name == a.BMC && o.Spec.UserName == a.User {
			r.Recorder.Eventf(u, b, corev1.EventTypeNormal, metalv1alpha1.ReasonAccountKept, "DeleteAccount", "account %s on BMC %s is kept: BMCUser %s names it", a.User, a.BMC, o.Name)
			return drop("account kept for another BMCUser")
		}
	}
	ep, err := bmcaccess.Endpoint(ctx, p.Client(), b)
	if err != nil {
		return r.failed(p, fmt.Errorf("removing account %s from BMC %s: %w", a.User, a.BMC, err))
	}
	if ep.Username == a.User {
		r.Recorder.Eventf(u, b, corev1.EventTypeNormal, metalv1alpha1.ReasonAccountKept, "DeleteAccount", "account %s is the one BMC %s logs in with; it is kept", a.User, a.BMC)
		return drop("account is the BMC's own")
	}
	conn, err := r.Pool.Get(ep)
	if err != nil {
		return r.failed(p, fmt.Errorf("removing account %s from BMC %s: %w", a.User, a.BMC, err))
	}
	bctx, cancel := context.WithTimeout(ctx, r.passTimeout())
	defer cancel()
	if err := r.prove(ctx, bctx, p, b, conn); err != nil {
		return r.failed(p, fmt.Errorf("removing account %s from BMC %s: %w", a.User, a.BMC, err))
	}
	// DeleteAccount empties (and disables) a fixed slot where the BMC refuses a DELETE.
	if err := conn.DeleteAccount(bctx, a.User); err != nil {
		return r.failed(p, fmt.Errorf("removing account %s from BMC %s: %w", a.User, a.BMC, err))
	}
	r.Recorder.Eventf(u, b, corev1.EventTypeNormal, metalv1alpha1.ReasonAccountDeleted, "DeleteAccount", "account %s removed from BMC %s", a.User, a.BMC)
	return drop("account removed")
}

// recordIntent writes the account about to be created into AccountsAnnotation, unless it is
// there: written before the account is set, a crash after setting it never forgets it.
func recordIntent(ctx context.Context, p *bmcUserPass, b *metalv1alpha1.BMC) (lifecycle.Result, error) {
	made, _ := madeAccounts(p.Obj)
	cur := madeAccount{BMC: b.Name, UID: string(b.UID), User: p.Obj.Spec.UserName}
	if slices.Contains(made, cur) {
		return lifecycle.Continue(), nil
	}
	made = append(made, cur)
	return lifecycle.Wrote("account recorded"), lifecycle.PatchMetadata(ctx, p.Client(), p.Obj, func(o client.Object) {
		setMadeAccounts(o, made)
	})
}

// target resolves what a pass needs: the BMC's admin connection, the BMC's own login user and
// the account's password Secret (nil when it does not exist).
func (r *Reconciler) target(ctx context.Context, p *bmcUserPass) (*metalv1alpha1.BMC, bmc.BMC, string, *metalv1alpha1.BMCSecret, error) {
	u := p.Obj
	if u.Spec.BMCRef == nil || u.Spec.BMCRef.Name == "" || u.Spec.UserName == "" {
		return nil, nil, "", nil, bmcaccess.Errorf(metalv1alpha1.ReasonInvalidSpec, "spec.bmcRef and spec.userName are required")
	}
	b := &metalv1alpha1.BMC{}
	if err := p.Client().Get(ctx, client.ObjectKey{Name: u.Spec.BMCRef.Name}, b); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, "", nil, bmcaccess.Errorf(metalv1alpha1.ReasonBMCNotFound, "BMC %q not found", u.Spec.BMCRef.Name)
		}
		return nil, nil, "", nil, err
	}
	ep, err := bmcaccess.Endpoint(ctx, p.Client(), b)
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
func (r *Reconciler) apply(ctx context.Context, p *bmcUserPass) (lifecycle.Result, error) {
	u := p.Obj
	bctx, cancel := context.WithTimeout(ctx, r.passTimeout())
	defer cancel()
	b, conn, adminUser, sec, err := r.target(ctx, p)
	if err != nil {
		return r.failed(p, err)
	}
	if u.Spec.UserName == adminUser {
		return r.failed(p, bmcaccess.Errorf(metalv1alpha1.ReasonInvalidSpec, "user %q is the account BMC %s logs in with; rotate it with the rotate-credentials operation", adminUser, b.Name))
	}
	if sec == nil {
		if u.Spec.BMCSecretRef != nil && u.Spec.BMCSecretRef.Name != "" {
			return r.failed(p, bmcaccess.Errorf(metalv1alpha1.ReasonSecretNotFound, "BMCSecret %q not found", u.Spec.BMCSecretRef.Name))
		}
		pw, err := bmcaccess.NewPassword()
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
	if user, _ := sec.Value(metalv1alpha1.BMCSecretUsernameKey); metav1.IsControlledBy(sec, u) && user != u.Spec.UserName {
		// The generated BMCSecret is this BMCUser's alone: it names the account as it is now.
		sec.SetValue(metalv1alpha1.BMCSecretUsernameKey, u.Spec.UserName)
		if err := p.Client().Update(ctx, sec); err != nil {
			return lifecycle.Result{}, fmt.Errorf("renaming the account in BMCSecret %s: %w", sec.Name, err)
		}
		return lifecycle.Wrote("generated BMCSecret renamed"), nil
	}
	password, ok := sec.Value(metalv1alpha1.BMCSecretPasswordKey)
	if !ok || password == "" {
		return r.failed(p, bmcaccess.Errorf(metalv1alpha1.ReasonSecretInvalid, "BMCSecret %q has no %q", sec.Name, metalv1alpha1.BMCSecretPasswordKey))
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
		if res, err := recordIntent(ctx, p, b); err != nil || !res.IsContinue() {
			return res, err
		}
		if err := conn.SetAccount(bctx, u.Spec.UserName, pending, u.Spec.RoleID); err != nil {
			return r.failed(p, err)
		}
		sec.SetValue(metalv1alpha1.BMCSecretPasswordKey, pending)
		sec.DeleteValue(metalv1alpha1.BMCSecretPendingPasswordKey)
		if err := p.Client().Update(ctx, sec); err != nil {
			return lifecycle.Result{}, fmt.Errorf("committing the rotated password to BMCSecret %s: %w", sec.Name, err)
		}
		r.Recorder.Eventf(u, b, corev1.EventTypeNormal, metalv1alpha1.ReasonPasswordRotated, "Rotate", "password of %s rotated on BMC %s", u.Spec.UserName, b.Name)
		return lifecycle.Wrote("password rotated"), nil
	case due && (sec.Immutable == nil || !*sec.Immutable):
		pw, err := bmcaccess.NewPassword()
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
			r.ready(p, metav1.ConditionTrue, metalv1alpha1.ReasonAccountSet, fmt.Sprintf("account %s is on BMC %s", u.Spec.UserName, b.Name))
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
	if res, err := recordIntent(ctx, p, b); err != nil || !res.IsContinue() {
		return res, err
	}
	if err := conn.SetAccount(bctx, u.Spec.UserName, password, u.Spec.RoleID); err != nil {
		return r.failed(p, err)
	}
	r.Recorder.Eventf(u, b, corev1.EventTypeNormal, metalv1alpha1.ReasonAccountSet, "SetAccount", "account %s set on BMC %s", u.Spec.UserName, b.Name)
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
func (r *Reconciler) prove(ctx, bctx context.Context, p *bmcUserPass, b *metalv1alpha1.BMC, conn bmc.BMC) error {
	systems, err := conn.Systems(bctx)
	if err != nil {
		return err
	}
	return bmcaccess.Prove(ctx, p.Client(), b, systems)
}

// passTimeout bounds a pass's BMC calls.
func (r *Reconciler) passTimeout() time.Duration {
	if d := max(r.PassTimeout, r.RequestTimeout); d > 0 {
		return d
	}
	return 30 * time.Second
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func (r *Reconciler) ready(p *bmcUserPass, status metav1.ConditionStatus, reason, msg string) {
	lifecycle.SetCondition(&p.Obj.Status.Conditions, p.Obj.Generation, metalv1alpha1.ConditionReady, status, reason, msg)
}

// failed reports why the account is not as asked and looks again later.
func (r *Reconciler) failed(p *bmcUserPass, err error) (lifecycle.Result, error) {
	reason := bmcaccess.ReasonOf(err)
	if reason == "" || reason == string(bmc.ReasonUnknown) {
		reason = metalv1alpha1.ReasonAccountFailed
	}
	r.ready(p, metav1.ConditionFalse, reason, err.Error())
	return lifecycle.RequeueAfter(cmpDuration(r.RetryAfter, 10*time.Second), reason), nil
}

// deleteAccount removes every account the BMCUser made, one per pass, then the finalizer
// (in the write that drops the last).
func (r *Reconciler) deleteAccount(ctx context.Context, p *bmcUserPass) (lifecycle.Result, error) {
	u := p.Obj
	if !slices.Contains(u.Finalizers, Finalizer) {
		return lifecycle.Done(), nil
	}
	made, _ := madeAccounts(u)
	if len(made) == 0 {
		return lifecycle.Wrote("nothing to remove"), lifecycle.PatchMetadata(ctx, p.Client(), u, func(o client.Object) {
			controllerutil.RemoveFinalizer(o, Finalizer)
		})
	}
	return r.removeMade(ctx, p, made, 0)
}

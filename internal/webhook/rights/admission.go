package rights

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery"
	"github.com/metalhub/metalhub/internal/controller/delivery/apply"
	"github.com/metalhub/metalhub/internal/controller/delivery/sealing"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=selfsubjectreviews,verbs=create

// Admission decides, with the rights of whoever writes an InfrahubSync or a VidraResource, what
// it may make the operator do. The kinds are cluster-scoped (Vidra's API), so every fence keyed
// on their spec is chosen by the writer; admission makes sure the writer could do it all
// themselves: act as the ServiceAccount named (impersonate it), act in the destination
// namespace, read the kubeconfig Secret of the destination cluster and the sync's Infrahub
// credentials. VidraResources the operator writes for a sync carry the sync's admitted
// destination and cannot be written into another.
type Admission struct {
	// Client runs SubjectAccessReviews and the operator's SelfSubjectReview.
	Client client.Client
	// Reader finds the Secrets a destination and a source would use (live reads: admission
	// must not trust a cache that lags the Secret the writer just created).
	Reader client.Reader
	// Options are the delivery family's: the default ServiceAccount, whether the operator's own
	// identity may be used, where Secrets are read.
	Options delivery.Options

	selfOnce sync.Once
	self     *target.SelfUser // the operator's user name, learnt once

	sealOnce sync.Once
	sealer   *sealing.Sealer
}

// operatorUser is the operator's own user name (a SelfSubjectReview, once), learnt as the
// reconcilers learn it.
func (a *Admission) operatorUser(ctx context.Context) (string, error) {
	a.selfOnce.Do(func() { a.self = &target.SelfUser{Client: a.Client} })
	return a.self.Get(ctx)
}

// right is one permission admission asks for.
type right struct {
	verb, group, resource, namespace, name string
}

func (r right) String() string {
	res := r.resource
	if r.group != "" {
		res += "." + r.group
	}
	what := fmt.Sprintf("%s %s", r.verb, res)
	if r.name != "" {
		what += fmt.Sprintf(" %q", r.name)
	}
	if r.namespace != "" {
		what += " in namespace " + r.namespace
	}
	return what
}

// allowed asks the API server whether user has r.
func (a *Admission) allowed(ctx context.Context, user authenticationv1.UserInfo, r right) (bool, error) {
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: r.verb, Group: r.group, Resource: r.resource,
			Namespace: r.namespace, Name: r.name},
	}}
	if err := a.Client.Create(ctx, sar); err != nil {
		return false, fmt.Errorf("asking whether %s may %s: %w", user.Username, r, err)
	}
	return sar.Status.Allowed, nil
}

// refusal is what the writer is told: the right they lack and what it was needed for.
func refusal(user string, r right, why string) error {
	return fmt.Errorf("user %q may not %s: %s", user, r, why)
}

// CheckSync admits an InfrahubSync written by user: old is nil on create. Both kinds are
// cluster-scoped, so anyone who may update one may update every one: an update that changes
// what the sync makes the operator do (its spec, its owner references, an infrahub.operators.com
// annotation) is judged as a create of the resulting sync, with the writer's rights. Labels,
// finalizers and the operator's own bookkeeping pass; the spec of a sync being deleted is frozen.
func (a *Admission) CheckSync(ctx context.Context, user authenticationv1.UserInfo, old, s *infrahubv1alpha1.InfrahubSync) error {
	var oldMeta metav1.Object
	if old != nil {
		oldMeta = old
	}
	if err := a.checkWriter(ctx, user, "InfrahubSync", &infrahubv1alpha1.InfrahubSyncList{}, oldMeta, s); err != nil {
		return err
	}
	if old != nil {
		if err := frozen(old.DeletionTimestamp, old.Spec, s.Spec); err != nil {
			return err
		}
		if !instructs(&old.ObjectMeta, &s.ObjectMeta, !equality.Semantic.DeepEqual(old.Spec, s.Spec)) {
			return nil
		}
	}
	if op, err := a.operatorUser(ctx); err != nil {
		return err
	} else if user.Username == op {
		return nil // its bookkeeping (annotations, finalizers)
	}
	return a.syncRights(ctx, user, s)
}

// syncRights: user has every right s asks for (see CheckSync).
func (a *Admission) syncRights(ctx context.Context, user authenticationv1.UserInfo, s *infrahubv1alpha1.InfrahubSync) error {
	admitted := strings.TrimSpace(s.Annotations[infrahubv1alpha1.AdmittedCredentialsAnnotation])
	who := target.Claimant{Kind: "InfrahubSync", Name: s.Name, Syncs: []string{s.Name}}
	if err := a.dependsOnRights(ctx, user, s.Spec.DependsOn, "sync"); err != nil {
		return err
	}
	if err := a.checkDestination(ctx, user, s.Spec.Destination, who, false); err != nil {
		return err
	}
	if admitted != "" {
		if err := a.mayRead(ctx, user, admitted, infrahubv1alpha1.AdmittedCredentialsAnnotation,
			"the sync names it as its Infrahub credentials (admission binds a sync naming none to the Secret labelled "+
				infrahubv1alpha1.InfrahubAPIURLLabel+" for its host; name another in that annotation, or have the admin write the sync)"); err != nil {
			return err
		}
		who.Admitted = admitted
	}
	sec, err := target.FindLabelledSecret(ctx, a.Reader, a.scope(), target.SecretQuery{Key: infrahubv1alpha1.InfrahubAPIURLLabel,
		RawURL: s.Spec.Source.InfrahubAPIURL, Who: who,
		NotFound: infrahubv1alpha1.ReasonCredentialsNotFound, NotBound: infrahubv1alpha1.ReasonCredentialsNotBound})
	if err != nil {
		if reason, _ := lifecycle.ReasonOf(err); reason == infrahubv1alpha1.ReasonCredentialsNotFound || reason == infrahubv1alpha1.ReasonCredentialsNotBound {
			return nil // none serves this sync: it runs without credentials, or fails and says why
		}
		return err // unreadable or ambiguous: refuse rather than admit unchecked
	}
	r := right{verb: "get", resource: "secrets", namespace: sec.Namespace, name: sec.Name}
	if ok, err := a.allowed(ctx, user, r); err != nil {
		return err
	} else if !ok {
		return refusal(user.Username, r, fmt.Sprintf("it holds the Infrahub credentials for %s, which the sync would use", s.Spec.Source.InfrahubAPIURL))
	}
	return nil
}

// mayRead requires user to be allowed to get the Secret ref (namespace/name) an annotation names.
func (a *Admission) mayRead(ctx context.Context, user authenticationv1.UserInfo, ref, annotation, why string) error {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return fmt.Errorf("annotation %s: %q is not namespace/name", annotation, ref)
	}
	r := right{verb: "get", resource: "secrets", namespace: ns, name: name}
	if ok, err := a.allowed(ctx, user, r); err != nil {
		return err
	} else if !ok {
		return refusal(user.Username, r, why)
	}
	return nil
}

func (a *Admission) scope() target.SecretScope {
	return target.NewSecretScope(a.Options.SecretsNamespace, a.Options.OperatorNamespace)
}

// CheckResource admits a VidraResource written by user: old is nil on create. The operator
// writes those of a sync: their destination must be the sync's, which was admitted. Anyone else
// is checked as for a sync, on create and on every update that changes what the VidraResource
// makes the operator do (see CheckSync); the spec of one being deleted is frozen.
func (a *Admission) CheckResource(ctx context.Context, user authenticationv1.UserInfo, old, vr *infrahubv1alpha1.VidraResource) error {
	var oldMeta metav1.Object
	if old != nil {
		oldMeta = old
	}
	if err := a.checkWriter(ctx, user, "VidraResource", &infrahubv1alpha1.VidraResourceList{}, oldMeta, vr); err != nil {
		return err
	}
	if old != nil {
		if err := frozen(old.DeletionTimestamp, old.Spec, vr.Spec); err != nil {
			return err
		}
		if !instructs(&old.ObjectMeta, &vr.ObjectMeta, !equality.Semantic.DeepEqual(old.Spec, vr.Spec)) {
			return nil
		}
	}
	who, err := a.resourceClaimant(ctx, vr)
	if err != nil {
		return err
	}
	op, err := a.operatorUser(ctx)
	if err != nil {
		return err
	}
	if user.Username == op {
		return nil // the sync's own, checked above; what else the operator writes it wrote itself
	}
	if handoverSet(old, vr) {
		// It moves another VidraResource's objects to this one: the operator writes it for a
		// sync whose artifact changed its id, and nobody else (the controller also honours it
		// only between VidraResources of one sync).
		return fmt.Errorf("user %q may not set annotation %s: only the operator writes it, to hand a sync's objects between its VidraResources",
			user.Username, infrahubv1alpha1.HandoverAnnotation)
	}
	return a.resourceRights(ctx, user, vr, who)
}

// resourceClaimant is who vr's kubeconfig would be looked up for at admission: vr, and the sync
// that controls it, whose destination it must have.
func (a *Admission) resourceClaimant(ctx context.Context, vr *infrahubv1alpha1.VidraResource) (target.Claimant, error) {
	who := target.Claimant{Kind: "VidraResource", Name: vr.Name, Resources: []string{vr.Name}}
	if name, _, ok := apply.SyncRefOf(vr); ok {
		s := &infrahubv1alpha1.InfrahubSync{}
		if err := a.Reader.Get(ctx, client.ObjectKey{Name: name}, s); err != nil && !apierrors.IsNotFound(err) {
			return who, fmt.Errorf("reading InfrahubSync %s, the VidraResource's controller: %w", name, err)
		} else if err == nil && apply.OwnedBy(vr, s) {
			if !sameDestination(s.Spec.Destination, vr.Spec.Destination) {
				return who, fmt.Errorf("the destination of a VidraResource of InfrahubSync %s is the sync's (%s), not %s", s.Name,
					describeDestination(s.Spec.Destination), describeDestination(vr.Spec.Destination))
			}
			who.Syncs = []string{s.Name}
		}
	}
	return who, nil
}

// dependsOnRights: user may get every InfrahubSync deps names. The object waits on their state
// and its status names what it waits on: a writer who could not read a sync learns of it
// nothing through the operator.
func (a *Admission) dependsOnRights(ctx context.Context, user authenticationv1.UserInfo, deps []infrahubv1alpha1.Dependency, kind string) error {
	for _, d := range deps {
		r := right{verb: "get", group: infrahubv1alpha1.GroupVersion.Group, resource: "infrahubsyncs", name: d.Name}
		if ok, err := a.allowed(ctx, user, r); err != nil {
			return err
		} else if !ok {
			return refusal(user.Username, r, "spec.dependsOn names it: the "+kind+" would wait on its state")
		}
	}
	return nil
}

// resourceRights: user has every right vr asks for (see CheckResource).
func (a *Admission) resourceRights(ctx context.Context, user authenticationv1.UserInfo, vr *infrahubv1alpha1.VidraResource, who target.Claimant) error {
	if err := a.dependsOnRights(ctx, user, vr.Spec.DependsOn, "VidraResource"); err != nil {
		return err
	}
	if admitted := strings.TrimSpace(vr.Annotations[infrahubv1alpha1.AdmittedKubeconfigAnnotation]); admitted != "" {
		if err := a.mayRead(ctx, user, admitted, infrahubv1alpha1.AdmittedKubeconfigAnnotation,
			"the VidraResource names it as its cluster's kubeconfig"); err != nil {
			return err
		}
		who.Admitted = admitted
	}
	return a.checkDestination(ctx, user, vr.Spec.Destination, who, false)
}

// handoverSet reports whether a write sets HandoverAnnotation or changes its value (old is nil
// on create); removing it only narrows what the VidraResource may take.
func handoverSet(old, vr *infrahubv1alpha1.VidraResource) bool {
	v, ok := vr.Annotations[infrahubv1alpha1.HandoverAnnotation]
	if !ok {
		return false
	}
	if old == nil {
		return true
	}
	was, had := old.Annotations[infrahubv1alpha1.HandoverAnnotation]
	return !had || was != v
}

// CheckSyncDelete admits the deletion of an InfrahubSync by user: its VidraResources go with it,
// and their finalizers remove what they applied as the sync's ServiceAccount, so the writer must
// be able to act as it (the operator's own deletions pass).
func (a *Admission) CheckSyncDelete(ctx context.Context, user authenticationv1.UserInfo, s *infrahubv1alpha1.InfrahubSync) error {
	if op, err := a.operatorUser(ctx); err != nil {
		return err
	} else if user.Username == op {
		return nil
	}
	return a.checkDestination(ctx, user, s.Spec.Destination, target.Claimant{Kind: "InfrahubSync", Name: s.Name, Syncs: []string{s.Name}}, true)
}

// CheckResourceDelete admits the deletion of a VidraResource by user: its finalizer removes what
// it applied, as its ServiceAccount. The operator's own deletions (a sync's prune) pass, and so
// do the garbage collector's of a VidraResource whose controlling sync is gone or going: it
// follows a deletion that was itself checked. Anyone else needs the rights the cleanup uses,
// whether the sync is there or not.
func (a *Admission) CheckResourceDelete(ctx context.Context, user authenticationv1.UserInfo, vr *infrahubv1alpha1.VidraResource) error {
	if op, err := a.operatorUser(ctx); err != nil {
		return err
	} else if user.Username == op {
		return nil
	}
	who := target.Claimant{Kind: "VidraResource", Name: vr.Name, Resources: []string{vr.Name}}
	if name, _, ok := apply.SyncRefOf(vr); ok {
		s := &infrahubv1alpha1.InfrahubSync{}
		err := a.Reader.Get(ctx, client.ObjectKey{Name: name}, s)
		switch {
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("reading InfrahubSync %s, the VidraResource's controller: %w", name, err)
		case garbageCollector(user.Username) && (err != nil || !apply.OwnedBy(vr, s) || s.DeletionTimestamp != nil):
			return nil
		case err == nil && apply.OwnedBy(vr, s):
			who.Syncs = []string{s.Name}
		}
	}
	if admitted := strings.TrimSpace(vr.Annotations[infrahubv1alpha1.AdmittedKubeconfigAnnotation]); admitted != "" {
		if err := a.mayRead(ctx, user, admitted, infrahubv1alpha1.AdmittedKubeconfigAnnotation,
			"the VidraResource names it as its cluster's kubeconfig"); err != nil {
			return err
		}
		who.Admitted = admitted
	}
	return a.checkDestination(ctx, user, vr.Spec.Destination, who, true)
}

// garbageCollector: the user kube-controller-manager's garbage collector deletes as (its own
// ServiceAccount with --use-service-account-credentials, else the manager's user).
func garbageCollector(user string) bool {
	return user == "system:serviceaccount:kube-system:generic-garbage-collector" || user == "system:kube-controller-manager"
}

// frozen refuses a spec change on an object being deleted: its finalizer cleans up after the
// spec it had, and a changed one would make the cleanup act elsewhere or as someone else.
func frozen[S any](deleting *metav1.Time, old, spec S) error {
	if deleting == nil || equality.Semantic.DeepEqual(old, spec) {
		return nil
	}
	return errors.New("the spec cannot change once deletion has started")
}

// instructs says whether an update changes what the object makes the operator do: its spec,
// its owner references (removals aside: the garbage collector orphaning, which only narrows
// what the object may use), or an annotation of the infrahub.operators.com domain.
func instructs(old, upd *metav1.ObjectMeta, specChanged bool) bool {
	if specChanged {
		return true
	}
	before := map[types.UID]metav1.OwnerReference{}
	for _, r := range old.OwnerReferences {
		before[r.UID] = r
	}
	for _, r := range upd.OwnerReferences {
		if b, ok := before[r.UID]; !ok || !equality.Semantic.DeepEqual(b, r) {
			return true
		}
	}
	for k, v := range old.Annotations {
		if ourAnnotation(k) && upd.Annotations[k] != v {
			return true
		}
	}
	for k, v := range upd.Annotations {
		if ourAnnotation(k) && old.Annotations[k] != v {
			return true
		}
	}
	return false
}

// ourAnnotation: a key of the infrahub.operators.com domain or one of its subdomains.
func ourAnnotation(key string) bool {
	domain, _, ok := strings.Cut(key, "/")
	return ok && (domain == infrahubv1alpha1.GroupVersion.Group || strings.HasSuffix(domain, "."+infrahubv1alpha1.GroupVersion.Group))
}

// checkDestination: the writer may act as the ServiceAccount (or, for none, as the operator),
// may act in the destination namespace when the ServiceAccount lives elsewhere, and may read the
// kubeconfig Secret of a remote destination, which must exist. For a deletion, an identity or
// a cluster the operator could not use anyway asks for nothing: the cleanup cannot run there.
func (a *Admission) checkDestination(ctx context.Context, user authenticationv1.UserInfo, d infrahubv1alpha1.Destination, who target.Claimant, deleting bool) error {
	saNS, saName := target.ServiceAccountFor(d, a.Options.DefaultServiceAccount)
	destNS := target.DestinationNamespace(d)
	var need []struct {
		r   right
		why string
	}
	add := func(r right, why string) {
		need = append(need, struct {
			r   right
			why string
		}{r, why})
	}
	if saName != "" {
		add(right{verb: "impersonate", resource: "serviceaccounts", namespace: saNS, name: saName},
			fmt.Sprintf("the operator would apply as ServiceAccount %s/%s", saNS, saName))
		if saNS != destNS {
			add(right{verb: "impersonate", resource: "serviceaccounts", namespace: destNS},
				fmt.Sprintf("ServiceAccount %s/%s is not of the destination namespace %s, where its objects go", saNS, saName, destNS))
		}
	} else {
		if !a.Options.AllowOperatorIdentity {
			if deleting {
				return nil
			}
			return errors.New("spec.destination.serviceAccountName is empty and the operator has no default ServiceAccount " +
				"(--delivery-default-service-account) and does not apply as itself (--delivery-allow-operator-identity): name a ServiceAccount")
		}
		op, err := a.operatorUser(ctx)
		if err != nil {
			return err
		}
		add(impersonation(op), "no ServiceAccount is named, so the operator would apply with its own rights")
	}
	if !target.IsLocal(d.Server) {
		sec, err := target.FindLabelledSecret(ctx, a.Reader, a.scope(), target.SecretQuery{Key: infrahubv1alpha1.ClusterKubeconfigLabel, RawURL: d.Server, Who: who,
			NotFound: infrahubv1alpha1.ReasonKubeconfigNotFound, NotBound: infrahubv1alpha1.ReasonKubeconfigNotBound})
		switch {
		case err != nil && deleting:
		case err != nil:
			return fmt.Errorf("destination server %s is not a registered cluster: %w", d.Server, err)
		default:
			add(right{verb: "get", resource: "secrets", namespace: sec.Namespace, name: sec.Name},
				fmt.Sprintf("it holds the kubeconfig of %s, which the operator would use", d.Server))
		}
	}
	for _, n := range need {
		ok, err := a.allowed(ctx, user, n.r)
		if err != nil {
			return err
		}
		if !ok {
			return refusal(user.Username, n.r, n.why)
		}
	}
	return nil
}

// impersonation is the right to act as user: a ServiceAccount's, or a plain user's.
func impersonation(user string) right {
	if rest, ok := strings.CutPrefix(user, "system:serviceaccount:"); ok {
		if ns, name, ok := strings.Cut(rest, ":"); ok {
			return right{verb: "impersonate", resource: "serviceaccounts", namespace: ns, name: name}
		}
	}
	return right{verb: "impersonate", resource: "users", name: user}
}

// sameDestination compares what decides where and as whom a destination applies.
func sameDestination(a, b infrahubv1alpha1.Destination) bool {
	return a.Server == b.Server && a.Namespace == b.Namespace &&
		a.ServiceAccountName == b.ServiceAccountName && a.ServiceAccountNamespace == b.ServiceAccountNamespace
}

func describeDestination(d infrahubv1alpha1.Destination) string {
	sa := "no ServiceAccount"
	if d.ServiceAccountName != "" {
		sa = "ServiceAccount " + d.ServiceAccountNamespace + "/" + d.ServiceAccountName
	}
	return fmt.Sprintf("server %q, namespace %q, %s", d.Server, d.Namespace, sa)
}

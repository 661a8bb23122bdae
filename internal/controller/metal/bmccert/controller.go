// Package bmccert is the BMC certificate controller: a BMC with spec.certificate gets a
// certificate on its HTTPS service and keeps it renewed. The BMC makes the key (Redfish
// GenerateCSR), a Kubernetes CertificateSigningRequest carries it to the signer the user names,
// the signed certificate goes back with ReplaceCertificate, and once the BMC is seen serving it,
// verified against the signer's CA, every connection to that BMC verifies TLS against that CA
// alone (bmcaccess.PinnedCA).
//
// Every step is bookkeeping on the BMC object before it acts (bmcaccess.CertificateRecord): the
// attempt is numbered before the BMC is asked for a key and the request is named for it, so a
// crash or a wiped status never leaves two requests outstanding, and an install is recorded
// only after the BMC took it (one found already served is recorded without a second install).
// It reaches the BMC only through bmcaccess.ProvenBMC, by the replica holding the BMC's shard.
// It imports neither the assembly nor another controller (hack/layers.sh).
package bmccert

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/controller/metal/shardkey"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/shard"
)

// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get

// BMCLabel on a CertificateSigningRequest names the BMC it was made for.
const BMCLabel = "metal.metalhub.io/bmc"

// attemptAnnotation and collectionAnnotation on a request: its attempt, and the BMC's certificate
// collection its key was made for (GenerateCSR's answer).
const (
	attemptAnnotation    = "metal.metalhub.io/certificate-attempt"
	collectionAnnotation = "metal.metalhub.io/certificate-collection"
)

// Reconciler keeps the certificate of each BMC with spec.certificate.
type Reconciler struct {
	// Shards, set, limits the reconciler to the BMCs of the shards this replica holds.
	Shards *shard.Set
	Client client.Client
	// CertManager says cert-manager's CertificateRequest API is served (SetupWithManager
	// detects it): BMCs naming an issuerRef are served only then.
	CertManager bool
	// APIReader reads the CA ConfigMaps (not cached: any namespace, read at install only).
	APIReader client.Reader
	Pool      *bmc.Pool
	Recorder  events.EventRecorder
	// RetryAfter is the look after a failure; Resync the steady look.
	RetryAfter time.Duration
	Resync     time.Duration
	// RequestTimeout bounds one Redfish request; PassTimeout a pass's requests together, the
	// waits for the BMC's request slots included. The larger bounds the pass.
	RequestTimeout time.Duration
	PassTimeout    time.Duration
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

type certPass struct {
	*lifecycle.Pass[*metalv1alpha1.BMC]
	bctx context.Context
	rec  bmcaccess.CertificateRecord
	// req is the request of the attempt under way, when it exists.
	req *request
	// problem is why the last step could not go on (reported, not an error).
	problem *problem
}

type problem struct{ reason, msg string }

// SetupWithManager registers the controller: BMCs with a certificate asked or recorded, and
// the requests made for them.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if _, err := mgr.GetRESTMapper().RESTMapping(CertificateRequestGVK.GroupKind(), CertificateRequestGVK.Version); err == nil {
		r.CertManager = true
	}
	rec := r.NewPasses()
	byLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if name := o.GetLabels()[BMCLabel]; name != "" {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: name}}}
		}
		return nil
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named("bmccertificate").
		For(&metalv1alpha1.BMC{}, builder.WithPredicates(predicate.NewPredicateFuncs(concerned), lifecycle.Predicate())).
		Watches(&certificatesv1.CertificateSigningRequest{}, byLabel).
		Watches(&metalv1alpha1.BMC{}, handler.Funcs{DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			expiry.DeleteLabelValues(e.Object.GetName())
		}}).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2})
	if r.CertManager {
		b = b.Watches(newCertificateRequest(), byLabel)
	}
	return shard.Gate(r.Shards, mgr.GetCache(), b, rec, func() client.ObjectList { return &metalv1alpha1.BMCList{} }, shardkey.ForBMC).Complete(rec)
}

// NewPasses is the controller's pass over one BMC, for a manager or a test to drive.
func (r *Reconciler) NewPasses() *lifecycle.Reconciler[*metalv1alpha1.BMC] {
	rec := lifecycle.NewReconciler(r.Client, func() *metalv1alpha1.BMC { return &metalv1alpha1.BMC{} }, r.handle)
	rec.Resync = r.Resync
	return rec
}

// concerned: a BMC asking for a certificate, or holding the bookkeeping of one.
func concerned(o client.Object) bool {
	b, ok := o.(*metalv1alpha1.BMC)
	return ok && (b.Spec.Certificate != nil || b.Annotations[bmcaccess.CertificateAnnotation] != "" || b.Status.Certificate != nil)
}

func (r *Reconciler) handle(ctx context.Context, lp *lifecycle.Pass[*metalv1alpha1.BMC]) (lifecycle.Result, error) {
	if !concerned(lp.Obj) || !lp.Obj.DeletionTimestamp.IsZero() {
		return lifecycle.Done(), nil // a deleted BMC's requests go with it (owner references)
	}
	bctx, cancel := context.WithTimeout(ctx, max(r.PassTimeout, r.RequestTimeout))
	defer cancel()
	p := &certPass{Pass: lp, bctx: bctx, rec: bmcaccess.CertificateRecordOf(lp.Obj)}
	res, err := lifecycle.Steps(ctx, p,
		r.forgetStep,
		r.loadRequest,
		r.tidyRequests,
		r.startStep,
		r.requestStep,
		r.pinStep,
	)
	if err != nil || res.IsWrote() {
		return res, err
	}
	return r.report(p), nil
}

// forgetStep: spec.certificate removed. The record goes (the BMC is verified as before: the
// insecure annotation or the system roots), with every request made for it; the certificate
// stays on the BMC, which nothing here takes back.
func (r *Reconciler) forgetStep(ctx context.Context, p *certPass) (lifecycle.Result, error) {
	b := p.Obj
	if b.Spec.Certificate != nil {
		return lifecycle.Continue(), nil
	}
	if deleted, err := r.deleteRequests(ctx, p, -1); err != nil || deleted {
		return lifecycle.Wrote("requests removed"), err
	}
	if b.Annotations[bmcaccess.CertificateAnnotation] != "" || b.Annotations[bmcaccess.CertificateCAAnnotation] != "" {
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, metalv1alpha1.ReasonCertificateInstalled, "Forget",
			"spec.certificate removed: the BMC is no longer pinned to the signer's CA; its certificate stays on it")
		return lifecycle.Wrote("certificate forgotten"), lifecycle.PatchMetadata(ctx, p.Client(), b, func(o client.Object) {
			lifecycle.RemoveAnnotation(o, bmcaccess.CertificateAnnotation)
			lifecycle.RemoveAnnotation(o, bmcaccess.CertificateCAAnnotation)
		})
	}
	expiry.DeleteLabelValues(b.Name)
	b.Status.Certificate = nil
	apimeta.RemoveStatusCondition(&b.Status.Conditions, metalv1alpha1.ConditionCertificateReady)
	return lifecycle.Done(), nil
}

// writeRecord writes the record (and, when ca is not nil, the CA bundle) in one write.
func (r *Reconciler) writeRecord(ctx context.Context, p *certPass, rec bmcaccess.CertificateRecord, ca []byte, why string) (lifecycle.Result, error) {
	p.rec = rec
	return lifecycle.Wrote(why), lifecycle.PatchMetadata(ctx, p.Client(), p.Obj, func(o client.Object) {
		lifecycle.SetAnnotation(o, bmcaccess.CertificateAnnotation, rec.String())
		if ca != nil {
			lifecycle.SetAnnotation(o, bmcaccess.CertificateCAAnnotation, string(ca))
		}
	})
}

// specDigest identifies spec.certificate: a denied request is asked again only when it changes.
func specDigest(c *metalv1alpha1.BMCCertificate) string {
	out, _ := json.Marshal(c)
	sum := sha256.Sum256(out)
	return hex.EncodeToString(sum[:8])
}

// renewBefore is the share of the lifetime left at which a certificate is renewed.
func renewBefore(c *metalv1alpha1.BMCCertificate) int32 {
	if c.RenewBeforePercent <= 0 {
		return 33
	}
	return c.RenewBeforePercent
}

// renewAt is when rec's certificate is renewed under spec c.
func renewAt(rec bmcaccess.CertificateRecord, c *metalv1alpha1.BMCCertificate) time.Time {
	life := rec.NotAfter.Sub(rec.NotBefore)
	return rec.NotAfter.Add(-life * time.Duration(renewBefore(c)) / 100)
}

// report is the pass's status: the record as seen, the condition, the expiry metric; and the
// next look (the renewal time, or soon while a step waits on the BMC).
func (r *Reconciler) report(p *certPass) lifecycle.Result {
	b, rec, spec, now := p.Obj, p.rec, p.Obj.Spec.Certificate, r.now()
	if spec == nil {
		return lifecycle.Done()
	}
	st := &metalv1alpha1.BMCCertificateStatus{SignerName: rec.Signer, Pinned: rec.Pinned}
	next := r.Resync
	if rec.Fingerprint != "" {
		st.Issuer, st.Subject, st.SerialNumber = rec.Issuer, rec.Subject, rec.Serial
		st.NotBefore, st.NotAfter = &metav1.Time{Time: rec.NotBefore}, &metav1.Time{Time: rec.NotAfter}
		at := renewAt(rec, spec)
		st.RenewAfter = &metav1.Time{Time: at}
		expiry.WithLabelValues(b.Name).Set(float64(rec.NotAfter.Unix()))
		if d := at.Sub(now); d > 0 && (next <= 0 || d < next) {
			next = d
		}
	}
	if rec.Requesting {
		st.Request = requestName(b.Name, rec.Attempt)
	}
	status, reason, msg := r.condition(p, now)
	before := apimeta.FindStatusCondition(b.Status.Conditions, metalv1alpha1.ConditionCertificateReady)
	if before == nil || before.Reason != reason {
		typ := corev1.EventTypeNormal
		if status == metav1.ConditionFalse || reason == metalv1alpha1.ReasonCertificateExpiring {
			typ = corev1.EventTypeWarning
		}
		var related runtime.Object // a nil *request's object is not a nil Object
		if p.req != nil {
			related = p.req.obj
		}
		r.Recorder.Eventf(b, related, typ, reason, "Certificate", "%s", msg)
	}
	lifecycle.SetCondition(&b.Status.Conditions, b.Generation, metalv1alpha1.ConditionCertificateReady, status, reason, msg)
	if !equality.Semantic.DeepEqual(st, b.Status.Certificate) {
		b.Status.Certificate = st
	}
	if p.problem != nil && p.problem.reason == metalv1alpha1.ReasonCertificateFailed {
		next = r.RetryAfter
	} else if p.problem != nil && p.problem.reason == metalv1alpha1.ReasonCertificateNotServed && (next <= 0 || r.RetryAfter*10 < next) {
		next = r.RetryAfter * 10
	}
	if next > 0 {
		return lifecycle.RequeueAfter(next, reason)
	}
	return lifecycle.Done()
}

// condition says where the certificate stands: True while the one installed is served,
// verified and not expired (a renewal under way or failing says so in the reason).
func (r *Reconciler) condition(p *certPass, now time.Time) (metav1.ConditionStatus, string, string) {
	rec, spec := p.rec, p.Obj.Spec.Certificate
	waiting := ""
	if p.problem != nil {
		waiting = p.problem.msg
	} else if rec.Requesting {
		waiting = fmt.Sprintf("request %s waits for %s", requestName(p.Obj.Name, rec.Attempt), signerOf(spec))
	}
	installed := rec.Fingerprint != ""
	switch {
	case installed && !now.Before(rec.NotAfter):
		return metav1.ConditionFalse, metalv1alpha1.ReasonCertificateExpired, fmt.Sprintf("certificate %s expired at %s; %s", rec.Serial, rec.NotAfter.UTC().Format(time.RFC3339), cmpStr(waiting, "no renewal under way"))
	case installed && rec.Pinned && p.problem != nil && p.problem.reason == metalv1alpha1.ReasonCertificateNotServed:
		return metav1.ConditionFalse, p.problem.reason, p.problem.msg
	case installed && rec.Pinned:
		at := renewAt(rec, spec)
		// Expiring: a renewal is late by half of the window it had (a signer that does not
		// answer, a BMC refusing): warned before the certificate runs out.
		if now.After(at.Add(rec.NotAfter.Sub(at) / 2)) {
			return metav1.ConditionTrue, metalv1alpha1.ReasonCertificateExpiring, fmt.Sprintf("certificate %s expires at %s and is not renewed yet: %s", rec.Serial, rec.NotAfter.UTC().Format(time.RFC3339), cmpStr(waiting, "renewal not started"))
		}
		msg := fmt.Sprintf("certificate %s from %s served and verified; renewed after %s", rec.Serial, rec.Issuer, at.UTC().Format(time.RFC3339))
		if waiting != "" {
			msg += "; renewal: " + waiting
		}
		return metav1.ConditionTrue, metalv1alpha1.ReasonCertificateInstalled, msg
	case p.problem != nil:
		return metav1.ConditionFalse, p.problem.reason, p.problem.msg
	case rec.Denied:
		return metav1.ConditionFalse, metalv1alpha1.ReasonCertificateDenied, fmt.Sprintf("request %s was denied or failed; change spec.certificate to ask again", requestName(p.Obj.Name, rec.Attempt))
	default:
		return metav1.ConditionFalse, metalv1alpha1.ReasonCertificateRequested, cmpStr(waiting, "a certificate is requested")
	}
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// failed reports a step that could not go on; the pass ends and looks again after RetryAfter
// (or, for a missing CertificateService or an unusable certificate, after the resync).
func (r *Reconciler) failed(p *certPass, reason string, err error) (lifecycle.Result, error) {
	p.problem = &problem{reason: reason, msg: err.Error()}
	return lifecycle.Done(), nil
}

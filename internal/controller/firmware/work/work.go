package work

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/controller/metal/claimable"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// Work is what one pass over a per-server object (BIOSVersion, BIOSSettings) knows: its server,
// its record, its maintenance, the box once reached, and what the report will say.
type Work struct {
	// Self is the object the pass is over, C the pass's client (its one write goes through it),
	// BMCContext bounds the pass's BMC calls (RequestTimeout). (Not Obj nor Client: the
	// controllers' passes embed a lifecycle.Pass beside the Work.)
	Self       client.Object
	C          client.Client
	BMCContext context.Context
	// ServerName is spec.serverRef.name; MaintRef points at spec.serverMaintenanceRef.
	ServerName string
	MaintRef   **metalv1alpha1.ObjectReference
	Policy     metalv1alpha1.ServerMaintenancePolicy

	Server *metalv1alpha1.Server
	// Reach, when set, reaches the box instead of the server's system (a BMC's own firmware).
	Reach func(w *Work) error
	// Name says what the work acts on, for messages ("server r1-s4", "BMC r1-bmc").
	Name   string
	Rec    record.Record
	HasRec bool
	Maint  *maintenancev1alpha1.ServerMaintenance

	Conn  bmc.BMC
	SysID string
	Sys   *bmc.SystemStatus

	Waiting  string // why the work waits (its maintenance)
	Problem  error  // what is in the way
	Reason   string // the problem's reason
	Conflict string // the maintenance named is another server's
}

// Actor holds what the per-server reconcilers share: events, options, the clock.
type Actor struct {
	Recorder events.EventRecorder
	Options  Options
	// Now is the clock (tests move it).
	Now func() time.Time
}

// Clock is the time now, by Now when a test set it.
func (a *Actor) Clock() time.Time {
	if a.Now == nil {
		return time.Now()
	}
	return a.Now()
}

// Read reads the server and the maintenance named.
func (a *Actor) Read(ctx context.Context, w *Work) (lifecycle.Result, error) {
	w.Rec, w.HasRec = record.Parse(w.Self.GetAnnotations()[record.Annotation])
	if w.ServerName == "" {
		w.Problem, w.Reason = errors.New("spec.serverRef names no server"), systemv1alpha1.ReasonServerNotFound
		return a.targetGone(ctx, w)
	}
	s := &metalv1alpha1.Server{}
	if err := w.C.Get(ctx, client.ObjectKey{Name: w.ServerName}, s); err != nil {
		if apierrors.IsNotFound(err) {
			w.Problem, w.Reason = fmt.Errorf("server %s not found", w.ServerName), systemv1alpha1.ReasonServerNotFound
			return a.targetGone(ctx, w)
		}
		return lifecycle.Result{}, fmt.Errorf("reading server %s: %w", w.ServerName, err)
	}
	w.Server = s
	if ref := *w.MaintRef; ref != nil {
		m := &maintenancev1alpha1.ServerMaintenance{}
		err := w.C.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, m)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return lifecycle.Result{}, fmt.Errorf("reading ServerMaintenance %s/%s: %w", ref.Namespace, ref.Name, err)
		default:
			w.Maint = m
		}
	}
	return lifecycle.Continue(), nil
}

// Record writes the record: the pass's one write.
func (a *Actor) Record(ctx context.Context, w *Work, rec record.Record) (lifecycle.Result, error) {
	w.Rec, w.HasRec = rec, true
	return lifecycle.Wrote("record " + string(rec.Phase)), lifecycle.PatchMetadata(ctx, w.C, w.Self, func(o client.Object) {
		lifecycle.SetAnnotation(o, record.Annotation, rec.String())
	})
}

// Maintain makes sure the server is in the work's maintenance (name is the one metalhub makes
// when spec.serverMaintenanceRef names none); Continue once it is.
func (a *Actor) Maintain(ctx context.Context, w *Work, name, reason string) (lifecycle.Result, error) {
	held, err := holdMaintenance(ctx, w.C, w.Self, w.MaintRef, w.Maint, w.Server, name, a.Options.MaintenanceNamespace, w.Policy, reason)
	switch {
	case err != nil:
		return lifecycle.Result{}, err
	case held.created:
		ref := *w.MaintRef
		a.Recorder.Eventf(w.Self, nil, corev1.EventTypeNormal, "MaintenanceRequested", "Maintain", "ServerMaintenance %s/%s requested for server %s: %s",
			ref.Namespace, ref.Name, w.Server.Name, reason)
		return lifecycle.Done(), nil // Owns brings the next pass
	case held.wrote != "":
		return lifecycle.Wrote(held.wrote), nil
	case held.conflict != "":
		w.Conflict = held.conflict
		return lifecycle.RequeueAfter(a.Options.RetryAfter, "maintenance conflict"), nil
	case !held.held:
		w.Waiting = held.waiting
		return lifecycle.Done(), nil // the server's entering it brings the next pass
	}
	return lifecycle.Continue(), nil
}

// Target names what the work acts on.
func (w *Work) Target() string {
	if w.Name != "" {
		return w.Name
	}
	return "server " + w.ServerName
}

// Connect reaches the server's box, proven to be it, and reads its system (or what reach reads).
func (a *Actor) Connect(w *Work) error {
	if w.Conn != nil {
		return nil
	}
	if w.Reach != nil {
		return w.Reach(w)
	}
	conn, sysID, err := bmcaccess.ServerBMC(w.BMCContext, w.C, a.Options.Pool, w.Server)
	if err != nil {
		return err
	}
	sys, err := conn.System(w.BMCContext, sysID)
	if err != nil {
		return err
	}
	w.Conn, w.SysID, w.Sys = conn, sysID, sys
	return nil
}

// RefuseSecretRef reports a Secret reference the spec must change (SecretRefNotAllowed): the
// condition says it, a Warning event too, and nothing retries: the spec's change brings the
// next pass.
func (a *Actor) RefuseSecretRef(w *Work, err error) (lifecycle.Result, error) {
	w.Problem, w.Reason = err, systemv1alpha1.ReasonSecretRefNotAllowed
	a.Recorder.Eventf(w.Self, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonSecretRefNotAllowed, "ReadSecret", "%v", err)
	return lifecycle.Done(), nil
}

// Retried: the problem the pass reports goes away by itself (a BMC, a missing object), so the
// pass looks again; one only the spec can fix does not.
func (w *Work) Retried() bool {
	return w.Problem != nil && w.Reason != systemv1alpha1.ReasonSecretRefNotAllowed
}

// BMCFailed reports a BMC that failed and looks again later; nothing waits on it.
func (a *Actor) BMCFailed(w *Work, err error) (lifecycle.Result, error) {
	w.Problem, w.Reason = err, systemv1alpha1.ReasonBMCUnavailable
	after := a.Options.RetryAfter
	if at, ok := bmc.RetryAt(err); ok && time.Until(at) > after {
		after = time.Until(at)
	}
	return lifecycle.RequeueAfter(after, "BMC failed"), nil
}

// Reboot gets the restart that installs what is staged, exactly once: it is asked of the Server
// through its operation annotation, named by the record's token, and the Server reports how that
// request ended (intent.ResultAnnotation). A pass that finds the request pending waits;
// one that finds neither request nor result asks (the ask was lost). Done or uncertain, the
// Record goes to verify, keeping which; refused, refusedFn decides (why says why). A Server being
// deleted carries out no operation and answers none: its restart counts as refused, asked or
// not, so the work ends instead of waiting forever (the image stays staged). Before the first ask, the
// system's LastResetTime and power are recorded: what later tells a restart of unknown outcome
// that never happened from one that did. A settings-only server's restart is its owner's: none
// is asked, and verify waits for it (awaitOwner).
func (a *Actor) Reboot(ctx context.Context, w *Work, what string, refusedFn func(why string) (lifecycle.Result, error)) (lifecycle.Result, error) {
	token := w.Rec.Token(string(w.Self.GetUID()))
	outcome, pending := OperationState(w.Server.Annotations, token)
	if outcome == "" && !w.Server.DeletionTimestamp.IsZero() {
		return refusedFn(fmt.Sprintf("server %s is being deleted and restarts nothing: the image stays staged until its next restart", w.Server.Name))
	}
	switch {
	case outcome == intent.ResultDone || outcome == intent.ResultUncertain:
		next := w.Rec
		next.Phase, next.At, next.Restart = record.PhaseVerify, a.Clock().Unix(), restartDone
		next.ResetAt = 0 // what was read before the ask stays, for rebootAgain
		if outcome == intent.ResultUncertain {
			next.Restart = restartUncertain
		}
		return a.Record(ctx, w, next)
	}
	only, whose, err := claimable.SettingsOnly(ctx, w.C, w.Server)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if only {
		return a.awaitOwner(ctx, w, what, whose)
	}
	switch {
	case outcome != "":
		return refusedFn("the server's restart was refused")
	case pending:
		return lifecycle.Done(), nil // the Server's report brings the next pass
	}
	if err := a.Connect(w); err != nil {
		return a.BMCFailed(w, err)
	}
	if w.Rec.ResetAt != w.Rec.At {
		next := w.Rec
		next.ResetAt, next.ResetBefore, next.PowerBefore = w.Rec.At, w.Sys.LastResetTime, string(w.Sys.PowerState)
		if next.ResetBefore == "" {
			next.ResetBefore = noResetTime
		}
		return a.Record(ctx, w, next)
	}
	op := metalv1alpha1.OperationHardRestartServer
	if w.Sys.PowerState == bmc.PowerStateOff {
		op = metalv1alpha1.OperationForceOnServer
	}
	return a.AskOperation(ctx, w, w.Server, op, token, what)
}

// Restart outcomes kept in the record, and the LastResetTime of a system that reports none.
const (
	restartDone      = "done"
	restartUncertain = "uncertain"
	// restartOwner: the server is settings-only; its owner restarts it, whenever they do.
	restartOwner = "owner"
	noResetTime  = "-"
)

// awaitOwner is Reboot on a settings-only server (metalv1alpha1.SettingsOnlyAnnotation): its
// restart is its owner's, so none is asked. The record goes to verify at once, marked as the
// owner's restart; verify reads the result as it does after a restart of ours and waits, without
// a timeout, until the owner's restart brings it (AwaitingOwnerReboot). What is staged stays
// staged meanwhile: settings pending in the Bios settings object, an image the BMC holds for the
// next reset.
func (a *Actor) awaitOwner(ctx context.Context, w *Work, what, whose string) (lifecycle.Result, error) {
	next := w.Rec
	next.Phase, next.At, next.Restart, next.ResetAt = record.PhaseVerify, a.Clock().Unix(), restartOwner, 0
	a.Recorder.Eventf(w.Self, nil, corev1.EventTypeNormal, systemv1alpha1.ReasonAwaitingOwnerReboot, "Restart",
		"server %s is settings-only (marked on %s): nothing is restarted to %s; it takes effect at the owner's next restart", w.Server.Name, whose, what)
	return a.Record(ctx, w, next)
}

// AwaitingOwner reports a step whose restart is the owner's (a settings-only server) and whose
// result does not show yet: verify waits for it, and status says so (AwaitingOwnerReboot).
func (w *Work) AwaitingOwner() bool {
	return w.HasRec && w.Rec.Phase == record.PhaseVerify && w.Rec.Restart == restartOwner
}

// RebootAgain decides, in verify, about a step whose result does not show. A restart the Server
// carried out counts as done: what does not show after it fails the step with what was read, and
// the tenant's box is not restarted again. Only a restart whose outcome the Server could not tell
// is asked again, once, and only when the system says it did not happen (its LastResetTime has
// not moved, or it is still off after it was asked to come on). ok false: neither, keep waiting
// (late false) or fail (late true).
func (a *Actor) RebootAgain(ctx context.Context, w *Work, what string) (res lifecycle.Result, err error, ok, late bool) {
	if w.Rec.Restart == restartOwner {
		// The owner restarts when they choose: neither asked again nor timed out.
		return lifecycle.Result{}, nil, false, false
	}
	elapsed := a.Clock().Sub(w.Rec.AtTime())
	late = elapsed >= a.Options.VerifyTimeout
	if w.Rec.Restart != restartUncertain || w.Rec.Rerequested >= maxRerequests || elapsed < a.Options.VerifyTimeout/4 {
		return lifecycle.Result{}, nil, false, late
	}
	evidence := restartMissed(w.Rec, w.Sys)
	if evidence == "" {
		return lifecycle.Result{}, nil, false, late
	}
	next := w.Rec
	next.Phase, next.At, next.Rerequested = record.PhaseReboot, a.Clock().Unix(), w.Rec.Rerequested+1
	next.Restart, next.ResetAt, next.ResetBefore, next.PowerBefore = "", 0, "", ""
	a.Recorder.Eventf(w.Self, nil, corev1.EventTypeWarning, "RebootAgain", "Restart", "server %s: %s, and the restart's outcome was unknown while %s: asking for it again", w.Server.Name, what, evidence)
	res, err = a.Record(ctx, w, next)
	return res, err, true, late
}

// restartMissed says why the system shows that the restart recorded in rec did not happen ("":
// it does not show that, or cannot tell).
func restartMissed(rec record.Record, sys *bmc.SystemStatus) string {
	switch {
	case rec.ResetBefore != "" && rec.ResetBefore != noResetTime && sys.LastResetTime == rec.ResetBefore:
		return "its LastResetTime has not moved since the restart was asked"
	case rec.PowerBefore == string(bmc.PowerStateOff) && sys.PowerState == bmc.PowerStateOff:
		return "it is still off"
	}
	return ""
}

// maxRerequests bounds the restarts asked for again in one step: a restart is repeated only when
// it certainly did not happen.
const maxRerequests = 1

// OperationState reads what the Server says of the request named token: its outcome once it is
// over, or that it is still pending (asked, or being carried out).
func OperationState(annotations map[string]string, token string) (outcome string, pending bool) {
	for _, res := range strings.Split(annotations[intent.ResultAnnotation], ",") {
		if tok, out, ok := strings.Cut(strings.TrimSpace(res), " "); ok && tok == token {
			return out, false
		}
	}
	if annotations[intent.RequesterAnnotation] == token {
		return "", true
	}
	// The requester's token is the intent's last field: matched whole, never as a prefix.
	return "", strings.HasSuffix(annotations[intent.Annotation], " by="+token)
}

// AskOperation asks o (a Server or a BMC) for op, named token, unless another operation is
// pending there; Done either way: o's update brings the next pass.
func (a *Actor) AskOperation(ctx context.Context, w *Work, o client.Object, op, token, why string) (lifecycle.Result, error) {
	ann := o.GetAnnotations()
	if _, busy := ann[metalv1alpha1.OperationAnnotation]; busy || ann[intent.Annotation] != "" {
		// Another operation first: one at a time.
		return lifecycle.RequeueAfter(a.Options.Poll, "busy with another operation"), nil
	}
	if err := lifecycle.PatchMetadata(ctx, w.C, o, func(o client.Object) {
		lifecycle.SetAnnotation(o, metalv1alpha1.OperationAnnotation, op)
		lifecycle.SetAnnotation(o, intent.RequesterAnnotation, token)
	}); err != nil {
		return lifecycle.Result{}, fmt.Errorf("asking %s for %s: %w", o.GetName(), op, err)
	}
	a.Recorder.Eventf(w.Self, nil, corev1.EventTypeNormal, "RebootRequested", "Restart", "%s asked for %s to %s", w.Target(), op, why)
	return lifecycle.Done(), nil
}

// BMCWork is what the BMC kinds read of their BMC: the object, its servers (by name) and the
// maintenances the object names.
type BMCWork struct {
	BMC     *metalv1alpha1.BMC
	Servers []metalv1alpha1.Server
	Maints  map[string]*maintenancev1alpha1.ServerMaintenance
}

// ReadBMC reads the record, the BMC ref names, its servers and the maintenances refs name.
func (a *Actor) ReadBMC(ctx context.Context, w *Work, ref *corev1.LocalObjectReference, refs []metalv1alpha1.ObjectReference) (*BMCWork, lifecycle.Result, error) {
	w.Rec, w.HasRec = record.Parse(w.Self.GetAnnotations()[record.Annotation])
	if ref == nil || ref.Name == "" {
		w.Problem, w.Reason = errors.New("spec.bmcRef names no BMC"), systemv1alpha1.ReasonServerNotFound
		res, err := a.targetGone(ctx, w)
		return nil, res, err
	}
	w.Name = "BMC " + ref.Name
	b := &metalv1alpha1.BMC{}
	if err := w.C.Get(ctx, client.ObjectKey{Name: ref.Name}, b); err != nil {
		if apierrors.IsNotFound(err) {
			w.Problem, w.Reason = fmt.Errorf("BMC %s not found", ref.Name), systemv1alpha1.ReasonServerNotFound
			res, err := a.targetGone(ctx, w)
			return nil, res, err
		}
		return nil, lifecycle.Result{}, fmt.Errorf("reading BMC %s: %w", ref.Name, err)
	}
	t := &BMCWork{BMC: b, Maints: map[string]*maintenancev1alpha1.ServerMaintenance{}}
	servers := &metalv1alpha1.ServerList{}
	if err := w.C.List(ctx, servers, client.MatchingFields{index.ServerBMC: b.Name}); err != nil {
		return nil, lifecycle.Result{}, fmt.Errorf("listing the servers of BMC %s: %w", b.Name, err)
	}
	t.Servers = servers.Items
	slices.SortFunc(t.Servers, func(a, b metalv1alpha1.Server) int { return strings.Compare(a.Name, b.Name) })
	for _, mr := range refs {
		m := &maintenancev1alpha1.ServerMaintenance{}
		err := w.C.Get(ctx, client.ObjectKey{Namespace: mr.Namespace, Name: mr.Name}, m)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, lifecycle.Result{}, fmt.Errorf("reading ServerMaintenance %s/%s: %w", mr.Namespace, mr.Name, err)
		default:
			t.Maints[m.Name] = m
		}
	}
	return t, lifecycle.Continue(), nil
}

// StartOver drops a record made for another spec (for is what the spec asks now) when its phase
// is one of those that may be dropped: nothing sent yet, or ended. A flash or restart under way
// is seen through first.
func (a *Actor) StartOver(ctx context.Context, w *Work, want string, droppable ...record.Phase) (lifecycle.Result, error) {
	if !w.HasRec || w.Rec.For == want || !slices.Contains(droppable, w.Rec.Phase) {
		return lifecycle.Continue(), nil
	}
	a.Recorder.Eventf(w.Self, nil, corev1.EventTypeNormal, "SpecChanged", "Upgrade", "the spec changed (was for %s): starting over", w.Rec.For)
	return lifecycle.Wrote("record cleared"), lifecycle.PatchMetadata(ctx, w.C, w.Self, func(o client.Object) {
		lifecycle.RemoveAnnotation(o, record.Annotation)
	})
}

package metal

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// OperationIntentAnnotation records a one-off operation (a user's operation annotation, or the
// reboot into a maintenance's boot configuration) from before it is issued until it has been
// reported: "<operation>/<phase>@<unix seconds>", then optional " key=value" fields. A restart
// cannot be observed as a power state afterwards, so the intent, not the hardware, says whether
// it is owed: it is written (with an optimistic lock) before the action, the action follows only
// once that write won, and the next pass reports and clears it. A crash or a lost write never
// issues it twice.
//
// Where the hardware does say when it last reset (a BMC's Manager.LastResetTime, a system's
// ComputerSystem.LastResetTime), the intent keeps what it said before the issue ("last-reset",
// and a server's power state, "power"), and an issue whose outcome is unknown (a timeout, a
// 5xx, a crash while issuing) is settled by looking: moved means carried out, unchanged long
// after the issue means it never arrived and is owed again.
const OperationIntentAnnotation = "lifecycle.metalhub.io/operation"

// OperationRequesterAnnotation, set by another controller in the same write as the operation
// annotation, names that request (a token without spaces). The intent carries it, and when the
// operation is over the Server says how it ended in OperationResultAnnotation, "<token>
// <outcome>", so that the requester learns it exactly once, whatever crashed in between.
const OperationRequesterAnnotation = "lifecycle.metalhub.io/operation-requester"

// OperationResultAnnotation is "<token> <outcome>" for the last operations requesters named,
// comma-separated, newest last.
const OperationResultAnnotation = "lifecycle.metalhub.io/operation-result"

// Outcomes in OperationResultAnnotation.
const (
	// OperationDone: the BMC carried it out.
	OperationDone = "done"
	// OperationRefused: certainly not carried out (refused, or not an operation of the server).
	OperationRefused = "refused"
	// OperationUncertain: it may or may not have been carried out; it was not repeated.
	OperationUncertain = "uncertain"
)

// Phases of an operation intent.
const (
	// intentOwed: recorded, not issued yet (or refused by the BMC and to be issued again).
	intentOwed = "owed"
	// intentIssuing: the write that claimed the issue won; the action followed in that pass.
	intentIssuing = "issuing"
	// intentChecking: issued with an unknown outcome; the hardware's last-reset time decides.
	intentChecking = "checking"
)

type opIntent struct {
	op, phase string
	// at is when the operation was first owed; it names the intent across its phases.
	at time.Time
	// sent is when the issue was claimed (zero before).
	sent time.Time
	// lastReset is what the hardware said its last reset was just before the issue ("" when
	// it does not say).
	lastReset string
	// power is the system's power state just before the issue (servers only; "" unknown).
	power string
	// by is the requester's token (OperationRequesterAnnotation), if another controller asked.
	by string
}

// parseOpIntent reads an intent of one of the operations known says it carries out.
func parseOpIntent(v string, known func(op string) bool) (opIntent, bool) {
	head, fields, _ := strings.Cut(v, " ")
	rest, at, ok := strings.Cut(head, "@")
	if !ok {
		return opIntent{}, false
	}
	op, phase, ok := strings.Cut(rest, "/")
	secs, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || (phase != intentOwed && phase != intentIssuing && phase != intentChecking) || !known(op) {
		return opIntent{}, false
	}
	i := opIntent{op: op, phase: phase, at: time.Unix(secs, 0)}
	for _, f := range strings.Fields(fields) {
		k, val, _ := strings.Cut(f, "=")
		switch k {
		case "sent":
			if n, err := strconv.ParseInt(val, 10, 64); err == nil {
				i.sent = time.Unix(n, 0)
			}
		case "last-reset":
			i.lastReset = val
		case "power":
			i.power = val
		case "by":
			i.by = val
		}
	}
	return i, true
}

func (i opIntent) String() string {
	s := i.op + "/" + i.phase + "@" + strconv.FormatInt(i.at.Unix(), 10)
	if !i.sent.IsZero() {
		s += " sent=" + strconv.FormatInt(i.sent.Unix(), 10)
	}
	if i.lastReset != "" {
		s += " last-reset=" + i.lastReset
	}
	if i.power != "" {
		s += " power=" + i.power
	}
	if i.by != "" {
		s += " by=" + i.by
	}
	return s
}

// with returns the intent in another phase, the rest kept.
func (i opIntent) with(phase string) opIntent { i.phase = phase; return i }

// opOutcomes holds what issuing an operation gave, in this process's memory, until the pass
// after reports it: only the process that issued it knows.
type opOutcomes struct{ m sync.Map }

type opOutcome struct{ err error }

func outcomeKey(uid types.UID, i opIntent) string {
	return string(uid) + "/" + i.op + "@" + strconv.FormatInt(i.at.Unix(), 10)
}

func (o *opOutcomes) issued(uid types.UID, i opIntent, err error) {
	o.m.Store(outcomeKey(uid, i), opOutcome{err: err})
}

// opReport is what the pass after an issue says and writes: next is the intent annotation's new
// value ("" removes it), retry asks for a later look at an operation still owed.
type opReport struct {
	eventType, reason, msg, next string
	retry                        bool
	// uncertain: the action may or may not have happened, for cause.
	uncertain bool
	cause     string
}

// report decides about an intent whose issue a previous pass claimed, and forgets it. Another
// process than the issuer (after a crash, a restart, a leader handover) cannot know whether the
// action reached the BMC, and does not repeat it.
func (o *opOutcomes) report(uid types.UID, i opIntent) opReport {
	v, known := o.m.LoadAndDelete(outcomeKey(uid, i))
	if !known {
		const cause = "the manager stopped while issuing it"
		return opReport{eventType: corev1.EventTypeWarning, reason: metalv1alpha1.ReasonOperationUncertain, uncertain: true, cause: cause,
			msg: fmt.Sprintf("operation %s may not have reached the BMC (%s); not repeated: check and ask again if needed", i.op, cause)}
	}
	err := v.(opOutcome).err
	switch outcomeOf(err) {
	case actionDone:
		return opReport{eventType: corev1.EventTypeNormal, reason: metalv1alpha1.ReasonOperation, msg: fmt.Sprintf("operation %s carried out", i.op)}
	case actionNotDone:
		return opReport{eventType: corev1.EventTypeWarning, reason: metalv1alpha1.ReasonOperationFailed, retry: true,
			msg:  fmt.Sprintf("operation %s refused, will retry: %v", i.op, err),
			next: opIntent{op: i.op, phase: intentOwed, at: i.at, by: i.by}.String()}
	case actionRefused:
		return opReport{eventType: corev1.EventTypeWarning, reason: metalv1alpha1.ReasonOperationFailed,
			msg: fmt.Sprintf("operation %s refused by the BMC, not carried out; not repeated: %v", i.op, err)}
	default:
		cause := err.Error()
		return opReport{eventType: corev1.EventTypeWarning, reason: metalv1alpha1.ReasonOperationUncertain, uncertain: true, cause: cause,
			msg: fmt.Sprintf("operation %s may not have been carried out (%s); not repeated: check and ask again if needed", i.op, cause)}
	}
}

// setIntent sets the intent annotation, or removes it for "".
func setIntent(o client.Object, v string) {
	if v == "" {
		lifecycle.RemoveAnnotation(o, OperationIntentAnnotation)
		return
	}
	lifecycle.SetAnnotation(o, OperationIntentAnnotation, v)
}

// endIntent writes what a report decided about intent i: the next intent, or, when it is over
// and a requester named it, the outcome for that requester (in the same write).
func endIntent(o client.Object, i opIntent, rep opReport) {
	setIntent(o, rep.next)
	if rep.next != "" || i.by == "" {
		return
	}
	outcome := OperationDone
	switch rep.reason {
	case metalv1alpha1.ReasonOperation:
	case metalv1alpha1.ReasonOperationUncertain:
		outcome = OperationUncertain
	default:
		outcome = OperationRefused
	}
	lifecycle.SetAnnotation(o, OperationResultAnnotation, appendResult(o.GetAnnotations()[OperationResultAnnotation], i.by+" "+outcome))
}

// keptResults is how many requesters' outcomes a Server keeps: two requesters finishing one
// after the other must each find theirs.
const keptResults = 4

// appendResult adds "<token> <outcome>" to the comma-separated results, keeping the last few.
func appendResult(results, res string) string {
	var out []string
	for _, r := range strings.Split(results, ",") {
		if r = strings.TrimSpace(r); r != "" {
			out = append(out, r)
		}
	}
	out = append(out, res)
	if len(out) > keptResults {
		out = out[len(out)-keptResults:]
	}
	return strings.Join(out, ",")
}

// actionOutcome is what an action's answer says about whether it was carried out.
type actionOutcome int

const (
	// actionDone: the BMC accepted it.
	actionDone actionOutcome = iota
	// actionNotDone: certainly not carried out, and worth asking again: the request was never
	// sent, or the BMC refused it for now (401/403, 409, 412, 429, ...).
	actionNotDone
	// actionRefused: certainly not carried out, and asking again gets the same answer (400,
	// 404, 405, 410, or a reset type the system lacks, found before sending).
	actionRefused
	// actionUncertain: it may have been carried out.
	actionUncertain
)

// outcomeOf classifies a failed action. Only a request never sent, or a 4xx answer, says for
// certain that nothing happened: a 4xx is the BMC's own refusal. A 5xx does not: a BMC may
// fail after acting (the reset under way takes its web server down), and a proxy or load
// balancer in front of it answers 502/503/504 for a request it forwarded whose answer it lost.
// A 503 from the BMC itself usually means it did not act, but the client cannot tell it from
// a proxy's. So every 5xx after the request was sent, like a timeout or a dropped connection,
// leaves the outcome unknown, for the hardware's own record (LastResetTime) to settle.
func outcomeOf(err error) actionOutcome {
	if err == nil {
		return actionDone
	}
	if errors.Is(err, bmc.ErrNotSent) {
		return actionNotDone
	}
	var be *bmc.Error
	if !errors.As(err, &be) {
		return actionUncertain
	}
	switch code := be.StatusCode; {
	case code >= 500:
		return actionUncertain
	case code >= 400 && (be.Reason == bmc.ReasonUnsupported || be.Reason == bmc.ReasonNotFound):
		return actionRefused
	case code >= 400:
		return actionNotDone
	case code == 0 && (be.Reason == bmc.ReasonUnsupported || be.Reason == bmc.ReasonInvalidConfig || be.Reason == bmc.ReasonNotFound):
		// Found out before any request (no such reset type, no Managers collection).
		return actionRefused
	}
	return actionUncertain
}

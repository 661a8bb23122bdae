// Package intent holds the durable record of a one-off operation on a BMC or a server (its
// intent annotation), from before the action is sent until it has been reported, and the reading
// of an action's answer (done, not done, refused, uncertain). The Server and BMC controllers
// carry operations out through it; other controllers ask for one and read its result. It knows
// no controller.
package intent

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

// Annotation records a one-off operation (a user's operation annotation, or the
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
const Annotation = "lifecycle.metalhub.io/operation"

// RequesterAnnotation, set by another controller in the same write as the operation
// annotation, names that request (a token without spaces). The intent carries it, and when the
// operation is over the Server says how it ended in ResultAnnotation, "<token>
// <outcome>", so that the requester learns it exactly once, whatever crashed in between.
const RequesterAnnotation = "lifecycle.metalhub.io/operation-requester"

// ResultAnnotation is "<token> <outcome>" for the last operations requesters named,
// comma-separated, newest last.
const ResultAnnotation = "lifecycle.metalhub.io/operation-result"

// Outcomes in ResultAnnotation.
const (
	// ResultDone: the BMC carried it out.
	ResultDone = "done"
	// ResultRefused: certainly not carried out (refused, or not an operation of the server).
	ResultRefused = "refused"
	// ResultUncertain: it may or may not have been carried out; it was not repeated.
	ResultUncertain = "uncertain"
)

// Phases of an operation intent.
const (
	// Owed: recorded, not issued yet (or refused by the BMC and to be issued again).
	Owed = "owed"
	// Issuing: the write that claimed the issue won; the action followed in that pass.
	Issuing = "issuing"
	// Checking: issued with an unknown outcome; the hardware's last-reset time decides.
	Checking = "checking"
)

// Intent is the parsed value of Annotation: an operation and its phase.
type Intent struct {
	Op, Phase string
	// At is when the operation was first owed; it names the intent across its phases.
	At time.Time
	// Sent is when the issue was claimed (zero before).
	Sent time.Time
	// LastReset is what the hardware said its last reset was just before the issue ("" when
	// it does not say).
	LastReset string
	// Power is the system's Power state just before the issue (servers only; "" unknown).
	Power string
	// By is the requester's token (RequesterAnnotation), if another controller asked.
	By string
}

// Parse reads an intent of one of the operations known says it carries out.
func Parse(v string, known func(op string) bool) (Intent, bool) {
	head, fields, _ := strings.Cut(v, " ")
	rest, at, ok := strings.Cut(head, "@")
	if !ok {
		return Intent{}, false
	}
	op, phase, ok := strings.Cut(rest, "/")
	secs, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || (phase != Owed && phase != Issuing && phase != Checking) || !known(op) {
		return Intent{}, false
	}
	i := Intent{Op: op, Phase: phase, At: time.Unix(secs, 0)}
	for _, f := range strings.Fields(fields) {
		k, val, _ := strings.Cut(f, "=")
		switch k {
		case "sent":
			if n, err := strconv.ParseInt(val, 10, 64); err == nil {
				i.Sent = time.Unix(n, 0)
			}
		case "last-reset":
			i.LastReset = val
		case "power":
			i.Power = val
		case "by":
			i.By = val
		}
	}
	return i, true
}

func (i Intent) String() string {
	s := i.Op + "/" + i.Phase + "@" + strconv.FormatInt(i.At.Unix(), 10)
	if !i.Sent.IsZero() {
		s += " sent=" + strconv.FormatInt(i.Sent.Unix(), 10)
	}
	if i.LastReset != "" {
		s += " last-reset=" + i.LastReset
	}
	if i.Power != "" {
		s += " power=" + i.Power
	}
	if i.By != "" {
		s += " by=" + i.By
	}
	return s
}

// With returns the intent in another phase, the rest kept.
func (i Intent) With(phase string) Intent { i.Phase = phase; return i }

// Outcomes holds what issuing an operation gave, in this process's memory, until the pass
// after reports it: only the process that issued it knows.
type Outcomes struct{ m sync.Map }

type opOutcome struct{ err error }

func outcomeKey(uid types.UID, i Intent) string {
	return string(uid) + "/" + i.Op + "@" + strconv.FormatInt(i.At.Unix(), 10)
}

// Issued keeps what issuing i on the object uid gave (nil: accepted), for the next pass's Report.
func (o *Outcomes) Issued(uid types.UID, i Intent, err error) {
	o.m.Store(outcomeKey(uid, i), opOutcome{err: err})
}

// Report is what the pass after an issue says and writes: Next is the intent annotation's new
// value ("" removes it), Retry asks for a later look at an operation still owed.
type Report struct {
	EventType, Reason, Msg, Next string
	Retry                        bool
	// Uncertain: the action may or may not have happened, for Cause.
	Uncertain bool
	Cause     string
}

// Report decides about an intent whose issue a previous pass claimed, and forgets it. Another
// process than the issuer (after a crash, a restart, a leader handover) cannot know whether the
// action reached the BMC, and does not repeat it.
func (o *Outcomes) Report(uid types.UID, i Intent) Report {
	v, known := o.m.LoadAndDelete(outcomeKey(uid, i))
	if !known {
		const cause = "the manager stopped while issuing it"
		return Report{EventType: corev1.EventTypeWarning, Reason: metalv1alpha1.ReasonOperationUncertain, Uncertain: true, Cause: cause,
			Msg: fmt.Sprintf("operation %s may not have reached the BMC (%s); not repeated: check and ask again if needed", i.Op, cause)}
	}
	err := v.(opOutcome).err
	switch OutcomeOf(err) {
	case ActionDone:
		return Report{EventType: corev1.EventTypeNormal, Reason: metalv1alpha1.ReasonOperation, Msg: fmt.Sprintf("operation %s carried out", i.Op)}
	case ActionNotDone:
		return Report{EventType: corev1.EventTypeWarning, Reason: metalv1alpha1.ReasonOperationFailed, Retry: true,
			Msg:  fmt.Sprintf("operation %s refused, will retry: %v", i.Op, err),
			Next: Intent{Op: i.Op, Phase: Owed, At: i.At, By: i.By}.String()}
	case ActionRefused:
		return Report{EventType: corev1.EventTypeWarning, Reason: metalv1alpha1.ReasonOperationFailed,
			Msg: fmt.Sprintf("operation %s refused by the BMC, not carried out; not repeated: %v", i.Op, err)}
	default:
		cause := err.Error()
		return Report{EventType: corev1.EventTypeWarning, Reason: metalv1alpha1.ReasonOperationUncertain, Uncertain: true, Cause: cause,
			Msg: fmt.Sprintf("operation %s may not have been carried out (%s); not repeated: check and ask again if needed", i.Op, cause)}
	}
}

// Set sets the intent annotation, or removes it for "".
func Set(o client.Object, v string) {
	if v == "" {
		lifecycle.RemoveAnnotation(o, Annotation)
		return
	}
	lifecycle.SetAnnotation(o, Annotation, v)
}

// End writes what a report decided about intent i: the next intent, or, when it is over
// and a requester named it, the outcome for that requester (in the same write).
func End(o client.Object, i Intent, rep Report) {
	Set(o, rep.Next)
	if rep.Next != "" || i.By == "" {
		return
	}
	outcome := ResultDone
	switch rep.Reason {
	case metalv1alpha1.ReasonOperation:
	case metalv1alpha1.ReasonOperationUncertain:
		outcome = ResultUncertain
	default:
		outcome = ResultRefused
	}
	lifecycle.SetAnnotation(o, ResultAnnotation, AppendResult(o.GetAnnotations()[ResultAnnotation], i.By+" "+outcome))
}

// keptResults is how many requesters' outcomes a Server keeps: two requesters finishing one
// after the other must each find theirs.
const keptResults = 4

// AppendResult adds "<token> <outcome>" to the comma-separated results, keeping the last few.
func AppendResult(results, res string) string {
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

// Outcome is what an action's answer says about whether it was carried out.
type Outcome int

const (
	// ActionDone: the BMC accepted it.
	ActionDone Outcome = iota
	// ActionNotDone: certainly not carried out, and worth asking again: the request was never
	// sent, or the BMC refused it for now (401/403, 409, 412, 429, ...).
	ActionNotDone
	// ActionRefused: certainly not carried out, and asking again gets the same answer (400,
	// 404, 405, 410, or a reset type the system lacks, found before sending).
	ActionRefused
	// ActionUncertain: it may have been carried out.
	ActionUncertain
)

// OutcomeOf classifies a failed action. Only a request never sent, or a 4xx answer, says for
// certain that nothing happened: a 4xx is the BMC's own refusal. A 5xx does not: a BMC may
// fail after acting (the reset under way takes its web server down), and a proxy or load
// balancer in front of it answers 502/503/504 for a request it forwarded whose answer it lost.
// A 503 from the BMC itself usually means it did not act, but the client cannot tell it from
// a proxy's. So every 5xx after the request was sent, like a timeout or a dropped connection,
// leaves the outcome unknown, for the hardware's own record (LastResetTime) to settle.
func OutcomeOf(err error) Outcome {
	if err == nil {
		return ActionDone
	}
	if errors.Is(err, bmc.ErrNotSent) {
		return ActionNotDone
	}
	var be *bmc.Error
	if !errors.As(err, &be) {
		return ActionUncertain
	}
	switch code := be.StatusCode; {
	case code >= 500:
		return ActionUncertain
	case code >= 400 && (be.Reason == bmc.ReasonUnsupported || be.Reason == bmc.ReasonNotFound):
		return ActionRefused
	case code >= 400:
		return ActionNotDone
	case code == 0 && (be.Reason == bmc.ReasonUnsupported || be.Reason == bmc.ReasonInvalidConfig || be.Reason == bmc.ReasonNotFound):
		// Found out before any request (no such reset type, no Managers collection).
		return ActionRefused
	}
	return ActionUncertain
}

// Field keeps a value the intent annotation can carry as a field ("" for one it cannot).
func Field(v string) string {
	if strings.ContainsAny(v, " \t\r\n") {
		return ""
	}
	return v
}

// DefaultResetSettle is how long after an issue of unknown outcome a LastResetTime that did not
// move means the operation never arrived (the BMC and Server controllers' default).
const DefaultResetSettle = 30 * time.Second

package lifecycle

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SetCondition sets a condition with the generation it was computed for and reports whether
// anything changed. LastTransitionTime moves only when the status flips, so a pass that finds
// the same condition leaves the object alone.
func SetCondition(conds *[]metav1.Condition, generation int64, typ string, status metav1.ConditionStatus, reason, message string) bool {
	return meta.SetStatusCondition(conds, metav1.Condition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: generation,
	})
}

// Report is the last-success / last-error pair of the report fields (the Vidra design record's
// "last successful reconcile" and "last error"), held by pointer into a status.
type Report struct {
	LastSuccess **metav1.Time
	LastError   *string
}

// Failed records err and reports whether the status changed. The time is not touched: a
// failing pass retried with backoff must not write every time just to move a timestamp.
func (r Report) Failed(err error) bool {
	msg := err.Error()
	if *r.LastError == msg {
		return false
	}
	*r.LastError = msg
	return true
}

// Succeeded clears the last error and, when the pass did something (progressed) or there was no
// success on record, moves the last-success time to now. It reports whether the status changed.
// An idle pass that changed nothing reports false, so it writes nothing.
func (r Report) Succeeded(now time.Time, progressed bool) bool {
	changed := false
	if *r.LastError != "" {
		*r.LastError = ""
		changed = true
	}
	if progressed || changed || *r.LastSuccess == nil {
		t := metav1.NewTime(now.Truncate(time.Second))
		*r.LastSuccess = &t
		changed = true
	}
	return changed
}

package record

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
)

// Annotation holds where an upgrade stands, as JSON (see Record). It is the upgrade's
// bookkeeping: written before each step acts, read back by every pass, never derived from
// status, so a wiped status, a crash or a new leader resumes exactly where the last write left
// it and never starts a second flash.
const Annotation = "lifecycle.metalhub.io/firmware"

// Phase is a step of an upgrade.
type Phase string

const (
	// PhaseMaintenance: the work needs the server in maintenance; awaiting it.
	PhaseMaintenance Phase = "maintenance"
	// PhaseOwed: the flash of the step is owed, nothing sent.
	PhaseOwed Phase = "owed"
	// PhaseIssuing: the write that claimed the flash won; the request followed in that pass.
	// Only the issuing process knows the answer; another settles it from the BMC's tasks.
	PhaseIssuing Phase = "issuing"
	// PhaseTask: the BMC accepted the image; its task is followed.
	PhaseTask Phase = "task"
	// PhaseReboot: the image is staged; a restart is owed (requested through the Server's
	// operation annotation, named by the token).
	PhaseReboot Phase = "reboot"
	// PhaseVerify: restarted; the version is read back.
	PhaseVerify Phase = "verify"
	// PhaseCompleted and phaseFailed end the upgrade to record.For.
	PhaseCompleted Phase = "completed"
	PhaseFailed    Phase = "failed"
)

// Record is the upgrade's bookkeeping.
type Record struct {
	Phase Phase `json:"phase"`
	// For is the spec.version the upgrade is for: a record for another one is stale.
	For string `json:"for"`
	// Version and Image are the step under way (an intermediate version, or For).
	Version string `json:"version,omitempty"`
	Image   string `json:"image,omitempty"`
	// Attempt counts the attempts of this step (1 for the first).
	Attempt int32 `json:"attempt,omitempty"`
	// Failed counts failed attempts, over all steps.
	Failed int32 `json:"failed,omitempty"`
	// At is when the phase began (for issuing: when the flash was claimed).
	At int64 `json:"at,omitempty"`
	// Rerequested counts the step's restarts asked for again: one that may not have happened
	// (the Server could not tell) and did not install the image.
	Rerequested int32 `json:"rerequested,omitempty"`
	// Push: the flash was pushed (MultipartHttpPushUri), not fetched by the BMC.
	Push bool `json:"push,omitempty"`
	// Accepted: the BMC answered the flash with success but named no task; what it shows
	// (its task list, its firmware inventory) must say the flash is done before any restart.
	Accepted bool `json:"accepted,omitempty"`
	// Uncertain: the step's task was found by elimination (a task the list could not rule out,
	// e.g. one without a payload), not by its image: if the version does not show, the attempt
	// fails; nothing is flashed again on a guess.
	Uncertain bool `json:"uncertain,omitempty"`
	// Busy is when the BMC first answered the step's flash that it runs another update of the
	// same firmware (409, unix seconds): the step waits for that update to end, within
	// VerifyTimeout, instead of counting a failed attempt and handing back a box being flashed.
	Busy int64 `json:"busy,omitempty"`
	// ResetBefore and PowerBefore are what the system reported right before its restart was
	// asked (ResetBefore "-": it reports no LastResetTime): the evidence that a restart of
	// unknown outcome did not happen. ResetAt is the At of the reboot phase they were read for:
	// a later step's restart reads them afresh.
	ResetAt     int64  `json:"resetAt,omitempty"`
	ResetBefore string `json:"resetBefore,omitempty"`
	PowerBefore string `json:"powerBefore,omitempty"`
	// Restart is how the step's restart ended as the Server reported it: done or uncertain.
	Restart string `json:"restart,omitempty"`
	// Task is the task URI of the step's flash.
	Task string `json:"task,omitempty"`
	// Applied holds when each settings step was found in effect (unix seconds, by name).
	Applied map[string]int64 `json:"applied,omitempty"`
	// Message says why, for a failed attempt or the end.
	Message string `json:"message,omitempty"`
}

func (r Record) AtTime() time.Time { return time.Unix(r.At, 0) }

func (r Record) Terminal() bool { return r.Phase == PhaseCompleted || r.Phase == PhaseFailed }

// Token names the restart this record's reboot phase asks for: one per step, attempt and
// request (two steps can ask within one second).
func (r Record) Token(uid string) string {
	h := sha256.Sum256([]byte(r.Version))
	return fmt.Sprintf("%s.%s.%s.%d.%d", uid, time.Unix(r.At, 0).UTC().Format("20060102T150405"), hex.EncodeToString(h[:4]), r.Attempt, r.Rerequested)
}

func (r Record) String() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// Parse reads the annotation; ok is false when there is none or it does not parse (a
// record metalhub did not write is not acted on as if it were one).
func Parse(v string) (Record, bool) {
	if v == "" {
		return Record{}, false
	}
	var r Record
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return Record{}, false
	}
	switch r.Phase {
	case PhaseMaintenance, PhaseOwed, PhaseIssuing, PhaseTask, PhaseReboot, PhaseVerify, PhaseCompleted, PhaseFailed:
		return r, true
	}
	return Record{}, false
}

// Remaining is what is still to be flashed for spec, given the version the target reports: the
// steps of the upgrade path after the one it reports (all of them when it reports none), then
// spec.version. Already at spec.version: nothing, or spec.version again with force.
func Remaining(spec *systemv1alpha1.BIOSVersionTemplate, current string) []systemv1alpha1.VersionStep {
	steps := append(slices.Clone(spec.UpgradePath), systemv1alpha1.VersionStep{Version: spec.Version, Image: spec.Image})
	if current == spec.Version {
		if spec.UpdatePolicy == systemv1alpha1.UpdatePolicyForce {
			return steps[len(steps)-1:]
		}
		return nil
	}
	for i := len(steps) - 2; i >= 0; i-- {
		if steps[i].Version == current {
			return steps[i+1:]
		}
	}
	return steps
}

// MaxAttempts is the retry policy's bound, 1 by default (no retry: flashing again is a
// decision, not a reflex).
func MaxAttempts(p *systemv1alpha1.RetryPolicy) int32 {
	if p == nil || p.MaxAttempts == nil || *p.MaxAttempts < 1 {
		return 1
	}
	return *p.MaxAttempts
}

// State is where the object whose annotations these are stands, from its record alone:
// Pending, InProgress, Completed or Failed (the state metrics count).
func State(annotations map[string]string) string {
	rec, ok := Parse(annotations[Annotation])
	switch {
	case !ok, rec.Phase == PhaseMaintenance:
		return "Pending"
	case rec.Phase == PhaseCompleted:
		return "Completed"
	case rec.Phase == PhaseFailed:
		return "Failed"
	}
	return "InProgress"
}

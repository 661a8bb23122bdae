// Package serverstate holds the Server lifecycle's bookkeeping: the state kept in
// lifecycle.StateAnnotation (Store: read, derived after a restore, adopted from a migration), the
// annotations that record what is in flight beside it, and the status mirror of the state. Every
// metal controller that reads or moves a Server's state goes through it.
//
// It writes no object: it reads and sets the state on the Server it is given, and the caller
// writes it. It imports no controller package nor the assembly (hack/layers.sh).
package serverstate

import (
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// Bookkeeping annotations of the Server lifecycle, beside lifecycle.StateAnnotation. Like the
// state, they live in metadata so that a wiped status loses nothing.
const (
	// PowerAnnotation records the power action in flight: "<target>@<unix seconds>". It is
	// written in the same pass that issued the action, so a restart does not issue it again.
	PowerAnnotation = "lifecycle.metalhub.io/power"
	// BootOnceAnnotation records the discovery round the one-time PXE override was set for.
	BootOnceAnnotation = "lifecycle.metalhub.io/boot-once"
	// DiscoveryStartedAnnotation is when Discovery began (RFC 3339): the timeout runs from here.
	DiscoveryStartedAnnotation = "lifecycle.metalhub.io/discovery-started"
	// MaintenanceBootAnnotation records that the server was booted into its maintenance's boot
	// configuration (once per maintenance): "<namespace>/<name>/<uid>" of the maintenance, or
	// "adopted" for a server found in Maintenance that metalhub did not put there (see
	// server.MaintenanceBooted).
	MaintenanceBootAnnotation = "lifecycle.metalhub.io/maintenance-boot"
	// ClaimBootAnnotation records that the claimed server booted its boot configuration from
	// the network: the configuration's UID. With networkBoot FirstPowerOn, later power-ons
	// under the same configuration boot the disk.
	ClaimBootAnnotation = "lifecycle.metalhub.io/claim-boot"
	// MediaAnnotation records the image metalhub mounts in the server's virtual CD (boot method
	// VirtualMedia). It is written before the medium is inserted, so that whatever happens after
	// (a crash, a wiped status, the configuration deleted), the medium is known and ejected when
	// no boot needs it: when the server is Available, is released, or boots another way.
	MediaAnnotation = "lifecycle.metalhub.io/virtual-media"
	// MaintenanceLEDAnnotation records the locator LED a maintenance asked for while the server
	// is in it; once the maintenance is over the LED goes back to spec.indicatorLED, or Off.
	MaintenanceLEDAnnotation = "lifecycle.metalhub.io/maintenance-led"
	// PreviousStateAnnotation is the state to return to after Maintenance or Error.
	PreviousStateAnnotation = "lifecycle.metalhub.io/previous-state"
	// AdoptedErrorAnnotation marks an Error metalhub found rather than entered (no previous
	// state was recorded), with what the server was when found: "discovered" or
	// "undiscovered" (see server.ErrorExit). Read then, because our own inventory walk fills the
	// same status fields later.
	AdoptedErrorAnnotation = "lifecycle.metalhub.io/adopted-error"
	// CleaningAnnotation marks a server whose disks must be erased before any claim binds it
	// again: the policy its release is cleaned by, recorded in the write that reserved it (the
	// claim's narrowing included). It goes only in the write that takes the server from
	// Cleaning to Available after a verified cleaning record; until then no claim binds it
	// (claimable) and an Available server with it is sent to Cleaning.
	CleaningAnnotation = "lifecycle.metalhub.io/cleaning"
	// CleaningRoundAnnotation is the cleaning round the server was booted into:
	// "<round>@<unix seconds>", written with the boot. The timeout runs from there.
	CleaningRoundAnnotation = "lifecycle.metalhub.io/cleaning-round"
	// CleaningFailedAnnotation says which disk could not be sanitized or verified (or that no
	// report came): the server stays in Error until a retry, which cleans again.
	CleaningFailedAnnotation = "lifecycle.metalhub.io/cleaning-failed"
	// CleaningTasksAnnotation holds, for a cleaning done through the BMC (its round's id starts
	// with "bmc-"), the task of each erase it started: JSON, action target to task URI, "done"
	// once the task completed (a BMC may forget finished tasks).
	CleaningTasksAnnotation = "lifecycle.metalhub.io/cleaning-tasks"
	// CleaningOwedAnnotation marks a server sent to Cleaning by its machine's owed record
	// (cleaning.Owed: an earlier Server of it was deleted before its release was cleaned); the
	// record is removed before the verified cleaning's write removes the mark.
	CleaningOwedAnnotation = "lifecycle.metalhub.io/cleaning-owed"
	// LastCleaningAnnotation summarises the last verified cleaning, for the Cleaned condition.
	LastCleaningAnnotation = "lifecycle.metalhub.io/last-cleaning"
)

// Store keeps the Server lifecycle state. Without the annotation (a restore from a backup
// of spec and metadata), the state is derived from what the controller itself set: the parked
// marker means Parked, else a maintenance ref Maintenance, a claim ref Reserved. A status.state left by
// the reference operator is adopted once. Otherwise the server starts at Initial.
var Store = lifecycle.Store[metalv1alpha1.ServerState]{
	Initial: metalv1alpha1.ServerStateInitial,
	Valid:   Valid,
	Derive: func(o client.Object) (metalv1alpha1.ServerState, bool) {
		s := o.(*metalv1alpha1.Server)
		switch {
		case s.Annotations[metalv1alpha1.ParkedAnnotation] != "":
			// The user's "leave the box alone" wins over any holder's ref: unpark returns
			// to what the refs say.
			return metalv1alpha1.ServerStateParked, true
		case s.Spec.ServerMaintenanceRef != nil:
			return metalv1alpha1.ServerStateMaintenance, true
		case s.Spec.ServerClaimRef != nil:
			return metalv1alpha1.ServerStateReserved, true
		}
		return "", false
	},
	Managed: managedServer,
	Adopt: func(o client.Object) (metalv1alpha1.ServerState, bool) {
		// Initial carries no bookkeeping worth adopting (and is what our own mirror writes
		// before the first transition): a server showing it simply starts at Initial.
		st := o.(*metalv1alpha1.Server).Status.State
		return st, st != metalv1alpha1.ServerStateInitial
	},
}

// ReasonRecorded is the reason of the Lifecycle condition.
const ReasonRecorded = "Recorded"

// Mirror sets the state mirror, and the condition that says whose it is.
func Mirror(st *metalv1alpha1.ServerStatus, generation int64, state metalv1alpha1.ServerState) {
	st.State = state
	lifecycle.SetCondition(&st.Conditions, generation, metalv1alpha1.ConditionLifecycle, metav1.ConditionTrue, ReasonRecorded,
		"the lifecycle state is kept in annotation "+lifecycle.StateAnnotation+"; status.state mirrors it")
}

// managedServer reports whether metalhub has kept this server's state before: bookkeeping of
// ours in metadata, or a status we wrote. Either survives the loss of the other.
func managedServer(o client.Object) bool {
	for k := range o.GetAnnotations() {
		if strings.HasPrefix(k, "lifecycle.metalhub.io/") {
			return true
		}
	}
	s := o.(*metalv1alpha1.Server)
	return apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionLifecycle) != nil
}

// Valid reports whether s is a state of the API.
func Valid(s metalv1alpha1.ServerState) bool {
	switch s {
	case metalv1alpha1.ServerStateInitial, metalv1alpha1.ServerStateDiscovery, metalv1alpha1.ServerStateAvailable,
		metalv1alpha1.ServerStateReserved, metalv1alpha1.ServerStateReleased, metalv1alpha1.ServerStateError,
		metalv1alpha1.ServerStateMaintenance, metalv1alpha1.ServerStateParked, metalv1alpha1.ServerStateCleaning:
		return true
	}
	return false
}

// Ignored reports an object a user asked metalhub to leave alone (operation annotation ignore).
func Ignored(o client.Object) bool {
	return o.GetAnnotations()[metalv1alpha1.OperationAnnotation] == metalv1alpha1.OperationIgnore
}

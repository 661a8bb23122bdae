package v1alpha1

// Condition types metalhub sets on the metal kinds, and their reasons. Reasons are stable
// CamelCase strings: clients match on them. BMC failures add the reasons of the bmc client
// (AuthenticationFailed, ConnectionFailed, Timeout, Unavailable, ...).
const (
	// ConditionReady says whether the controller can manage the object's hardware (BMC,
	// Server), or whether a boot configuration is ready to boot.
	ConditionReady = "Ready"
	// ConditionDeletionBlocked says why a deleted server is still there.
	ConditionDeletionBlocked = "DeletionBlocked"
	// ConditionInMaintenance says whether a maintenance holds its server and, when not, why.
	ConditionInMaintenance = "InMaintenance"
	// ConditionLifecycle marks a status metalhub wrote: its state is our mirror, not the
	// reference operator's bookkeeping, and is never adopted.
	ConditionLifecycle = "Lifecycle"
	// ConditionBound says whether a claim holds a server and, when not, why.
	ConditionBound = "Bound"
	// ConditionIdentityMismatch is True on a Server while the system that answers at its
	// address is not its machine (another system UUID or serial); its message names what
	// answered. Nothing is sent to that system until it matches again.
	ConditionIdentityMismatch = "IdentityMismatch"
	// ConditionBootMethod is False on a Server whose boot (discovery, claim or maintenance)
	// could not be prepared the way its boot configuration asks: the method is not advertised
	// by the BMC (BootMethodUnsupported) or the BMC refused it (BootPreparationFailed). Nothing
	// else is booted instead. It goes once a boot is prepared.
	ConditionBootMethod = "BootMethod"
	// ConditionInventoryDrift is True on a Server whose last discovery found less hardware
	// than its baseline (a GPU, NIC, disk, memory or CPU threads gone); its message lists what
	// is missing. It comes from InventoryDriftAnnotation, so a wiped status gets it back, and it
	// goes when a discovery finds everything again or the new inventory is accepted
	// (operation accept-inventory). A metalhub addition.
	ConditionInventoryDrift = "InventoryDrift"
	// ConditionHardwareFault is True on a Server whose BMC logged a critical event (a DIMM,
	// PSU, fan, GPU, processor fault) since metalhub first read its log; its message names the
	// events. It comes from HardwareFaultAnnotation, so a wiped status gets it back, and it goes
	// when the fault is cleared after the repair (operation clear-hardware-fault). A metalhub
	// addition.
	ConditionHardwareFault = "HardwareFault"
	// ConditionCleaned says whether the disks of a released server were erased and the erase
	// proven (CleaningPolicy): False with CleaningInProgress while it runs, with CleaningFailed
	// naming the disk that could not be sanitized or verified; True with Verified once the
	// cleaning record holds a proof for every disk the policy covers. It is rebuilt from the
	// annotations and the record, so a wiped status gets it back. A metalhub addition.
	ConditionCleaned = "Cleaned"
)

// Reasons of a Server's Cleaned condition and its events.
const (
	// ReasonCleaningInProgress: the cleaning agent is booted or erasing.
	ReasonCleaningInProgress = "CleaningInProgress"
	// ReasonCleaningVerified: every disk the policy covers was erased and read back as erased.
	ReasonCleaningVerified = "Verified"
	// ReasonCleaningFailed: a disk could not be erased or its read-back found data, or no
	// report came in time; the server is in Error until a retry.
	ReasonCleaningFailed = "CleaningFailed"
	// ReasonCleaningOwed: the Server was deleted before its release was cleaned, or a Server
	// of that machine was sent to Cleaning by the record of it (an event reason).
	ReasonCleaningOwed = "CleaningOwed"
)

// Reasons of a Server's HardwareFault condition and events.
const (
	// ReasonCriticalEvent: the BMC logged a critical event.
	ReasonCriticalEvent = "CriticalEvent"
	// ReasonFaultCleared: the user cleared the fault.
	ReasonFaultCleared = "FaultCleared"
	// ReasonFaultMaintenance: the fault policy opened a maintenance for the server.
	ReasonFaultMaintenance = "FaultMaintenance"
)

// Reasons of a Server's InventoryDrift condition and events.
const (
	// ReasonHardwareMissing: a discovery found less hardware than the baseline.
	ReasonHardwareMissing = "HardwareMissing"
	// ReasonInventoryRestored: a discovery found everything of the baseline again.
	ReasonInventoryRestored = "InventoryRestored"
	// ReasonInventoryAccepted: the user made the inventory found the new baseline.
	ReasonInventoryAccepted = "InventoryAccepted"
)

// Reasons of a Server's BootMethod condition. The condition covers everything a boot
// configuration asks of the BMC before the box boots it: the method, and the root volume.
const (
	ReasonBootMethodUnsupported = "BootMethodUnsupported"
	ReasonBootPreparationFailed = "BootPreparationFailed"
	// ReasonRootVolumeUnsupported: the root volume asked for cannot be made through this BMC
	// (no Storage controller, or none that makes the RAID level); nothing was sent.
	ReasonRootVolumeUnsupported = "RootVolumeUnsupported"
	// ReasonRootVolumeInvalid: the drives asked for are not there, or in another volume.
	ReasonRootVolumeInvalid = "RootVolumeInvalid"
	// ReasonRootVolumePending: the volume was requested; the box boots once it shows.
	ReasonRootVolumePending = "RootVolumePending"
	// ReasonRootDeviceNotFound: no disk of the server's inventory matches the root device
	// hints, or the server has no inventory to match them against.
	ReasonRootDeviceNotFound = "RootDeviceNotFound"
)

// Reasons of a BMC's and a Server's Ready condition that are not BMC errors.
const (
	ReasonConnected        = "Connected"
	ReasonSecretNotFound   = "SecretNotFound"
	ReasonSecretInvalid    = "SecretInvalid"
	ReasonEndpointNotFound = "EndpointNotFound"
	ReasonEndpointInvalid  = "EndpointInvalid"
	ReasonBMCNotFound      = "BMCNotFound"
	// ReasonDuplicateIdentity: the BMC's systems already have Servers under another BMC (the
	// same BMC registered twice, or a system UUID twice): no Server is created from it.
	ReasonDuplicateIdentity = "DuplicateIdentity"
	// ReasonIdentityMismatch: the system at the Server's address is another machine.
	ReasonIdentityMismatch = "IdentityMismatch"
	// ReasonSystemReplaced: a replaced board was accepted by AcceptSystemUUIDAnnotation.
	ReasonSystemReplaced = "SystemReplaced"
)

// AcceptSystemUUIDAnnotation on a Server accepts a replaced board: its value is the system UUID
// the box at the Server's address now reports. The controller takes it as the Server's
// spec.systemUUID (only when that system answers), reads the inventory anew and removes the
// annotation. Without it, a system with another UUID or serial is never acted on.
const AcceptSystemUUIDAnnotation = "metal.metalhub.io/accept-system-uuid"

// SettingsOnlyAnnotation "true" on a Server, or on a BMC for each of its Servers, leaves the
// server's power and boot to another system (a metalhub addition, metal-operator issue #1064;
// upstream has no field for it). metalhub then never powers, boots, discovers, cleans or binds
// it; it reads it, and BIOS/BMC settings, versions, users and certificates still apply, through
// maintenances whose restarts the owner does (docs/servers.md, docs/firmware.md).
const SettingsOnlyAnnotation = "metal.metalhub.io/settings-only"

// SettingsOnly reports whether annotations carry the settings-only mark. Only "true" marks: a
// typo must not half-mark a server.
func SettingsOnly(annotations map[string]string) bool {
	return annotations[SettingsOnlyAnnotation] == "true"
}

// Reasons of a settings-only Server's Ready condition and events.
const (
	// ReasonSettingsOnly: the server is settings-only; it sits in Initial, unclaimable, and
	// nothing powers or boots it.
	ReasonSettingsOnly = "SettingsOnly"
	// ReasonPowerRefused: an operation that powers or boots a settings-only server was refused.
	ReasonPowerRefused = "PowerRefused"
)

// Reasons of a claim's Bound condition.
const (
	ReasonBound                     = "Bound"
	ReasonReleasing                 = "Releasing"
	ReasonNoMatchingServer          = "NoMatchingServer"
	ReasonAllMatchingServersTaken   = "AllMatchingServersTaken"
	ReasonNoClaimableServer         = "NoClaimableServer"
	ReasonInvalidSelector           = "InvalidSelector"
	ReasonImageMissing              = "ImageMissing"
	ReasonIgnitionSecretNotFound    = "IgnitionSecretNotFound"
	ReasonServerNotFound            = "ServerNotFound"
	ReasonServerNotClaimable        = "ServerNotClaimable"
	ReasonServerSelectorMismatch    = "ServerDoesNotMatchSelector"
	ReasonBootConfigurationConflict = "BootConfigurationConflict"
)

// Reasons of a maintenance.metal.ironcore.dev ServerMaintenance's Ready condition: it is
// carried out by the metal.ironcore.dev one of its namespace and name, or cannot be because one
// of that name exists and is not its own.
const (
	ReasonCarriedOut          = "CarriedOut"
	ReasonMaintenanceConflict = "MaintenanceConflict"
)

// Reasons of a maintenance's InMaintenance condition (beside ReasonServerNotFound).
const (
	ReasonInMaintenance            = "InMaintenance"
	ReasonEnteringMaintenance      = "EnteringMaintenance"
	ReasonWaitingForApproval       = "WaitingForApproval"
	ReasonQueued                   = "Queued"
	ReasonBootConfigurationPending = "BootConfigurationPending"
	ReasonBootConfigurationError   = "BootConfigurationError"
	ReasonInvalidSpec              = "InvalidSpec"
	// ReasonServerDeleting: the server is being deleted (kept only for its holders) and
	// enters no maintenance.
	ReasonServerDeleting = "ServerDeleting"
)

// Reasons of a boot configuration's Ready condition (beside ReasonImageMissing and
// ReasonIgnitionSecretNotFound, shared with claims).
const (
	ReasonBootConfigurationReady = "BootConfigurationReady"
	ReasonWaitingForBootProvider = "WaitingForBootProvider"
)

// Event reasons of one-off operations (the operation annotation).
const (
	ReasonOperation            = "Operation"
	ReasonOperationFailed      = "OperationFailed"
	ReasonOperationUncertain   = "OperationUncertain"
	ReasonUnsupportedOperation = "UnsupportedOperation"
)

// ServerReadinessRule reasons (condition Ready).
const (
	// ReasonRuleEnforced: the rule's taint is on exactly the matching servers that do not meet it.
	ReasonRuleEnforced = "Enforced"
	// ReasonRuleEnforcing: some servers could not be written this pass; the next goes on.
	ReasonRuleEnforcing = "Enforcing"
)

// BMCUser reasons (condition Ready, and its events).
const (
	ReasonAccountSet      = "AccountSet"
	ReasonAccountFailed   = "AccountFailed"
	ReasonAccountDeleted  = "AccountDeleted"
	ReasonAccountKept     = "AccountKept"
	ReasonAccountLeft     = "AccountNotRemoved"
	ReasonPasswordRotated = "PasswordRotated"
)

// Event reasons of a BMC's credentials rotation (operation rotate-credentials).
const (
	ReasonRotating          = "RotatingCredentials"
	ReasonRotated           = "CredentialsRotated"
	ReasonRotationFailed    = "CredentialsRotationFailed"
	ReasonRotationImmutable = "CredentialsRotationRefused"
	ReasonRotationShared    = "CredentialsRotationShared"
)

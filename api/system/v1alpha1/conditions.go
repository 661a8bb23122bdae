package v1alpha1

// Condition types of the firmware and settings kinds.
const (
	// ConditionUpgraded says whether the target runs the version asked for: True once read back
	// after the upgrade (or found already there), False with what is under way or in the way.
	ConditionUpgraded = "Upgraded"
	// ConditionMaintenance says whether the maintenance the work needs is held.
	ConditionMaintenance = "Maintenance"
	// ConditionRolledOut says whether a *Set's rollout is done, under way, paused or stopped.
	ConditionRolledOut = "RolledOut"
)

// Reasons of ConditionUpgraded and ConditionMaintenance.
const (
	ReasonUpToDate            = "UpToDate"
	ReasonUpgraded            = "Upgraded"
	ReasonAwaitingMaintenance = "AwaitingMaintenance"
	ReasonInMaintenance       = "InMaintenance"
	ReasonMaintenanceReleased = "MaintenanceReleased"
	ReasonMaintenanceConflict = "MaintenanceConflict"
	ReasonFlashing            = "Flashing"
	ReasonFlashRetry          = "FlashRetry"
	ReasonFlashFailed         = "FlashFailed"
	ReasonOutcomeUnknown      = "OutcomeUnknown"
	// ReasonBMCBusy: the BMC answered the flash that it runs another update of that firmware
	// (409); the step waits for it, the box kept in maintenance, and sends its image after.
	ReasonBMCBusy   = "BMCBusy"
	ReasonRebooting = "Rebooting"
	// ReasonAwaitingOwnerReboot: what was staged (settings, an image) is installed by the next
	// restart of a settings-only server (metal.metalhub.io/settings-only), which its owner does;
	// metalhub restarts nothing and reads the result back once it shows.
	ReasonAwaitingOwnerReboot = "AwaitingOwnerReboot"
	ReasonVerifying           = "Verifying"
	ReasonServerNotFound      = "ServerNotFound"
	ReasonBMCUnavailable      = "BMCUnavailable"
)

// Reasons of ConditionRolledOut.
const (
	ReasonRolloutCanary   = "Canary"
	ReasonRolloutRolling  = "Rolling"
	ReasonRolloutPaused   = "Paused"
	ReasonRolloutStopped  = "Stopped"
	ReasonRolloutComplete = "Complete"
)

// ConditionApplied says whether a BIOSSettings' flow is in effect.
const ConditionApplied = "Applied"

// Reasons of ConditionApplied (beside the maintenance and BMC ones above).
const (
	ReasonSettingsApplied  = "Applied"
	ReasonStaging          = "Staging"
	ReasonVersionMismatch  = "VersionMismatch"
	ReasonInvalidSettings  = "InvalidSettings"
	ReasonSettingsFailed   = "SettingsFailed"
	ReasonVariableNotFound = "VariableNotFound"
)

// ReasonSecretRefNotAllowed (of ConditionApplied and ConditionUpgraded): a variable's
// secretKeyRef or an image's secretRef names a Secret outside the namespace the operator takes
// firmware Secrets from (--firmware-secret-namespace). Nothing is read or sent until the spec
// names one there.
const ReasonSecretRefNotAllowed = "SecretRefNotAllowed"

package v1alpha1

// Condition types and reasons the delivery kinds (InfrahubSync, VidraResource) report. Reasons
// are stable CamelCase strings: clients match on them.
const (
	// ConditionReady is the one condition both kinds carry: True once the last pass delivered
	// everything, False with a reason otherwise.
	ConditionReady = "Ready"
	// ConditionHealthy says whether every applied object is Current (kstatus); its reason is
	// the health (Current, InProgress, Failed, NotFound).
	ConditionHealthy = "Healthy"
	// ConditionDrifted, carried only under driftPolicy Warn, says whether an applied object
	// differs from the manifest and was left as it is (status.drift lists them).
	ConditionDrifted = "Drifted"
)

// Reasons of the Drifted condition.
const (
	// ReasonDriftDetected: some applied object differs from the manifest; nothing was applied
	// over it (driftPolicy Warn). Also the reason of the Warning event naming the objects.
	ReasonDriftDetected = "DriftDetected"
	// ReasonNoDrift: every applied object is as the manifest says.
	ReasonNoDrift = "NoDrift"
)

// Reasons of the Ready condition.
const (
	// ReasonDependencyNotReady: a sync named in spec.dependsOn is not Succeeded with every
	// VidraResource Healthy (the message names it and why); nothing is delivered or applied.
	ReasonDependencyNotReady = "DependencyNotReady"
	// ReasonDependencyCycle: spec.dependsOn leads back to the object itself (the message names
	// the cycle); nothing is delivered or applied.
	ReasonDependencyCycle     = "DependencyCycle"
	ReasonSynced              = "Synced"
	ReasonDeployed            = "Deployed"
	ReasonDrifted             = "Drifted"
	ReasonCredentialsNotFound = "CredentialsNotFound"
	ReasonCredentialsInvalid  = "CredentialsInvalid"
	ReasonSecretAmbiguous     = "SecretAmbiguous"
	ReasonEmptyResult         = "EmptyResult"
	// ReasonIncompleteResult: the query's count disagrees with the artifacts it returned; the
	// answer is not trusted and nothing is deleted.
	ReasonIncompleteResult = "IncompleteResult"
	// ReasonPruneHeld: the pass would delete more than the allowed fraction of the sync's
	// VidraResources; nothing was deleted (the message says how many and how to confirm).
	ReasonPruneHeld       = "PruneHeld"
	ReasonArtifactsFailed = "ArtifactsFailed"
	// ReasonCredentialsNotBound: a Secret holds credentials for the sync's host but does not
	// name the sync (annotation infrahub.operators.com/syncs) and was not admitted for it.
	ReasonCredentialsNotBound = "CredentialsNotBound"
	// ReasonCredentialsURLMismatch: the sync's Secret is for another scheme or port than the
	// sync's URL; nothing is sent.
	ReasonCredentialsURLMismatch = "CredentialsURLMismatch"
	// ReasonPlainHTTPCredentials: the sync's URL is plain http:// and credentials would be sent
	// in the clear; refused unless --delivery-allow-plain-http-credentials.
	ReasonPlainHTTPCredentials = "PlainHTTPCredentials"
	// ReasonResourcesFailed: the sync delivered its artifacts, and some of its VidraResources
	// failed to deploy.
	ReasonResourcesFailed = "ResourcesFailed"
	// ReasonResourcesProgressing: some of the sync's VidraResources have not deployed yet.
	ReasonResourcesProgressing = "ResourcesProgressing"
	ReasonOwnershipConflict    = "OwnershipConflict"
	ReasonInvalidManifest      = "InvalidManifest"
	ReasonUnknownKind          = "UnknownKind"
	ReasonPolicyDenied         = "PolicyDenied"
	// ReasonForbidden: the ServiceAccount the VidraResource acts as may not do what its
	// manifest asks (the API server's RBAC said no).
	ReasonForbidden          = "Forbidden"
	ReasonKubeconfigNotFound = "KubeconfigNotFound"
	ReasonKubeconfigInvalid  = "KubeconfigInvalid"
	// ReasonKubeconfigNotBound: a kubeconfig Secret reaches the destination host but names
	// neither the VidraResource nor its sync, and was not admitted for it.
	ReasonKubeconfigNotBound = "KubeconfigNotBound"
	ReasonClusterUnavailable = "ClusterUnavailable"
	ReasonApplyFailed        = "ApplyFailed"
	ReasonPruneFailed        = "PruneFailed"
	ReasonCleanupFailed      = "CleanupFailed"
	ReasonInternal           = "InternalError"
	// ReasonSettingsConflict: more than one settings ConfigMap in the settings namespace; the
	// flags apply until one remains (a Warning event on each).
	ReasonSettingsConflict = "SettingsConflict"
	// ReasonTooManyArtifacts: the query named more artifacts than one sync may keep; nothing
	// was delivered or deleted.
	ReasonTooManyArtifacts = "TooManyArtifacts"
	// ReasonSyncTooLarge: an artifact would take the sync's manifests past the byte limit.
	ReasonSyncTooLarge = "SyncTooLarge"
	// ReasonPassDeadline: the sync pass stopped at its deadline; the next one goes on.
	ReasonPassDeadline = "PassDeadline"
	// ReasonNoServiceAccount: the VidraResource names no ServiceAccount, there is no default,
	// and acting as the operator itself is not allowed (--delivery-allow-operator-identity).
	ReasonNoServiceAccount = "NoServiceAccount"
	// ReasonAdmissionRequired: spec.destination names a ServiceAccount other than the admin's
	// default, and the admission webhook, which checks that the writer may impersonate it, does
	// not guard the kind (--enable-webhooks off, or no ValidatingWebhookConfiguration routes
	// creates, updates and deletes to this operator); nothing is applied.
	ReasonAdmissionRequired = "AdmissionRequired"
	// ReasonUnsealed: the object asks for what only admission may grant (a ServiceAccount
	// other than the admin's default, an admitted-* Secret) and carries no valid seal of the
	// admission webhook (SealAnnotation): it was written before the webhook, while it was not
	// serving, or changed since without it. Nothing is applied; re-admitting it (writing
	// ReadmitAnnotation) with the rights it needs seals it.
	ReasonUnsealed = "Unsealed"
	// ReasonOperatorServiceAccount: spec.destination names the operator's own ServiceAccount,
	// which it never acts as on a writer's behalf.
	ReasonOperatorServiceAccount = "OperatorServiceAccount"
	// ReasonHandoverRefused: the VidraResource's handover-from annotation names a VidraResource
	// that is not of the same InfrahubSync (or gone, or of another UID); its objects are not
	// taken over.
	ReasonHandoverRefused = "HandoverRefused"
)

// Event reasons of the preview of proposed changes (spec.preview).
const (
	// ReasonPreviewPosted: a proposed change got the preview's comment, or its comment changed.
	ReasonPreviewPosted = "PreviewPosted"
	// ReasonPreviewFailed: a proposed change's preview could not be made or posted.
	ReasonPreviewFailed = "PreviewFailed"
)

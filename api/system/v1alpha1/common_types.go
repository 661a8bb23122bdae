package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ImageSpec is a firmware image the BMC fetches itself (Redfish UpdateService.SimpleUpdate).
type ImageSpec struct {
	// URI is where the BMC fetches the image from.
	// +required
	// +kubebuilder:validation:MinLength=1
	URI string `json:"URI"`
	// SecretRef names a Secret with "username" and "password" the BMC uses to fetch the image.
	// +optional
	SecretRef *corev1.SecretReference `json:"secretRef,omitempty"`
	// TransferProtocol is the Redfish TransferProtocol (HTTP, HTTPS, ...); by default the URI's
	// scheme decides.
	// +optional
	TransferProtocol string `json:"transferProtocol,omitempty"`
}

// RetryPolicy bounds how often a failed upgrade or settings step is tried again.
type RetryPolicy struct {
	// MaxAttempts is how many attempts are made before the object is Failed (default 1: no
	// retry). Once Failed, changing the spec starts over.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxAttempts *int32 `json:"maxAttempts,omitempty"`
}

// UpdatePolicy says whether an image is flashed even if the version reported already matches.
type UpdatePolicy string

const (
	// UpdatePolicyForce flashes even if the reported version is already spec.version.
	UpdatePolicyForce UpdatePolicy = "Force"
)

// VersionStep is one intermediate version of an upgrade path.
type VersionStep struct {
	// Version is what the server reports once this step's image is installed.
	// +required
	// +kubebuilder:validation:MinLength=1
	Version string `json:"version"`
	// Image installs Version.
	// +required
	Image ImageSpec `json:"image"`
}

// SettingsFlowItem is one step of a settings flow: its settings are applied together (with one
// reboot where they need one) before the step of the next higher priority.
type SettingsFlowItem struct {
	// Name of the step.
	// +required
	Name string `json:"name"`
	// Priority orders the steps, lowest first.
	// +required
	Priority int32 `json:"priority"`
	// Settings are attribute names and values; a value may use $(key) for a variable.
	// +optional
	Settings map[string]string `json:"settings,omitempty"`
}

// Variable names a value taken from elsewhere, used in settings as $(key).
type Variable struct {
	// Key is the variable's name.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Key string `json:"key"`
	// ValueFrom says where its value comes from.
	// +required
	ValueFrom VariableSource `json:"valueFrom"`
}

// VariableSource is exactly one place a variable's value comes from.
// +kubebuilder:validation:XValidation:rule="(has(self.fieldRef) ? 1 : 0) + (has(self.objectFieldRef) ? 1 : 0) + (has(self.configMapKeyRef) ? 1 : 0) + (has(self.secretKeyRef) ? 1 : 0) == 1",message="exactly one of fieldRef, objectFieldRef, configMapKeyRef, or secretKeyRef must be provided"
// +kubebuilder:validation:XValidation:rule="!has(self.objectFieldRef) || self.objectFieldRef.kind == 'BMC'",message="objectFieldRef.kind must be 'BMC'"
type VariableSource struct {
	// FieldRef reads a field of the settings object itself.
	// +optional
	FieldRef *FieldRef `json:"fieldRef,omitempty"`
	// ObjectFieldRef reads a field of another object (a BMC).
	// +optional
	ObjectFieldRef *ObjectFieldRef `json:"objectFieldRef,omitempty"`
	// ConfigMapKeyRef reads a ConfigMap's key.
	// +optional
	ConfigMapKeyRef *KeyRef `json:"configMapKeyRef,omitempty"`
	// SecretKeyRef reads a Secret's key.
	// +optional
	SecretKeyRef *KeyRef `json:"secretKeyRef,omitempty"`
}

// FieldRef is a field path, as in JSONPath without braces (spec.serverRef.name).
type FieldRef struct {
	// +required
	FieldPath string `json:"fieldPath"`
}

// ObjectFieldRef is a field of a named object.
type ObjectFieldRef struct {
	// +required
	Kind string `json:"kind"`
	// +required
	Name string `json:"name"`
	// +required
	FieldPath string `json:"fieldPath"`
}

// KeyRef is a key of a namespaced ConfigMap or Secret.
type KeyRef struct {
	// +required
	Name string `json:"name"`
	// +required
	Namespace string `json:"namespace"`
	// +required
	Key string `json:"key"`
}

// TaskStatus mirrors the Redfish Task that carries out an update.
type TaskStatus struct {
	// URI of the task monitor.
	// +optional
	URI string `json:"URI,omitempty"`
	// State is the task's TaskState (New, Running, Completed, Exception, ...).
	// +optional
	State string `json:"state,omitempty"`
	// Status is the task's TaskStatus (OK, Warning, Critical).
	// +optional
	Status string `json:"status,omitempty"`
	// PercentageComplete is the task's PercentComplete.
	// +optional
	PercentageComplete int32 `json:"percentageComplete,omitempty"`
}

// VersionState is where a version upgrade stands.
type VersionState string

const (
	VersionStatePending    VersionState = "Pending"
	VersionStateInProgress VersionState = "InProgress"
	VersionStateCompleted  VersionState = "Completed"
	VersionStateFailed     VersionState = "Failed"
)

// SettingsState is where applying settings stands.
type SettingsState string

const (
	SettingsStatePending    SettingsState = "Pending"
	SettingsStateInProgress SettingsState = "InProgress"
	SettingsStateApplied    SettingsState = "Applied"
	SettingsStateFailed     SettingsState = "Failed"
)

// RolloutSpec paces a *Set: metalhub's own fields (the reference starts every target at once).
type RolloutSpec struct {
	// MaxUnavailable is how many targets are worked on at once (a count, or a percentage of
	// the selected ones, rounded down but at least 1): the size of a wave. Default: all.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^([1-9][0-9]?|100)%$')",message="maxUnavailable is a count of at least 1 or a percentage from 1% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// Canary is how many targets form the first wave, which must complete before any other
	// starts.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Canary int32 `json:"canary,omitempty"`
	// FailureThreshold stops the rollout (no new wave) once this many targets failed. A failed
	// canary always stops it. Default 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	FailureThreshold *int32 `json:"failureThreshold,omitempty"`
}

// RolloutPausedAnnotation on a *Set holds its rollout: no new wave starts until it is removed;
// what runs finishes.
const RolloutPausedAnnotation = "metalhub.io/rollout-paused"

// RolloutPhase is where a *Set's rollout stands.
type RolloutPhase string

const (
	RolloutCanary  RolloutPhase = "Canary"
	RolloutRolling RolloutPhase = "Rolling"
	RolloutPaused  RolloutPhase = "Paused"
	RolloutStopped RolloutPhase = "Stopped"
	RolloutDone    RolloutPhase = "Done"
)

// RolloutStatus reports a *Set's rollout.
type RolloutStatus struct {
	// Phase is Canary, Rolling, Paused, Stopped or Done.
	// +optional
	Phase RolloutPhase `json:"phase,omitempty"`
	// Wave is the number of the wave under way (the canary wave is 1 when there is one).
	// +optional
	Wave int32 `json:"wave,omitempty"`
	// Waves is how many waves the rollout takes as selected now.
	// +optional
	Waves int32 `json:"waves,omitempty"`
	// FailedTargets names the targets whose object failed.
	// +optional
	FailedTargets []string `json:"failedTargets,omitempty"`
}

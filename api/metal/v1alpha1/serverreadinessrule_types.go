package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ConditionRequirement is a server condition a rule waits for.
type ConditionRequirement struct {
	// Type of the condition.
	// +required
	Type string `json:"type"`
	// RequiredStatus of the condition.
	// +required
	// +kubebuilder:validation:Enum=True;False;Unknown
	RequiredStatus metav1.ConditionStatus `json:"requiredStatus"`
}

// EnforcementMode says how long a rule keeps its taint in shape.
// +kubebuilder:validation:Enum=BootstrapOnly;Continuous
type EnforcementMode string

const (
	// EnforcementBootstrapOnly takes the taint off a server once it meets the rule, for good:
	// a later regression does not taint it again.
	EnforcementBootstrapOnly EnforcementMode = "BootstrapOnly"
	// EnforcementContinuous (the default) taints a server whenever it does not meet the rule.
	EnforcementContinuous EnforcementMode = "Continuous"
)

// ServerReadinessRuleSpec taints the servers it selects while they do not meet its conditions
// (a condition a server does not have counts as Unknown).
type ServerReadinessRuleSpec struct {
	// Conditions a server must meet for the taint to be removed.
	// +optional
	Conditions []ConditionRequirement `json:"conditions,omitempty"`
	// EnforcementMode is BootstrapOnly (the taint comes off a server once, for good) or
	// Continuous (the default: it is back whenever the server stops meeting the rule).
	// +optional
	EnforcementMode EnforcementMode `json:"enforcementMode,omitempty"`
	// Taint managed on matching servers.
	// +optional
	Taint *Taint `json:"taint,omitempty"`
	// ServerSelector limits the rule to some servers.
	// +optional
	ServerSelector *metav1.LabelSelector `json:"serverSelector,omitempty"`
}

// ServerReadinessRuleStatus reports the rule.
type ServerReadinessRuleStatus struct {
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ServerReadinessRule taints servers until conditions hold.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.enforcementMode`
// +kubebuilder:printcolumn:name="Taint",type=string,JSONPath=`.spec.taint.key`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ServerReadinessRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServerReadinessRuleSpec   `json:"spec,omitempty"`
	Status ServerReadinessRuleStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ServerReadinessRuleList is a list of ServerReadinessRules.
type ServerReadinessRuleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServerReadinessRule `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ServerReadinessRule{}, &ServerReadinessRuleList{})
}

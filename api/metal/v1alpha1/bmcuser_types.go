package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BMCUserSpec is an account to keep on a BMC. A changed userName or bmcRef removes the account
// made before (from the BMC it was made on) before the new one is created; deleting the
// BMCUser removes every account it made.
type BMCUserSpec struct {
	// UserName of the account.
	// +optional
	UserName string `json:"userName,omitempty"`
	// RoleID of the account, e.g. Administrator.
	// +optional
	RoleID string `json:"roleID,omitempty"`
	// Description of the account.
	// +optional
	Description string `json:"description,omitempty"`
	// RotationPeriod is how often the password is rotated.
	// +optional
	RotationPeriod *metav1.Duration `json:"rotationPeriod,omitempty"`
	// BMCSecretRef names the BMCSecret with the account's credentials.
	// +optional
	BMCSecretRef *corev1.LocalObjectReference `json:"bmcSecretRef,omitempty"`
	// BMCRef names the BMC the account lives on.
	// +optional
	BMCRef *corev1.LocalObjectReference `json:"bmcRef,omitempty"`
}

// BMCUserStatus reports the account.
type BMCUserStatus struct {
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BMCUser is an account on a BMC.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:printcolumn:name="User",type=string,JSONPath=`.spec.userName`
// +kubebuilder:printcolumn:name="BMC",type=string,JSONPath=`.spec.bmcRef.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BMCUser struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BMCUserSpec   `json:"spec,omitempty"`
	Status BMCUserStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BMCUserList is a list of BMCUsers.
type BMCUserList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BMCUser `json:"items"`
}

func init() {
	SchemeBuilder.Register(&BMCUser{}, &BMCUserList{})
}

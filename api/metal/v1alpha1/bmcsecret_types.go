package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Keys of a BMCSecret's data.
const (
	BMCSecretUsernameKey = "username"
	BMCSecretPasswordKey = "password"
)

// BMCSecret holds the credentials of a BMC. It is shaped like a core Secret but cluster-scoped,
// as in the reference. Unlike a core Secret, stringData is stored as written: readers must look
// at both data and stringData (stringData wins).
//
// Like a core Secret, a BMCSecret marked immutable keeps its data: the API server refuses any
// change of data or stringData, and immutable cannot be turned off again (delete and recreate
// the secret instead). Secrets not marked immutable may be edited, e.g. to rotate a password.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=bmcsec
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.immutable) || !oldSelf.immutable || (has(self.immutable) && self.immutable)",message="immutable cannot be unset once true"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.immutable) || !oldSelf.immutable || (has(self.data) == has(oldSelf.data) && (!has(self.data) || self.data == oldSelf.data))",message="data is immutable because immutable is true"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.immutable) || !oldSelf.immutable || (has(self.stringData) == has(oldSelf.stringData) && (!has(self.stringData) || self.stringData == oldSelf.stringData))",message="stringData is immutable because immutable is true"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BMCSecret struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Immutable, if true, keeps data and stringData from being changed; it cannot be unset.
	// +optional
	Immutable *bool `json:"immutable,omitempty"`
	// Data holds base64-encoded values.
	// +optional
	Data map[string][]byte `json:"data,omitempty"`
	// StringData holds plain-text values; they take precedence over Data.
	// +optional
	StringData map[string]string `json:"stringData,omitempty"`
	// Type of the secret.
	// +optional
	Type corev1.SecretType `json:"type,omitempty"`
}

// Value returns the value of key, preferring stringData as a core Secret would after its write.
func (s *BMCSecret) Value(key string) (string, bool) {
	if v, ok := s.StringData[key]; ok {
		return v, true
	}
	v, ok := s.Data[key]
	return string(v), ok
}

// +kubebuilder:object:root=true

// BMCSecretList is a list of BMCSecrets.
type BMCSecretList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BMCSecret `json:"items"`
}

func init() {
	SchemeBuilder.Register(&BMCSecret{}, &BMCSecretList{})
}

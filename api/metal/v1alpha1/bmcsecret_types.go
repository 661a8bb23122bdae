package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Keys of a BMCSecret's data.
const (
	BMCSecretUsernameKey = "username"
	BMCSecretPasswordKey = "password"
	// BMCSecretPendingPasswordKey holds, during a rotate-credentials operation, the new password
	// before the BMC has it: written first, so that no step of the rotation can lose the
	// password that opens the BMC. It becomes the password once the BMC accepts it.
	BMCSecretPendingPasswordKey = "pendingPassword"
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

// SetValue sets key where it is kept (stringData takes precedence over data on reads).
func (s *BMCSecret) SetValue(key, value string) {
	if _, ok := s.StringData[key]; ok {
		s.StringData[key] = value
		return
	}
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	s.Data[key] = []byte(value)
}

// DeleteValue removes key from data and stringData.
func (s *BMCSecret) DeleteValue(key string) {
	delete(s.StringData, key)
	delete(s.Data, key)
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

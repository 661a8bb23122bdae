package cleaning

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

// A cleaning is owed to a machine, not to the Server object that stood for it: a Server deleted
// with a release not yet cleaned (its BMC deleted, an operator's kubectl delete, a move to
// another BMC object) is made anew by its BMC with no mark, and without a record kept apart
// from it the next claim would get the last tenant's disks. The owed record is a ConfigMap per
// machine (by system UUID) in the discovery namespace, owned by nothing, so it outlives the
// Server, its BMC and their owners; the Server controller writes it before it lets a marked
// Server go, reads it when a Server of that machine finishes discovery (which then goes to
// Cleaning), and removes it once a cleaning of that machine is verified.
const (
	// OwedLabel marks an owed record; its value is the machine's system UUID.
	OwedLabel = "cleaning.metalhub.io/owed"
	// owedPolicyKey, owedServerKey and owedSinceKey hold the record's fields.
	owedPolicyKey = "policy"
	owedServerKey = "server"
	owedSinceKey  = "since"
)

// Owed is a cleaning owed to a machine whose Server went before its release was cleaned.
type Owed struct {
	// SystemUUID is the machine's.
	SystemUUID string
	// Policy is the released Server's mark: what its release is cleaned by.
	Policy metalv1alpha1.CleaningPolicy
	// Server names the Server that was deleted (for people).
	Server string
	// Since is when the record was first written.
	Since time.Time
}

// NormalizeUUID is how an owed record keys a machine: lower case, no braces or blanks.
func NormalizeUUID(u string) string {
	return strings.ToLower(strings.Trim(strings.TrimSpace(u), "{}"))
}

// OwedName is the owed record's ConfigMap name for the machine with system UUID uuid.
func OwedName(uuid string) string { return "cleaning-owed-" + NormalizeUUID(uuid) }

// OwedConfigMap builds an owed record.
func OwedConfigMap(namespace string, o Owed) *corev1.ConfigMap {
	u := NormalizeUUID(o.SystemUUID)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: OwedName(u), Labels: map[string]string{OwedLabel: u}},
		Data: map[string]string{
			owedPolicyKey: string(o.Policy),
			owedServerKey: o.Server,
			owedSinceKey:  o.Since.UTC().Format(time.RFC3339),
		},
	}
}

// DecodeOwed reads an owed record. A record whose policy is not one of the API's is owed
// AllDisks: what it asked cannot be known, and less could leave the tenant's data behind.
func DecodeOwed(cm *corev1.ConfigMap) Owed {
	o := Owed{SystemUUID: cm.Labels[OwedLabel], Policy: metalv1alpha1.CleaningPolicy(cm.Data[owedPolicyKey]), Server: cm.Data[owedServerKey]}
	if !Valid(o.Policy) {
		o.Policy = metalv1alpha1.CleaningPolicyAllDisks
	}
	if t, err := time.Parse(time.RFC3339, cm.Data[owedSinceKey]); err == nil {
		o.Since = t
	}
	return o
}

// String says what is owed, for an event or a transition's message.
func (o Owed) String() string {
	s := fmt.Sprintf("cleaning %s owed to machine %s", o.Policy, o.SystemUUID)
	if o.Server != "" {
		s += " since Server " + o.Server + " was deleted before its release was cleaned"
	}
	if !o.Since.IsZero() {
		s += " (" + o.Since.UTC().Format(time.RFC3339) + ")"
	}
	return s
}

package v1alpha1

// State is the state of a sync or a deployment.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;Stale
type State string

const (
	StatePending   State = "Pending"
	StateRunning   State = "Running"
	StateSucceeded State = "Succeeded"
	StateFailed    State = "Failed"
	StateStale     State = "Stale"
)

// Destination is the cluster and namespace artifacts are applied to.
type Destination struct {
	// Server is the API server URL of a remote cluster. Empty, or
	// https://kubernetes.default.svc, means the local cluster.
	// +optional
	// +kubebuilder:validation:Pattern=`^(http|https)://[a-zA-Z0-9.-]+(:[0-9]+)?(?:/[a-zA-Z0-9-]+)*$`
	Server string `json:"server,omitempty"`
	// Namespace for objects whose manifest names none.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// ReconcileOnEvents restores managed objects as soon as they change, instead of only on the
	// periodic resync.
	// +optional
	// +kubebuilder:default=false
	ReconcileOnEvents bool `json:"reconcileOnEvents,omitempty"`
}

// Well-known metadata keys, kept as the reference writes them so that existing Secrets and
// managed objects are recognised.
const (
	// InfrahubAPIURLLabel on a Secret names the Infrahub host (with or without port) whose
	// credentials it holds.
	InfrahubAPIURLLabel = "infrahub-api-url"
	// ClusterKubeconfigLabel on a Secret names the remote API server host its kubeconfig reaches.
	ClusterKubeconfigLabel = "cluster-kubeconfig"
	// OwnedByAnnotation on a managed object names the VidraResource that applied it.
	OwnedByAnnotation = "vidraresource.infrahub.operators.com/owned-by"
	// VidraResourceFinalizer removes what a VidraResource applied.
	VidraResourceFinalizer = "vidraresource.infrahub.operators.com/finalizer"
	// RequestedAtAnnotation set by a user forces a sync now.
	RequestedAtAnnotation = "infrahub.operators.com/requested-at"
)

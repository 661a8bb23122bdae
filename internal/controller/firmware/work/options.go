package work

import (
	"flag"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/eventsink"
	"github.com/metalhub/metalhub/internal/shard"
)

// Options configure the firmware controllers.
type Options struct {
	// Shards, set, limits the controllers to the objects of the shards this replica holds
	// (internal/shard), keyed by the BMC they act on.
	Shards *shard.Set
	// MaintenanceNamespace holds the ServerMaintenances the controllers create.
	MaintenanceNamespace string
	// SecretNamespace is the one namespace whose Secrets a settings variable (secretKeyRef) or
	// a firmware image (image.secretRef) may name; empty: OperatorNamespace, else (outside a
	// cluster) MaintenanceNamespace. A reference elsewhere is refused (SecretRefNotAllowed).
	SecretNamespace string
	// OperatorNamespace is the operator's own namespace, when it runs in one (the manager sets
	// it).
	OperatorNamespace string
	// Poll is how often a Redfish task in flight is read (a BMC's Retry-After is not shorter
	// than a worker's patience: nothing waits).
	Poll time.Duration
	// VerifyTimeout is how long after the restart the version may take to show before the
	// attempt counts as failed (POST and a BMC's inventory refresh take minutes).
	VerifyTimeout time.Duration
	// RetryAfter is the look after a failure (an unreachable BMC).
	RetryAfter time.Duration
	// UploadTimeout bounds fetching an image and pushing it to a BMC that cannot fetch it.
	UploadTimeout time.Duration
	// RequestTimeout bounds the BMC calls of one pass.
	RequestTimeout time.Duration
	// Concurrency is the number of parallel reconciles per controller.
	Concurrency int
	// Pool is the BMC connection pool shared with the metal family.
	Pool *bmc.Pool
	// Events records the controllers' events.
	Events *eventsink.Provider
}

// DefaultOptions are the settings for a real fleet.
func DefaultOptions() Options {
	return Options{MaintenanceNamespace: "default", Poll: 10 * time.Second, VerifyTimeout: 15 * time.Minute,
		RetryAfter: 15 * time.Second, RequestTimeout: 10 * time.Second, UploadTimeout: 30 * time.Minute, Concurrency: 8}
}

// BindFlags registers the controllers' flags.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.MaintenanceNamespace, "firmware-maintenance-namespace", o.MaintenanceNamespace, "Namespace of the ServerMaintenances that firmware and settings objects create.")
	fs.StringVar(&o.SecretNamespace, "firmware-secret-namespace", o.SecretNamespace, "The only namespace whose Secrets BIOS/BMC settings variables (secretKeyRef) and firmware images (image.secretRef) may name; empty: the operator's namespace (--namespace), outside a cluster --firmware-maintenance-namespace.")
	fs.DurationVar(&o.Poll, "firmware-poll", o.Poll, "How often a firmware update's Redfish task is read while it runs.")
	fs.DurationVar(&o.VerifyTimeout, "firmware-verify-timeout", o.VerifyTimeout, "How long after the restart a flashed version may take to be reported before the attempt counts as failed.")
	fs.DurationVar(&o.UploadTimeout, "firmware-upload-timeout", o.UploadTimeout, "How long fetching an image and pushing it to a BMC that cannot fetch it (MultipartHttpPushUri) may take.")
	fs.IntVar(&o.Concurrency, "firmware-concurrency", o.Concurrency, "Parallel reconciles per firmware controller.")
}

// EffectiveSecretNamespace is the one namespace firmware Secrets are read from (see SecretNamespace).
func (o *Options) EffectiveSecretNamespace() string {
	switch {
	case o.SecretNamespace != "":
		return o.SecretNamespace
	case o.OperatorNamespace != "":
		return o.OperatorNamespace
	}
	return o.MaintenanceNamespace
}

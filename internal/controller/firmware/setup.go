// Package firmware holds the reconcilers of the system.metal.ironcore.dev and
// baseboard.metal.ironcore.dev groups: BIOS versions and settings per server, BMC firmware per
// BMC, and their sets rolled out in waves. They act on a Server's box through the same
// pool and identity proof as the metal family, restart it only through the Server's operation
// annotation (exactly once, by token), and take it out of service through ServerMaintenance.
package firmware

import (
	"context"
	"flag"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	baseboardv1alpha1 "github.com/metalhub/metalhub/api/baseboard/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/shardkey"
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

// IndexServer indexes BIOSVersions by the server they name.
const IndexServer = "spec.serverRef.name"

// Setup registers the firmware controllers with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if o.Pool == nil || o.Events == nil {
		return fmt.Errorf("firmware controllers need the BMC pool and the event sink")
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &systemv1alpha1.BIOSVersion{}, IndexServer, func(obj client.Object) []string {
		v := obj.(*systemv1alpha1.BIOSVersion)
		if v.Spec.ServerRef == nil || v.Spec.ServerRef.Name == "" {
			return nil
		}
		return []string{v.Spec.ServerRef.Name}
	}); err != nil {
		return fmt.Errorf("indexing BIOSVersions by server: %w", err)
	}
	if err := (&BIOSVersionReconciler{Client: mgr.GetClient(), Actor: Actor{Recorder: o.Events.Recorder("biosversion-controller"), Options: o}}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("biosversion controller: %w", err)
	}
	if err := (&BIOSSettingsReconciler{Client: mgr.GetClient(), Actor: Actor{Recorder: o.Events.Recorder("biossettings-controller"), Options: o}}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("biossettings controller: %w", err)
	}
	if err := (&SetReconciler[*systemv1alpha1.BIOSSettingsSet]{Client: mgr.GetClient(), Recorder: o.Events.Recorder("biossettingsset-controller"), Options: o, Kind: BIOSSettingsSets}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("biossettingsset controller: %w", err)
	}
	if err := (&BMCVersionReconciler{Client: mgr.GetClient(), Actor: Actor{Recorder: o.Events.Recorder("bmcversion-controller"), Options: o}}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("bmcversion controller: %w", err)
	}
	if err := (&SetReconciler[*baseboardv1alpha1.BMCVersionSet]{Client: mgr.GetClient(), Recorder: o.Events.Recorder("bmcversionset-controller"), Options: o, Kind: BMCVersionSets}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("bmcversionset controller: %w", err)
	}
	if err := (&BMCSettingsReconciler{Client: mgr.GetClient(), Actor: Actor{Recorder: o.Events.Recorder("bmcsettings-controller"), Options: o}}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("bmcsettings controller: %w", err)
	}
	if err := (&SetReconciler[*baseboardv1alpha1.BMCSettingsSet]{Client: mgr.GetClient(), Recorder: o.Events.Recorder("bmcsettingsset-controller"), Options: o, Kind: BMCSettingsSets}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("bmcsettingsset controller: %w", err)
	}
	if err := (&SetReconciler[*systemv1alpha1.BIOSVersionSet]{Client: mgr.GetClient(), Recorder: o.Events.Recorder("biosversionset-controller"), Options: o, Kind: BIOSVersionSets}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("biosversionset controller: %w", err)
	}
	return nil
}

// BMCRefKey is the shard key of an object acting on the BMC ref names.
func BMCRefKey(o client.Object, ref *corev1.LocalObjectReference) string {
	if ref == nil || ref.Name == "" {
		return shard.KeyObject(o)
	}
	return shard.KeyBMC(ref.Name)
}

// ServerRefKey is the shard key of an object acting on the server ref names: its BMC's.
func ServerRefKey(ctx context.Context, c client.Reader, o client.Object, ref *corev1.LocalObjectReference) string {
	if ref == nil || ref.Name == "" {
		return shard.KeyObject(o)
	}
	return shardkey.ServerByName(ctx, c, ref.Name)
}

// Package firmware assembles the reconcilers of the system.metal.ironcore.dev and
// baseboard.metal.ironcore.dev groups: BIOS versions and settings per server, BMC firmware per
// BMC, and their sets rolled out in waves. It owns only their options and their registration
// with the manager (Setup); the controllers live in version (BIOSVersion, BMCVersion) and
// settings (BIOSSettings, BMCSettings), the *Set rollouts in rollout, and what they share below
// them (work, flash, record, secretvalue). Nothing imports this package but the manager.
//
// They act on a Server's box through the same pool and identity proof as the metal family,
// restart it only through the Server's operation annotation (exactly once, by token), and take
// it out of service through ServerMaintenance.
package firmware

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	baseboardv1alpha1 "github.com/metalhub/metalhub/api/baseboard/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/rollout"
	"github.com/metalhub/metalhub/internal/controller/firmware/settings"
	"github.com/metalhub/metalhub/internal/controller/firmware/version"
	"github.com/metalhub/metalhub/internal/controller/firmware/work"
)

// Options configure the firmware controllers (defined in work, which every controller reads).
type Options = work.Options

// DefaultOptions are the settings for a real fleet.
func DefaultOptions() Options { return work.DefaultOptions() }

// Setup registers the firmware controllers with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if o.Pool == nil || o.Events == nil {
		return fmt.Errorf("firmware controllers need the BMC pool and the event sink")
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &systemv1alpha1.BIOSVersion{}, version.IndexServer, func(obj client.Object) []string {
		v := obj.(*systemv1alpha1.BIOSVersion)
		if v.Spec.ServerRef == nil || v.Spec.ServerRef.Name == "" {
			return nil
		}
		return []string{v.Spec.ServerRef.Name}
	}); err != nil {
		return fmt.Errorf("indexing BIOSVersions by server: %w", err)
	}
	if err := (&version.BIOSVersionReconciler{Client: mgr.GetClient(), Actor: work.Actor{Recorder: o.Events.Recorder("biosversion-controller"), Options: o}}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("biosversion controller: %w", err)
	}
	if err := (&settings.BIOSSettingsReconciler{Client: mgr.GetClient(), Actor: work.Actor{Recorder: o.Events.Recorder("biossettings-controller"), Options: o}}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("biossettings controller: %w", err)
	}
	if err := (&rollout.SetReconciler[*systemv1alpha1.BIOSSettingsSet]{Client: mgr.GetClient(), Recorder: o.Events.Recorder("biossettingsset-controller"), Options: o, Kind: rollout.BIOSSettingsSets}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("biossettingsset controller: %w", err)
	}
	if err := (&version.BMCVersionReconciler{Client: mgr.GetClient(), Actor: work.Actor{Recorder: o.Events.Recorder("bmcversion-controller"), Options: o}}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("bmcversion controller: %w", err)
	}
	if err := (&rollout.SetReconciler[*baseboardv1alpha1.BMCVersionSet]{Client: mgr.GetClient(), Recorder: o.Events.Recorder("bmcversionset-controller"), Options: o, Kind: rollout.BMCVersionSets}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("bmcversionset controller: %w", err)
	}
	if err := (&settings.BMCSettingsReconciler{Client: mgr.GetClient(), Actor: work.Actor{Recorder: o.Events.Recorder("bmcsettings-controller"), Options: o}}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("bmcsettings controller: %w", err)
	}
	if err := (&rollout.SetReconciler[*baseboardv1alpha1.BMCSettingsSet]{Client: mgr.GetClient(), Recorder: o.Events.Recorder("bmcsettingsset-controller"), Options: o, Kind: rollout.BMCSettingsSets}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("bmcsettingsset controller: %w", err)
	}
	if err := (&rollout.SetReconciler[*systemv1alpha1.BIOSVersionSet]{Client: mgr.GetClient(), Recorder: o.Events.Recorder("biosversionset-controller"), Options: o, Kind: rollout.BIOSVersionSets}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("biosversionset controller: %w", err)
	}
	return nil
}

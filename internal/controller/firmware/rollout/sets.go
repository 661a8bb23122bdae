package rollout

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	baseboardv1alpha1 "github.com/metalhub/metalhub/api/baseboard/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
)

// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biosversionsets;biossettingssets,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biosversionsets/status;biossettingssets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biosversionsets/finalizers;biossettingssets/finalizers;biosversions/finalizers;biossettings/finalizers,verbs=update
// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biosversions;biossettings,verbs=create;delete
// +kubebuilder:rbac:groups=baseboard.metal.ironcore.dev,resources=bmcversionsets;bmcsettingssets,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=baseboard.metal.ironcore.dev,resources=bmcversionsets/status;bmcsettingssets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=baseboard.metal.ironcore.dev,resources=bmcversionsets/finalizers;bmcsettingssets/finalizers;bmcversions/finalizers;bmcsettings/finalizers,verbs=update
// +kubebuilder:rbac:groups=baseboard.metal.ironcore.dev,resources=bmcversions;bmcsettings,verbs=create;delete
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverclaims,verbs=get;list;watch

// The four *Set kinds.

var BIOSVersionSets = SetKind[*systemv1alpha1.BIOSVersionSet]{
	kind: "BIOSVersionSet", name: "biosversionset",
	newSet: func() *systemv1alpha1.BIOSVersionSet { return &systemv1alpha1.BIOSVersionSet{} }, setList: &systemv1alpha1.BIOSVersionSetList{},
	child: &systemv1alpha1.BIOSVersion{}, children: func() client.ObjectList { return &systemv1alpha1.BIOSVersionList{} },
	target: &metalv1alpha1.Server{},
	plan: func(ctx context.Context, c client.Reader, set *systemv1alpha1.BIOSVersionSet, l client.ObjectList) (setRollout, error) {
		targets, err := serverTargets(ctx, c, set.Spec.ServerSelector)
		in := setRollout{targets: targets, rollout: set.Spec.Rollout, newChild: func(server string) client.Object {
			return &systemv1alpha1.BIOSVersion{Spec: systemv1alpha1.BIOSVersionSpec{
				BIOSVersionTemplate: *set.Spec.BIOSVersionTemplate.DeepCopy(), ServerRef: &corev1.LocalObjectReference{Name: server}}}
		}}
		for i := range l.(*systemv1alpha1.BIOSVersionList).Items {
			ch := &l.(*systemv1alpha1.BIOSVersionList).Items[i]
			if ch.Spec.ServerRef != nil {
				in.children = append(in.children, setChild{obj: ch, server: ch.Spec.ServerRef.Name, maint: ch.Spec.ServerMaintenanceRef,
					matches: equality.Semantic.DeepEqual(ch.Spec.BIOSVersionTemplate, set.Spec.BIOSVersionTemplate)})
			}
		}
		return in, err
	},
	status: func(set *systemv1alpha1.BIOSVersionSet) setStatus {
		st := &set.Status
		return setStatus{observed: &st.ObservedGeneration, conditions: &st.Conditions, rollout: &st.Rollout, counts: func(total, made int32, n setCounts) {
			st.FullyLabeledServers, st.AvailableBIOSVersion = total, made
			st.PendingBIOSVersion, st.InProgressBIOSVersion, st.CompletedBIOSVersion, st.FailedBIOSVersion = n.pending, n.inProgress, n.completed, n.failed
		}}
	},
}

var BIOSSettingsSets = SetKind[*systemv1alpha1.BIOSSettingsSet]{
	kind: "BIOSSettingsSet", name: "biossettingsset",
	newSet: func() *systemv1alpha1.BIOSSettingsSet { return &systemv1alpha1.BIOSSettingsSet{} }, setList: &systemv1alpha1.BIOSSettingsSetList{},
	child: &systemv1alpha1.BIOSSettings{}, children: func() client.ObjectList { return &systemv1alpha1.BIOSSettingsList{} },
	target: &metalv1alpha1.Server{},
	plan: func(ctx context.Context, c client.Reader, set *systemv1alpha1.BIOSSettingsSet, l client.ObjectList) (setRollout, error) {
		targets, err := serverTargets(ctx, c, set.Spec.ServerSelector)
		in := setRollout{targets: targets, rollout: set.Spec.Rollout, newChild: func(server string) client.Object {
			return &systemv1alpha1.BIOSSettings{Spec: systemv1alpha1.BIOSSettingsSpec{
				BIOSSettingsTemplate: *set.Spec.BIOSSettingsTemplate.DeepCopy(), ServerRef: &corev1.LocalObjectReference{Name: server}}}
		}}
		for i := range l.(*systemv1alpha1.BIOSSettingsList).Items {
			ch := &l.(*systemv1alpha1.BIOSSettingsList).Items[i]
			if ch.Spec.ServerRef != nil {
				in.children = append(in.children, setChild{obj: ch, server: ch.Spec.ServerRef.Name, maint: ch.Spec.ServerMaintenanceRef,
					matches: equality.Semantic.DeepEqual(ch.Spec.BIOSSettingsTemplate, set.Spec.BIOSSettingsTemplate)})
			}
		}
		return in, err
	},
	status: func(set *systemv1alpha1.BIOSSettingsSet) setStatus {
		st := &set.Status
		return setStatus{observed: &st.ObservedGeneration, conditions: &st.Conditions, rollout: &st.Rollout, counts: func(total, made int32, n setCounts) {
			st.FullyLabeledServers, st.AvailableBIOSSettings = total, made
			st.PendingBIOSSettings, st.InProgressBIOSSettings, st.CompletedBIOSSettings, st.FailedBIOSSettings = n.pending, n.inProgress, n.completed, n.failed
		}}
	},
}

var BMCVersionSets = SetKind[*baseboardv1alpha1.BMCVersionSet]{
	kind: "BMCVersionSet", name: "bmcversionset",
	newSet: func() *baseboardv1alpha1.BMCVersionSet { return &baseboardv1alpha1.BMCVersionSet{} }, setList: &baseboardv1alpha1.BMCVersionSetList{},
	child: &baseboardv1alpha1.BMCVersion{}, children: func() client.ObjectList { return &baseboardv1alpha1.BMCVersionList{} },
	target: &metalv1alpha1.BMC{},
	plan: func(ctx context.Context, c client.Reader, set *baseboardv1alpha1.BMCVersionSet, l client.ObjectList) (setRollout, error) {
		targets, err := bmcTargets(ctx, c, set.Spec.BMCSelector)
		in := setRollout{targets: targets, rollout: set.Spec.Rollout, newChild: func(name string) client.Object {
			return &baseboardv1alpha1.BMCVersion{Spec: baseboardv1alpha1.BMCVersionSpec{
				BMCVersionTemplate: *set.Spec.BMCVersionTemplate.DeepCopy(), BMCRef: &corev1.LocalObjectReference{Name: name}}}
		}}
		for i := range l.(*baseboardv1alpha1.BMCVersionList).Items {
			ch := &l.(*baseboardv1alpha1.BMCVersionList).Items[i]
			if ch.Spec.BMCRef != nil {
				in.children = append(in.children, setChild{obj: ch, server: ch.Spec.BMCRef.Name,
					matches: equality.Semantic.DeepEqual(ch.Spec.BMCVersionTemplate, set.Spec.BMCVersionTemplate)})
			}
		}
		return in, err
	},
	status: func(set *baseboardv1alpha1.BMCVersionSet) setStatus {
		st := &set.Status
		return setStatus{observed: &st.ObservedGeneration, conditions: &st.Conditions, rollout: &st.Rollout, counts: func(total, made int32, n setCounts) {
			st.FullyLabeledBMCs, st.AvailableBMCVersion = total, made
			st.PendingBMCVersion, st.InProgressBMCVersion, st.CompletedBMCVersion, st.FailedBMCVersion = n.pending, n.inProgress, n.completed, n.failed
		}}
	},
}

var BMCSettingsSets = SetKind[*baseboardv1alpha1.BMCSettingsSet]{
	kind: "BMCSettingsSet", name: "bmcsettingsset",
	newSet: func() *baseboardv1alpha1.BMCSettingsSet { return &baseboardv1alpha1.BMCSettingsSet{} }, setList: &baseboardv1alpha1.BMCSettingsSetList{},
	child: &baseboardv1alpha1.BMCSettings{}, children: func() client.ObjectList { return &baseboardv1alpha1.BMCSettingsList{} },
	target: &metalv1alpha1.BMC{},
	plan: func(ctx context.Context, c client.Reader, set *baseboardv1alpha1.BMCSettingsSet, l client.ObjectList) (setRollout, error) {
		targets, err := bmcTargets(ctx, c, set.Spec.BMCSelector)
		in := setRollout{targets: targets, rollout: set.Spec.Rollout, newChild: func(name string) client.Object {
			return &baseboardv1alpha1.BMCSettings{Spec: baseboardv1alpha1.BMCSettingsSpec{
				BMCSettingsTemplate: *set.Spec.BMCSettingsTemplate.DeepCopy(), BMCRef: &corev1.LocalObjectReference{Name: name}}}
		}}
		for i := range l.(*baseboardv1alpha1.BMCSettingsList).Items {
			ch := &l.(*baseboardv1alpha1.BMCSettingsList).Items[i]
			if ch.Spec.BMCRef != nil {
				in.children = append(in.children, setChild{obj: ch, server: ch.Spec.BMCRef.Name,
					matches: equality.Semantic.DeepEqual(ch.Spec.BMCSettingsTemplate, set.Spec.BMCSettingsTemplate)})
			}
		}
		return in, err
	},
	status: func(set *baseboardv1alpha1.BMCSettingsSet) setStatus {
		st := &set.Status
		return setStatus{observed: &st.ObservedGeneration, conditions: &st.Conditions, rollout: &st.Rollout, counts: func(total, made int32, n setCounts) {
			st.FullyLabeledBMCs, st.AvailableBMCSettings = total, made
			st.PendingBMCSettings, st.InProgressBMCSettings, st.CompletedBMCSettings, st.FailedBMCSettings = n.pending, n.inProgress, n.completed, n.failed
		}}
	},
}

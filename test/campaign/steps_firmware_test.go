package campaign

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
)

// biosName is the BIOSVersion a kFirmware step (by ID) creates.
func biosName(id int) string { return fmt.Sprintf("bios-%d", id) }

// upgrade sets the step's firmware fault on BMC i and asks for a BIOS upgrade of its server, in
// an Enforced maintenance (a claimed server is taken without its owner's approval).
func (w *world) upgrade(st step, i int) (string, error) {
	if !featuresOf(w.slots[0].bin).firmware {
		return "", errSkip("the manager binary has no firmware controllers")
	}
	out := ""
	if st.Fault != "" {
		var err error
		if out, err = w.fault(st, i, true); err != nil {
			return out, err
		}
		out += ", "
	}
	name := biosName(st.ID)
	if st.Set {
		return w.upgradeSet(st, i, name, out)
	}
	v := &systemv1alpha1.BIOSVersion{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: systemv1alpha1.BIOSVersionSpec{
		ServerRef: &corev1.LocalObjectReference{Name: w.serverName(i)},
		BIOSVersionTemplate: systemv1alpha1.BIOSVersionTemplate{Version: fmt.Sprintf("campaign-%d", st.ID),
			ServerMaintenancePolicy: metalv1alpha1.ServerMaintenancePolicyEnforced,
			Image:                   systemv1alpha1.ImageSpec{URI: fmt.Sprintf("http://fw.example/campaign/%d/%s.bin", w.sch.Seed, name)}}}}
	if err := w.c.Create(w.ctx, v); err != nil {
		return out, err
	}
	w.m.poke()
	return out + fmt.Sprintf("created BIOSVersion %s for %s", name, w.serverName(i)), nil
}

// setLabel marks the servers a campaign BIOSVersionSet selects.
const setLabel = "campaign.metalhub.io/bios-set"

// upgradeSet asks for a BIOS upgrade of server i and the next one as a BIOSVersionSet that works
// on one at a time: the model holds it to one flash per box and to its wave size, and a deletion
// mid-flash to neither.
func (w *world) upgradeSet(st step, i int, name, out string) (string, error) {
	targets := []int{i, (i + 1) % w.sch.BMCs}
	for _, j := range targets {
		err := w.patch(client.ObjectKey{Name: w.serverName(j)}, &metalv1alpha1.Server{}, func(o client.Object) error {
			l := o.GetLabels()
			if l == nil {
				l = map[string]string{}
			}
			l[setLabel] = name
			o.SetLabels(l)
			return nil
		})
		if client.IgnoreNotFound(err) != nil {
			return out, err
		}
	}
	one := intstr.FromInt32(1)
	set := &systemv1alpha1.BIOSVersionSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: systemv1alpha1.BIOSVersionSetSpec{
		ServerSelector: metav1.LabelSelector{MatchLabels: map[string]string{setLabel: name}},
		BIOSVersionTemplate: systemv1alpha1.BIOSVersionTemplate{Version: fmt.Sprintf("campaign-%d", st.ID),
			ServerMaintenancePolicy: metalv1alpha1.ServerMaintenancePolicyEnforced,
			Image:                   systemv1alpha1.ImageSpec{URI: setImage(w.sch.Seed, name)}},
		Rollout: &systemv1alpha1.RolloutSpec{MaxUnavailable: &one}}}
	if err := w.c.Create(w.ctx, set); err != nil {
		return out, err
	}
	w.m.poke()
	return out + fmt.Sprintf("created BIOSVersionSet %s for %s and %s", name, w.serverName(targets[0]), w.serverName(targets[1])), nil
}

// setImage is a campaign BIOSVersionSet's image: every box it selects gets it (the model tells a
// set's images by setImagePart).
func setImage(seed uint64, name string) string {
	return fmt.Sprintf("http://fw.example/campaign/%d/%s%s.bin", seed, setImagePart, name)
}

const setImagePart = "set-"

package server

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/inventory"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// matchRootDevice picks the disk hints select among drives: every hint given must hold, and of
// several the smallest is taken (as Ironic picks a root disk), ties broken by name, so the same
// inventory always gives the same disk.
func matchRootDevice(drives []metalv1alpha1.StorageDrive, h metalv1alpha1.RootDeviceHints) (metalv1alpha1.StorageDrive, bool) {
	var found []metalv1alpha1.StorageDrive
	for _, d := range drives {
		if matchesHints(d, h) {
			found = append(found, d)
		}
	}
	if len(found) == 0 {
		return metalv1alpha1.StorageDrive{}, false
	}
	slices.SortFunc(found, func(a, b metalv1alpha1.StorageDrive) int {
		return cmp.Or(cmp.Compare(sizeOf(a), sizeOf(b)), cmp.Compare(a.Name, b.Name))
	})
	return found[0], true
}

func matchesHints(d metalv1alpha1.StorageDrive, h metalv1alpha1.RootDeviceHints) bool {
	contains := func(have, want string) bool {
		return strings.Contains(strings.ToLower(have), strings.ToLower(strings.TrimSpace(want)))
	}
	switch {
	case h.DeviceName != "" && d.Name != strings.TrimPrefix(strings.TrimSpace(h.DeviceName), "/dev/"):
	case h.Model != "" && !contains(d.Model, h.Model):
	case h.Vendor != "" && !contains(d.Vendor, h.Vendor):
	case h.SerialNumber != "" && !strings.EqualFold(strings.TrimSpace(d.SerialNumber), strings.TrimSpace(h.SerialNumber)):
	case h.WWN != "" && (d.WWN == "" || bareWWN(d.WWN) != bareWWN(h.WWN)):
	case h.MinSizeGigabytes > 0 && sizeOf(d) < int64(h.MinSizeGigabytes)<<30:
	case h.Rotational != nil && *h.Rotational != (d.MediaType == "HDD"):
	default:
		return true
	}
	return false
}

// bareWWN drops the naming authority the kernel puts before a WWN (naa., eui., t10., or a
// 0x), so a hint copied from a vendor's sheet matches what the OS reports.
func bareWWN(w string) string {
	w = strings.ToLower(strings.TrimSpace(w))
	for _, p := range []string{"naa.", "eui.", "t10.", "nvme.", "0x"} {
		w = strings.TrimPrefix(w, p)
	}
	return w
}

func sizeOf(d metalv1alpha1.StorageDrive) int64 {
	if d.Capacity == nil {
		return 0
	}
	return d.Capacity.Value()
}

// ensureRootDevice resolves the root device hints of sbc against the server's discovered disks
// (its inventory record, which a wiped status does not lose) and reports the disk in the boot
// configuration's status.rootDevice before the box boots it, for the installer the boot
// provider serves. No disk matching is the BootMethod condition's (RootDeviceNotFound), and
// nothing is booted instead. The status is written only when it differs: a pass repeated after
// a crash writes nothing.
func (r *Reconciler) ensureRootDevice(ctx context.Context, p *serverPass, sbc *metalv1alpha1.ServerBootConfiguration) (err error) {
	h := sbc.Spec.RootDeviceHints
	if h == nil {
		return nil
	}
	defer func() { p.noteBootProblem(err) }()
	drives, err := r.discoveredDrives(ctx, p.Obj)
	if err != nil {
		return err
	}
	if len(drives) == 0 {
		return lifecycle.WithReason(metalv1alpha1.ReasonRootDeviceNotFound,
			fmt.Errorf("root device hints of boot configuration %s/%s: the server has no discovered disks to match them against", sbc.Namespace, sbc.Name))
	}
	d, ok := matchRootDevice(drives, *h)
	if !ok {
		names := make([]string, len(drives))
		for i, x := range drives {
			names[i] = cmp.Or(x.Name, x.SerialNumber)
		}
		return lifecycle.WithReason(metalv1alpha1.ReasonRootDeviceNotFound,
			fmt.Errorf("no disk of the server (%s) matches the root device hints of boot configuration %s/%s", strings.Join(names, ", "), sbc.Namespace, sbc.Name))
	}
	want := &metalv1alpha1.RootDevice{Name: d.Name, SerialNumber: d.SerialNumber, WWN: d.WWN, Model: d.Model, SizeBytes: sizeOf(d)}
	if sbc.Status.RootDevice != nil && *sbc.Status.RootDevice == *want {
		return nil
	}
	patch := client.MergeFrom(sbc.DeepCopy())
	sbc.Status.RootDevice = want
	if err := r.Client.Status().Patch(ctx, sbc, patch); err != nil {
		return fmt.Errorf("reporting the root device of boot configuration %s/%s: %w", sbc.Namespace, sbc.Name, err)
	}
	r.Recorder.Eventf(p.Obj, sbc, corev1.EventTypeNormal, "RootDeviceResolved", "Boot",
		"root device hints of boot configuration %s/%s resolve to %s (serial %s, %d bytes)", sbc.Namespace, sbc.Name, d.Name, d.SerialNumber, sizeOf(d))
	return nil
}

// discoveredDrives are the server's disks as its last discovery found them: its inventory
// record's, else its status's.
func (r *Reconciler) discoveredDrives(ctx context.Context, s *metalv1alpha1.Server) ([]metalv1alpha1.StorageDrive, error) {
	storages := s.Status.Storages
	cm := &corev1.ConfigMap{}
	err := r.reader().Get(ctx, client.ObjectKey{Namespace: r.Options.DiscoveryNamespace, Name: inventory.ObjectName(s.Name)}, cm)
	switch {
	case err == nil:
		if rec, derr := inventory.Decode(cm); derr == nil && len(rec.Current.Storages) > 0 {
			storages = rec.Current.Storages
		}
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading the inventory record: %w", err)
	}
	var out []metalv1alpha1.StorageDrive
	for _, st := range storages {
		out = append(out, st.Drives...)
	}
	return out, nil
}

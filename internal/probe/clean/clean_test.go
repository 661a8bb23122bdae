package clean

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/metalhub/metalhub/internal/probe"
)

func TestPlan(t *testing.T) {
	disks := []probe.BlockDevice{
		{Name: "sdb", SizeBytes: 4 << 40},
		{Name: "nvme1n1", SizeBytes: 960 << 30},
		{Name: "nvme0n1", SizeBytes: 960 << 30},
		{Name: "sdz", SizeBytes: 1 << 30},                   // too small for a root disk
		{Name: "sdc", SizeBytes: 64 << 30, Removable: true}, // a USB stick
	}
	for _, tc := range []struct {
		policy string
		want   map[string]string // name -> role
		err    bool
	}{
		{policy: probe.CleaningMetadata, want: map[string]string{"nvme0n1": probe.RoleMetadata, "nvme1n1": probe.RoleMetadata, "sdb": probe.RoleMetadata, "sdc": probe.RoleSkip, "sdz": probe.RoleMetadata}},
		// The smallest big-enough disk, the first by name among equals.
		{policy: probe.CleaningRootDisk, want: map[string]string{"nvme0n1": probe.RoleSanitize, "nvme1n1": probe.RoleMetadata, "sdb": probe.RoleMetadata, "sdc": probe.RoleSkip, "sdz": probe.RoleMetadata}},
		{policy: probe.CleaningAllDisks, want: map[string]string{"nvme0n1": probe.RoleSanitize, "nvme1n1": probe.RoleSanitize, "sdb": probe.RoleSanitize, "sdc": probe.RoleSkip, "sdz": probe.RoleSanitize}},
		{policy: "None", err: true},
		{policy: "", err: true},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			plan, err := Plan(disks, tc.policy)
			if tc.err {
				if err == nil {
					t.Fatalf("plan %+v, want an error", plan)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for i, p := range plan {
				got[p.Disk.Name] = p.Role
				if i > 0 && plan[i-1].Disk.Name > p.Disk.Name {
					t.Errorf("plan not sorted by name: %v", plan)
				}
				if (p.Role == probe.RoleSkip) != (p.Skipped != "") {
					t.Errorf("%s: role %s, skipped %q", p.Disk.Name, p.Role, p.Skipped)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("roles %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := Plan([]probe.BlockDevice{{Name: "sda", SizeBytes: 1 << 30}}, probe.CleaningRootDisk); err == nil {
		t.Fatal("RootDisk without a disk big enough for a root disk planned something")
	}
}

// machine writes a sysfs tree with the disks (name -> size in bytes) and, in devDir, a file per
// disk full of random bytes standing in for the tenant's data. A disk named in missing gets no
// file, as a disk the kernel lists but cannot open.
func machine(t *testing.T, disks map[string]int64, missing ...string) (root, devDir string) {
	t.Helper()
	root, devDir = t.TempDir(), t.TempDir()
	write := func(p, s string) {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sys/class/dmi/id/product_uuid", "4C4C4544-0000-0000-0000-000000000001")
	for name, size := range disks {
		write("sys/block/"+name+"/size", fmt.Sprint(size/512))
		write("sys/block/"+name+"/device/serial", "SER-"+name)
		write("sys/block/"+name+"/removable", "0")
		if contains(missing, name) {
			continue
		}
		data := make([]byte, size)
		if _, err := rand.Read(data); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(devDir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root, devDir
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// The agent erases every disk as the policy asks, for real, and its report says so per disk,
// with the serial the kernel gives and the DMI UUID of the machine.
func TestRunErasesTheDisksItReports(t *testing.T) {
	root, dev := machine(t, map[string]int64{"vda": 16 << 20, "vdb": 24 << 20})
	rep, err := Run(context.Background(), Options{Root: root, DevDir: dev, Policy: probe.CleaningAllDisks, ServerUUID: "srv-uuid"})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Validate(); err != nil {
		t.Fatalf("the agent's own report is invalid: %v", err)
	}
	if rep.SystemUUID != "srv-uuid" || rep.DMIUUID != "4c4c4544-0000-0000-0000-000000000001" || len(rep.Disks) != 2 {
		t.Fatalf("report %+v", rep)
	}
	for _, d := range rep.Disks {
		if d.Role != probe.RoleSanitize || d.Proof == nil || !d.Proof.Verified || d.Proof.Serial != "SER-"+d.Name {
			t.Fatalf("disk %+v, proof %+v", d, d.Proof)
		}
		b, err := os.ReadFile(filepath.Join(dev, d.Name))
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range b {
			if c != 0 {
				t.Fatalf("%s: byte %d still holds data after a verified erase", d.Name, i)
			}
		}
	}
}

// A disk that cannot be opened does not stop the others; the report names it as not erased.
func TestRunReportsADiskItCouldNotErase(t *testing.T) {
	root, dev := machine(t, map[string]int64{"vda": 8 << 20, "vdb": 8 << 20}, "vdb")
	rep, err := Run(context.Background(), Options{Root: root, DevDir: dev, Policy: probe.CleaningMetadata})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]probe.DiskCleaning{}
	for _, d := range rep.Disks {
		byName[d.Name] = d
	}
	if p := byName["vda"].Proof; p == nil || !p.Verified {
		t.Fatalf("vda: %+v", p)
	}
	if p := byName["vdb"].Proof; p == nil || p.Verified || p.Failure == "" {
		t.Fatalf("vdb, which has no device, is not reported as failed: %+v", p)
	}
}

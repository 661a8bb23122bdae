package probe

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/metalhub/metalhub/internal/probe/erase"
)

// CleanPath is where the registry accepts cleaning reports (POST, JSON, Authorization: Bearer
// <the cleaning round's token>).
const CleanPath = "/v1/cleaning"

// Cleaning policies, as the Server API names them (metal.ironcore.dev CleaningPolicy).
const (
	CleaningMetadata = "Metadata"
	CleaningRootDisk = "RootDisk"
	CleaningAllDisks = "AllDisks"
)

// Disk roles in a cleaning: what the policy asked of the disk.
const (
	// RoleSanitize: the whole disk erased and read back.
	RoleSanitize = "Sanitize"
	// RoleMetadata: partition tables and signatures wiped.
	RoleMetadata = "Metadata"
	// RoleSkip: left alone (removable media); Skipped says why.
	RoleSkip = "Skip"
)

// CleaningReport is what the cleaning agent sends once it has erased a server's disks.
type CleaningReport struct {
	// Version of the format (ReportVersion).
	Version int `json:"version"`
	// SystemUUID is the server the agent speaks for (--server-uuid, else DMI).
	SystemUUID string `json:"systemUUID"`
	// DMIUUID is the machine's own DMI system UUID: the registry refuses a report from
	// another machine than the server's.
	DMIUUID string `json:"dmiUUID"`
	// Policy is what the agent was asked to do.
	Policy string `json:"policy"`
	// Disks are every disk the agent found, with what it did to each.
	Disks []DiskCleaning `json:"disks"`
}

// DiskCleaning is one disk of a cleaning.
type DiskCleaning struct {
	BlockDevice `json:",inline"`
	// Role is what the policy asked of the disk.
	Role string `json:"role"`
	// Skipped says why a disk was left alone (Role Skip).
	Skipped string `json:"skipped,omitempty"`
	// Proof is what erasing it showed (nil for a skipped disk).
	Proof *erase.Proof `json:"proof,omitempty"`
}

// Validate checks a cleaning report's shape and sizes; the registry refuses reports that fail it.
func (r *CleaningReport) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if r.Version != ReportVersion {
		bad("version %d is not supported (want %d)", r.Version, ReportVersion)
	}
	if r.SystemUUID == "" || len(r.SystemUUID) > MaxStringLen || len(r.DMIUUID) > MaxStringLen {
		bad("systemUUID must be 1-%d bytes and dmiUUID at most %d", MaxStringLen, MaxStringLen)
	}
	switch r.Policy {
	case CleaningMetadata, CleaningRootDisk, CleaningAllDisks:
	default:
		bad("policy %q is not one of Metadata, RootDisk, AllDisks", r.Policy)
	}
	if len(r.Disks) > MaxBlockDevices {
		bad("%d disks, at most %d", len(r.Disks), MaxBlockDevices)
	}
	for i, d := range r.Disks {
		if d.Name == "" || d.SizeBytes < 0 {
			bad("disks[%d]: needs a name and a size >= 0", i)
		}
		for _, s := range []string{d.Name, d.Vendor, d.Model, d.Serial, d.Skipped} {
			if len(s) > MaxStringLen {
				bad("disks[%d]: a field is longer than %d bytes", i, MaxStringLen)
			}
		}
		switch d.Role {
		case RoleSkip:
		case RoleSanitize, RoleMetadata:
			if d.Proof == nil {
				bad("disks[%d]: role %s without a proof", i, d.Role)
				continue
			}
			if len(d.Proof.Failure) > 4*MaxStringLen || len(d.Proof.Tried) > 8 {
				bad("disks[%d]: proof too long", i)
			}
		default:
			bad("disks[%d]: role %q is not Sanitize, Metadata or Skip", i, d.Role)
		}
	}
	if len(errs) > 5 {
		errs = append(errs[:5], fmt.Errorf("and %d more problems", len(errs)-5))
	}
	return errors.Join(errs...)
}

// CollectDisks reads the machine's DMI identity and its disks, as Collect does, and nothing
// else: what the cleaning agent needs.
func CollectDisks(ctx context.Context, o Options) (System, []BlockDevice, error) {
	o = o.withDefaults()
	if st, err := os.Stat(o.Root); err != nil || !st.IsDir() {
		return System{}, nil, fmt.Errorf("collecting disks: root %q is not a directory", o.Root)
	}
	fs := sysfs{root: o.Root, log: o.Logger}
	devs, err := collectBlockDevices(ctx, fs)
	return collectSystem(fs, o.live()), devs, err
}

// Package clean is the cleaning agent: on a server booted into the discovery image for a
// cleaning round, it lists the disks, erases each as the round's policy asks (package erase),
// and reports what it did and what the read-back proved to the registry, once, with the round's
// token.
//
// It owns which disk gets what (Plan). It must not decide whether the server is clean (the
// Server controller judges the report), must not touch a disk the plan does not name, and
// reaches metalhub only through the report.
package clean

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/go-logr/logr"

	"github.com/metalhub/metalhub/internal/probe"
	"github.com/metalhub/metalhub/internal/probe/erase"
)

// MinRootBytes is the smallest disk taken for a root disk, as Ironic picks one without hints.
const MinRootBytes = 4 << 30

// Target is one disk and what the policy asks of it.
type Target struct {
	Disk    probe.BlockDevice
	Role    string
	Skipped string
}

// Plan says, for every disk, what policy asks: Metadata wipes the metadata of every disk,
// RootDisk sanitizes the root disk (the smallest non-removable disk of at least MinRootBytes,
// the first by name among equals) and wipes the others' metadata, AllDisks sanitizes every
// disk. Removable disks (USB sticks, virtual media) are left alone under every policy: they are
// not the server's.
func Plan(disks []probe.BlockDevice, policy string) ([]Target, error) {
	switch policy {
	case probe.CleaningMetadata, probe.CleaningRootDisk, probe.CleaningAllDisks:
	default:
		return nil, fmt.Errorf("cleaning policy %q is not Metadata, RootDisk or AllDisks", policy)
	}
	root := ""
	if policy == probe.CleaningRootDisk {
		var best *probe.BlockDevice
		for i := range disks {
			d := &disks[i]
			if d.Removable || d.SizeBytes < MinRootBytes {
				continue
			}
			if best == nil || d.SizeBytes < best.SizeBytes || (d.SizeBytes == best.SizeBytes && d.Name < best.Name) {
				best = d
			}
		}
		if best == nil {
			return nil, fmt.Errorf("no disk of at least %d GiB to take for the root disk", MinRootBytes>>30)
		}
		root = best.Name
	}
	out := make([]Target, 0, len(disks))
	for _, d := range disks {
		t := Target{Disk: d}
		switch {
		case d.Removable:
			t.Role, t.Skipped = probe.RoleSkip, "removable"
		case policy == probe.CleaningAllDisks, d.Name == root:
			t.Role = probe.RoleSanitize
		default:
			t.Role = probe.RoleMetadata
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b Target) int { return cmp.Compare(a.Disk.Name, b.Disk.Name) })
	return out, nil
}

// Options configure one cleaning.
type Options struct {
	// Root is where /sys is read (probe.Options.Root).
	Root string
	// DevDir holds the disks' device nodes by kernel name (default "/dev"; a fixture's
	// directory of files standing in for them).
	DevDir string
	// Policy is the round's cleaning policy.
	Policy string
	// ServerUUID is the server the agent speaks for (default: the DMI UUID).
	ServerUUID string
	// Samples is how many blocks each read-back samples (0: erase.DefaultSamples).
	Samples int
	Now     func() time.Time
	Logger  logr.Logger
}

// Run erases the disks as the policy asks and returns the report. Disks are erased one after
// another: erasing is bound by the disks and the bus, and one failing disk does not stop the
// others (the report names every failure). An error means no report can be made: the disks
// could not be listed, or ctx ended.
func Run(ctx context.Context, o Options) (*probe.CleaningReport, error) {
	sys, disks, err := probe.CollectDisks(ctx, probe.Options{Root: o.Root, Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	plan, err := Plan(disks, o.Policy)
	if err != nil {
		return nil, err
	}
	rep := &probe.CleaningReport{Version: probe.ReportVersion, SystemUUID: cmp.Or(o.ServerUUID, sys.UUID), DMIUUID: sys.UUID, Policy: o.Policy}
	dev := cmp.Or(o.DevDir, "/dev")
	for _, t := range plan {
		dc := probe.DiskCleaning{BlockDevice: t.Disk, Role: t.Role, Skipped: t.Skipped}
		if t.Role != probe.RoleSkip {
			p, err := eraseOne(ctx, filepath.Join(dev, t.Disk.Name), t, o)
			if err != nil && ctx.Err() != nil {
				return nil, errors.Join(ctx.Err(), err)
			}
			p.Serial, p.Model = t.Disk.Serial, t.Disk.Model
			dc.Proof = &p
			o.Logger.Info("disk cleaned", "disk", t.Disk.Name, "role", t.Role, "method", p.Method, "verified", p.Verified, "failure", p.Failure)
		}
		rep.Disks = append(rep.Disks, dc)
	}
	return rep, nil
}

// eraseOne opens, erases and closes one disk; a disk that cannot be opened or read gets a proof
// that says so.
func eraseOne(ctx context.Context, path string, t Target, o Options) (erase.Proof, error) {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	failed := func(err error) (erase.Proof, error) {
		at := now()
		return erase.Proof{Device: path, SizeBytes: t.Disk.SizeBytes, Start: at, End: at, Failure: err.Error()}, err
	}
	d, err := erase.Open(path)
	if err != nil {
		return failed(err)
	}
	defer d.Close()
	eo := erase.Options{Samples: o.Samples, Now: o.Now}
	if t.Role == probe.RoleMetadata {
		eo.Methods = []erase.Method{erase.MethodMetadata}
	}
	p, err := erase.Sanitize(ctx, d, eo)
	if err != nil && p.Failure == "" {
		p.Failure = err.Error()
		p.End = now()
	}
	return p, err
}

// Deliver posts the report until the registry holds it (nil), refuses it for good, or ctx ends,
// pausing interval between tries that the client's own retries did not settle. The disks are
// erased once: only the report is sent again.
func Deliver(ctx context.Context, c *probe.Client, rep *probe.CleaningReport, interval time.Duration, log logr.Logger) error {
	if interval <= 0 {
		interval = 30 * time.Second
	}
	for {
		ans, err := c.SendCleaning(ctx, rep)
		switch {
		case err == nil && ans.Done:
			log.Info("cleaning report accepted", "systemUUID", rep.SystemUUID)
			return nil
		case err != nil && ctx.Err() != nil:
			return errors.Join(ctx.Err(), err)
		case err != nil && probe.Permanent(err):
			return err
		case err != nil:
			log.Info("cleaning report not accepted yet", "error", err.Error())
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

package probe

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/jaypipes/ghw"
)

func TestBlockDevice(t *testing.T) {
	tests := []struct {
		name string
		disk ghw.Disk
		own  diskFiles
		want BlockDevice
	}{
		{"ghw's unknowns are empty",
			ghw.Disk{Name: "nvme0n1", SizeBytes: 960197124096, Vendor: "unknown", Model: "unknown", SerialNumber: "unknown"},
			diskFiles{model: "SAMSUNG MZQL2960HCJR-00A07"},
			BlockDevice{Name: "nvme0n1", SizeBytes: 960197124096, Model: "SAMSUNG MZQL2960HCJR-00A07"}},
		{"sysfs serial before udev's, sysfs model and rotational over ghw's",
			ghw.Disk{Name: "nvme1n1", SizeBytes: 4096, Vendor: "unknown", Model: "SAMSUNG_MZQL2960HCJR-00A07", SerialNumber: "udev-serial",
				DriveType: ghw.DriveTypeSSD},
			diskFiles{model: "SAMSUNG MZQL2960HCJR-00A07", serial: "S64FNE0R", rotational: true},
			BlockDevice{Name: "nvme1n1", SizeBytes: 4096, Model: "SAMSUNG MZQL2960HCJR-00A07", Serial: "S64FNE0R", Rotational: true}},
		{"udev serial where sysfs has none, vendor and removable from ghw",
			ghw.Disk{Name: "sdc", SizeBytes: 512, Vendor: "Kingston", SerialNumber: "E0D55EA57414F4B1", IsRemovable: true},
			diskFiles{model: "DataTraveler 3.0"},
			BlockDevice{Name: "sdc", SizeBytes: 512, Vendor: "Kingston", Model: "DataTraveler 3.0", Serial: "E0D55EA57414F4B1", Removable: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := blockDevice(&tc.disk, tc.own); got != tc.want {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// ghw reads udev's database under the root too; the probe still takes the model from sysfs.
func TestCollectBlockDevicesWithUdev(t *testing.T) {
	fs := fixtureFS(t, map[string]string{
		"sys/block/sdb/size": "7814037168\n", "sys/block/sdb/dev": "8:16\n", "sys/block/sdb/queue/rotational": "1\n",
		"sys/block/sdb/device/vendor": "ATA\n", "sys/block/sdb/device/model": "ST4000NM0035-1V4\n",
		"sys/block/sdb/device/wwid": "naa.5000c500a1b2c3d4\n",
		"run/udev/data/b8:16":       "E:ID_MODEL=ST4000NM0035-1V4\nE:ID_SERIAL_SHORT=ZC1A2B3C\nE:ID_SERIAL=ST4000NM0035-1V4_ZC1A2B3C\n",
		// md arrays of disks are rotational; ghw's drive type does not know md.
		"sys/block/md0/size": "1024\n", "sys/block/md0/queue/rotational": "1\n",
	})
	got, err := collectBlockDevices(context.Background(), fs)
	if err != nil {
		t.Fatal(err)
	}
	want := []BlockDevice{
		{Name: "md0", SizeBytes: 1024 * 512, Rotational: true},
		{Name: "sdb", SizeBytes: 7814037168 * 512, Vendor: "ATA", Model: "ST4000NM0035-1V4", Serial: "ZC1A2B3C", WWN: "naa.5000c500a1b2c3d4", Rotational: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

// GHW_* variables cannot move ghw off the probe's root, and ghw's warnings about missing files
// are V(1) messages of the probe's logger.
func TestGHWArgs(t *testing.T) {
	t.Setenv("GHW_CHROOT", "/")
	files := map[string]string{"sys/block/vdb/size": "8\n"} // no queue/rotational: ghw warns
	for _, verbosity := range []int{0, 1} {
		var lines []string
		log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: verbosity})
		fs := fixtureFS(t, files)
		fs.log = log
		got, err := collectBlockDevices(context.Background(), fs)
		if err != nil {
			t.Fatal(err)
		}
		if want := []BlockDevice{{Name: "vdb", SizeBytes: 4096}}; !reflect.DeepEqual(got, want) {
			t.Fatalf("got %+v, want %+v: ghw left the root", got, want)
		}
		text := strings.Join(lines, "\n")
		if verbosity == 0 && text != "" {
			t.Errorf("at V(0) the probe logged %q", text)
		}
		if verbosity == 1 && !strings.Contains(text, `"level"=1 "msg"="failed to read int from file: open `+fs.path("sys/block/vdb/queue/rotational")) {
			t.Errorf("at V(1) the probe logged %q, want ghw's warning about rotational at level 1", text)
		}
	}
	// A zero logger (the tests' Options{}) swallows ghw's messages.
	fs := fixtureFS(t, files)
	fs.log = logr.Logger{}
	if _, err := collectBlockDevices(context.Background(), fs); err != nil {
		t.Fatal(err)
	}
}

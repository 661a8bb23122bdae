package probe

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestCollectSystem(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  System
	}{
		{"full DMI", map[string]string{
			"sys/class/dmi/id/product_uuid":   "4C4C4544-0042-3510-8056-B2C04F4B3732\n",
			"sys/class/dmi/id/sys_vendor":     "Dell Inc.\n",
			"sys/class/dmi/id/product_name":   "PowerEdge R650\n",
			"sys/class/dmi/id/product_serial": "7K5VK32\n",
			"sys/class/dmi/id/bios_version":   "1.13.2\n",
			"proc/sys/kernel/arch":            "x86_64\n",
		}, System{UUID: "4c4c4544-0042-3510-8056-b2c04f4b3732", Vendor: "Dell Inc.", Product: "PowerEdge R650",
			Serial: "7K5VK32", BIOSVersion: "1.13.2", Architecture: "x86_64"}},
		{"serial root-only, no arch", map[string]string{
			"sys/class/dmi/id/sys_vendor": "QEMU",
		}, System{Vendor: "QEMU"}},
		{"no DMI at all", map[string]string{"proc/<dir>": "<dir>"}, System{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := collectSystem(fixtureFS(t, tc.files), false); got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// cpuinfoX86 writes /proc/cpuinfo blocks for (socket, core) pairs in processor order.
func cpuinfoX86(model string, mhz string, topo [][2]int) string {
	var b strings.Builder
	for i, st := range topo {
		b.WriteString("processor\t: " + itoa(i) + "\nvendor_id\t: GenuineIntel\nmodel name\t: " + model +
			"\ncpu MHz\t\t: " + mhz + "\nphysical id\t: " + itoa(st[0]) + "\ncore id\t\t: " + itoa(st[1]) + "\n\n")
	}
	return b.String()
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestCollectCPUs(t *testing.T) {
	const xeon = "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"
	// 2 sockets x 2 cores x 2 threads; Linux numbers the first thread of every core first.
	topo := [][2]int{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {0, 0}, {0, 1}, {1, 0}, {1, 1}}
	sysTopo := map[string]string{"sys/devices/system/cpu/online": "0-7\n"}
	for i, st := range topo {
		d := "sys/devices/system/cpu/cpu" + itoa(i) + "/"
		sysTopo[d+"topology/physical_package_id"] = itoa(st[0])
		sysTopo[d+"topology/core_id"] = itoa(st[1])
		sysTopo[d+"topology/die_id"] = "0"
		sysTopo[d+"cpufreq/cpuinfo_max_freq"] = "3200000"
	}
	sysTopo["proc/cpuinfo"] = cpuinfoX86(xeon, "2000.000", topo)

	tests := []struct {
		name  string
		files map[string]string
		want  []CPU
	}{
		{"two sockets from sysfs topology", sysTopo, []CPU{
			{Socket: 0, Vendor: "GenuineIntel", Model: xeon, Cores: 2, Threads: 4, MaxMHz: 3200},
			{Socket: 1, Vendor: "GenuineIntel", Model: xeon, Cores: 2, Threads: 4, MaxMHz: 3200},
		}},
		{"cpuinfo only (no sysfs)", map[string]string{
			"proc/cpuinfo": cpuinfoX86(xeon, "2593.906", [][2]int{{0, 0}, {0, 1}, {0, 0}, {0, 1}}),
		}, []CPU{{Socket: 0, Vendor: "GenuineIntel", Model: xeon, Cores: 2, Threads: 4, MaxMHz: 2594}}},
		{"offline CPUs are not counted", map[string]string{
			"sys/devices/system/cpu/online": "0,2-3\n",
			"proc/cpuinfo":                  cpuinfoX86("EPYC", "2600", [][2]int{{0, 0}, {0, 2}, {0, 3}}),
		}, []CPU{{Socket: 0, Vendor: "GenuineIntel", Model: "EPYC", Cores: 3, Threads: 3, MaxMHz: 2600}}},
		{"arm64 without physical id", map[string]string{
			"sys/devices/system/cpu/online": "0-1",
			"proc/cpuinfo": "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n\n" +
				"processor\t: 1\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n\n",
		}, []CPU{{Socket: 0, Vendor: "0x41", Cores: 2, Threads: 2}}},
		{"sysfs dirs without online file", map[string]string{
			"sys/devices/system/cpu/cpu0/topology/core_id": "0",
			"sys/devices/system/cpu/cpu1/topology/core_id": "0",
			"sys/devices/system/cpu/cpufreq/<dir>":         "<dir>",
		}, []CPU{{Socket: 0, Cores: 1, Threads: 2}}},
		{"nothing readable", map[string]string{"proc/<dir>": "<dir>"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := collectCPUs(fixtureFS(t, tc.files))
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"0", []int{0}, false},
		{"0-3", []int{0, 1, 2, 3}, false},
		{"0-1,4,6-7", []int{0, 1, 4, 6, 7}, false},
		{"", nil, false},
		{"x", nil, true},
		{"3-1", nil, true},
	}
	for _, tc := range tests {
		got, err := parseCPUList(tc.in)
		if (err != nil) != tc.wantErr || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v, err %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestCollectMemory(t *testing.T) {
	tests := []struct {
		name    string
		meminfo string
		want    int64
	}{
		{"MemTotal in kB", "MemTotal:       24684084 kB\nMemFree:        21354444 kB\n", 24684084 * 1024},
		{"MemTotal not first", "Foo: 1 kB\nMemTotal: 1024 kB\n", 1024 * 1024},
		{"garbage", "MemTotal: lots\n", 0},
		{"missing", "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"proc/<dir>": "<dir>"}
			if tc.meminfo != "" {
				files["proc/meminfo"] = tc.meminfo
			}
			if got := collectMemory(fixtureFS(t, files)); got != tc.want {
				t.Fatalf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func nicFiles(name, mac, carrier, speed string, physical bool) map[string]string {
	d := "sys/class/net/" + name + "/"
	m := map[string]string{d + "address": mac + "\n", d + "type": "1\n", d + "mtu": "1500\n", d + "operstate": "up\n"}
	if carrier != "" {
		m[d+"carrier"] = carrier + "\n"
	}
	if speed != "" {
		m[d+"speed"] = speed + "\n"
	}
	if physical {
		m[d+"device/vendor"] = "0x8086"
	}
	return m
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func TestCollectNICs(t *testing.T) {
	downNoCarrier := nicFiles("eno2", "b0:26:28:00:00:02", "", "", true)
	downNoCarrier["sys/class/net/eno2/operstate"] = "down\n"
	tests := []struct {
		name    string
		files   map[string]string
		want    []NIC
		wantErr string
	}{
		{"physical, virtual, loopback, tunnel and addresses", merge(
			nicFiles("eno1", "B0:26:28:00:00:01", "1", "25000", true),
			downNoCarrier,
			nicFiles("br0", "02:00:00:00:00:09", "0", "-1", false),
			map[string]string{
				"sys/class/net/lo/address": "00:00:00:00:00:00\n", "sys/class/net/lo/type": "772\n",
				"sys/class/net/tun0/address": "\n", "sys/class/net/tun0/type": "65534\n",
				FixtureAddresses: "# fixture\neno1 10.0.0.5/24\neno1 fe80::1%eno1/64\neno1 10.0.0.5\nbr0 192.168.1.1\n",
			}), []NIC{
			{Name: "br0", MAC: "02:00:00:00:00:09", Carrier: "down", MTU: 1500, Virtual: true, IPs: []string{"192.168.1.1"}},
			{Name: "eno1", MAC: "b0:26:28:00:00:01", Carrier: "up", SpeedMbps: 25000, MTU: 1500, IPs: []string{"10.0.0.5", "fe80::1"}},
			{Name: "eno2", MAC: "b0:26:28:00:00:02", Carrier: "down", MTU: 1500},
		}, ""},
		{"no addresses file", nicFiles("eth0", "52:54:00:12:34:56", "1", "", true), []NIC{
			{Name: "eth0", MAC: "52:54:00:12:34:56", Carrier: "up", MTU: 1500},
		}, ""},
		{"no /sys/class/net", map[string]string{"sys/<dir>": "<dir>"}, nil, ""},
		{"malformed addresses file", merge(nicFiles("eth0", "52:54:00:12:34:56", "1", "", true),
			map[string]string{FixtureAddresses: "eth0 not-an-ip\n"}), nil, "not-an-ip"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := collectNICs(fixtureFS(t, tc.files), false)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestCollectBlockDevices(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []BlockDevice
	}{
		{"disks kept, kernel devices skipped", map[string]string{
			"sys/block/sda/size": "3907029168\n", "sys/block/sda/queue/rotational": "1\n", "sys/block/sda/removable": "0\n",
			"sys/block/sda/device/vendor": "ATA     \n", "sys/block/sda/device/model": "ST2000NM0055-1V4\n",
			"sys/block/nvme0n1/size": "1875385008\n", "sys/block/nvme0n1/queue/rotational": "0\n",
			"sys/block/nvme0n1/device/model": "SAMSUNG MZQL2960HCJR-00A07\n", "sys/block/nvme0n1/device/serial": "S64FNE0R\n",
			"sys/block/vda/size": "2048\n", "sys/block/vda/serial": "vd-serial\n",
			"sys/block/sr0/size": "0\n", "sys/block/sr0/removable": "1\n",
			"sys/block/loop0/size": "100\n", "sys/block/ram0/size": "100\n", "sys/block/dm-0/size": "100\n", "sys/block/zram0/size": "100\n",
		}, []BlockDevice{
			{Name: "nvme0n1", SizeBytes: 1875385008 * 512, Model: "SAMSUNG MZQL2960HCJR-00A07", Serial: "S64FNE0R"},
			{Name: "sda", SizeBytes: 3907029168 * 512, Vendor: "ATA", Model: "ST2000NM0055-1V4", Rotational: true},
			{Name: "vda", SizeBytes: 2048 * 512, Serial: "vd-serial"},
		}},
		{"no /sys/block", map[string]string{"sys/<dir>": "<dir>"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := collectBlockDevices(context.Background(), fixtureFS(t, tc.files))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestCollectPCIDevices(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []PCIDevice
	}{
		{"functions with and without ids", map[string]string{
			"sys/bus/pci/devices/0000:00:03.0/vendor": "0x1AF4\n", "sys/bus/pci/devices/0000:00:03.0/device": "0x1041\n",
			"sys/bus/pci/devices/0000:00:03.0/class":  "0x020000\n",
			"sys/bus/pci/devices/0000:3b:00.0/vendor": "0x15b3\n",
		}, []PCIDevice{
			{Address: "0000:00:03.0", Vendor: "1af4", Device: "1041", Class: "020000"},
			{Address: "0000:3b:00.0", Vendor: "15b3"},
		}},
		{"no PCI bus", map[string]string{"sys/<dir>": "<dir>"}, nil},
		// In the probe's container (FROM scratch) the names come from the copy the discovery
		// ignition puts beside the token.
		{"names from the ignition's copy of pci.ids", map[string]string{
			"sys/bus/pci/devices/0000:3b:00.0/vendor": "0x15b3\n", "sys/bus/pci/devices/0000:3b:00.0/device": "0x101d\n",
			"etc/metalprobe/pci.ids": "15b3  Mellanox Technologies\n\t101d  MT2892 Family [ConnectX-6 Dx]\n",
		}, []PCIDevice{
			{Address: "0000:3b:00.0", Vendor: "15b3", Device: "101d", VendorName: "Mellanox Technologies", DeviceName: "MT2892 Family [ConnectX-6 Dx]"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := collectPCIDevices(fixtureFS(t, tc.files)); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestCollectFixtureTree(t *testing.T) {
	root := tree(t, merge(
		nicFiles("eno1", "b0:26:28:00:00:01", "1", "25000", true),
		map[string]string{
			"sys/class/dmi/id/product_uuid":           "38947555-7742-3448-3784-823347823834",
			"proc/meminfo":                            "MemTotal: 2048 kB\n",
			"proc/cpuinfo":                            cpuinfoX86("Xeon", "2000", [][2]int{{0, 0}}),
			"sys/block/sda/size":                      "8",
			"sys/bus/pci/devices/0000:00:00.0/vendor": "0x8086",
			FixtureAddresses:                          "eno1 10.1.2.3/16\n",
			FixtureLLDP:                               lldpSingle,
		}))
	got, err := Collect(context.Background(), Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	want := &Report{
		Version:     ReportVersion,
		System:      System{UUID: "38947555-7742-3448-3784-823347823834"},
		CPUs:        []CPU{{Socket: 0, Vendor: "GenuineIntel", Model: "Xeon", Cores: 1, Threads: 1, MaxMHz: 2000}},
		MemoryBytes: 2048 * 1024,
		NICs: []NIC{{Name: "eno1", MAC: "b0:26:28:00:00:01", Carrier: "up", SpeedMbps: 25000, MTU: 1500,
			IPs: []string{"10.1.2.3"}, Neighbors: nil}},
		BlockDevices: []BlockDevice{{Name: "sda", SizeBytes: 4096}},
		PCIDevices:   []PCIDevice{{Address: "0000:00:00.0", Vendor: "8086"}},
	}
	// lldpSingle names eth0, which this tree does not have: neighbours only attach by name.
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	if _, err := Collect(context.Background(), Options{Root: root + "/nope"}); err == nil {
		t.Fatal("a missing root must fail")
	}
}

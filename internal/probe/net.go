package probe

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// collectNICs reads /sys/class/net. Addresses come from the running kernel under root "/", else
// from the fixture file FixtureAddresses.
//
// Not ghw's net package: it reports a MAC only when it is the permanent one (addr_assign_type
// 0, so not for bridges, bonds or ifb), has no driver, and finds the PCI address and whether a
// NIC is virtual through the /sys/class/net symlink, which fixture trees do not have. The rest
// (names, speed) are the same sysfs reads as here.
func collectNICs(fs sysfs, live bool) ([]NIC, error) {
	var addrs map[string][]string
	var err error
	if live {
		addrs = liveAddresses()
	} else if addrs, err = fixtureAddresses(fs.path(FixtureAddresses)); err != nil {
		return nil, err
	}
	var out []NIC
	for _, name := range fs.list("sys/class/net") {
		dir := "sys/class/net/" + name + "/"
		if typ, ok := fs.readInt(dir + "type"); name == "lo" || (ok && typ == 772) { // ARPHRD_LOOPBACK
			continue
		}
		mac, err := net.ParseMAC(fs.read(dir + "address"))
		if err != nil || isZero(mac) {
			continue // tunnels and the like have no hardware address to report
		}
		n := NIC{
			Name:    name,
			MAC:     mac.String(),
			Carrier: carrier(fs, dir),
			// A physical NIC links to its bus device; bridges, veths and bonds do not.
			Virtual: !fs.exists(dir + "device"),
			IPs:     addrs[name],
		}
		if addr := fs.linkBase(dir + "device"); pciAddress.MatchString(addr) {
			n.PCIAddress = addr
		}
		n.Driver = fs.linkBase(dir + "device/driver")
		if speed, ok := fs.readInt(dir + "speed"); ok && speed > 0 {
			n.SpeedMbps = int(speed)
		}
		if mtu, ok := fs.readInt(dir + "mtu"); ok {
			n.MTU = int(mtu)
		}
		out = append(out, n)
	}
	return out, nil
}

func isZero(mac net.HardwareAddr) bool {
	for _, b := range mac {
		if b != 0 {
			return false
		}
	}
	return true
}

// carrier reads the link state; "carrier" fails with EINVAL while the interface is down.
func carrier(fs sysfs, dir string) string {
	switch fs.read(dir + "carrier") {
	case "1":
		return "up"
	case "0":
		return "down"
	}
	switch op := fs.read(dir + "operstate"); op {
	case "up", "down":
		return op
	}
	return "unknown"
}

// liveAddresses asks the running kernel for every interface's addresses.
func liveAddresses() map[string][]string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil
	}
	out := map[string][]string{}
	for _, ifc := range ifaces {
		as, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range as {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				out[ifc.Name] = append(out[ifc.Name], p.Addr().WithZone("").String())
			} else if ip, err := netip.ParseAddr(a.String()); err == nil {
				out[ifc.Name] = append(out[ifc.Name], ip.WithZone("").String())
			}
		}
	}
	return out
}

// fixtureAddresses reads "<interface> <ip>[/<prefix>]" lines; a missing file means no addresses.
func fixtureAddresses(path string) (map[string][]string, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading fixture addresses: %w", err)
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s:%d: want \"<interface> <ip>[/<prefix>]\"", path, line)
		}
		addr, _, _ := strings.Cut(fields[1], "/")
		ip, err := netip.ParseAddr(addr)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		ip = ip.WithZone("")
		if !slices.Contains(out[fields[0]], ip.String()) {
			out[fields[0]] = append(out[fields[0]], ip.String())
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading fixture addresses: %w", err)
	}
	return out, nil
}

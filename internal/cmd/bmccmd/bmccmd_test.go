package bmccmd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/cmd/bmccmd"
	"github.com/metalhub/metalhub/internal/cmd/redfishemucmd"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/syncbuf"
)

// runEmulator runs "emulate bmc" as a user would and returns the BMC URLs and
// the control API base URL parsed from its output.
func runEmulator(t *testing.T, args ...string) (bmcs []string, control string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	done := make(chan int, 1)
	go func() { done <- redfishemucmd.Main(ctx, append([]string{"bmc"}, args...), out, errOut) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("emulate exited %d: %s", code, errOut.String())
		}
	})
	bmcLine := regexp.MustCompile(`(?m)^bmc \d+ (\S+) username=admin password=`)
	ctlLine := regexp.MustCompile(`(?m)^control (http://\S+)/emulator/bmcs`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := out.String()
		if m := bmcLine.FindAllStringSubmatch(s, -1); len(m) > 0 && strings.Contains(s, "emulating") {
			for _, x := range m {
				bmcs = append(bmcs, x[1])
			}
			if c := ctlLine.FindStringSubmatch(s); c != nil {
				control = c[1]
			}
			return bmcs, control
		}
		select {
		case code := <-done:
			t.Fatalf("emulate exited %d early: %s", code, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("emulator did not start: %s %s", s, errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := bmccmd.Main(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func records(t *testing.T, control string) []redfish.Record {
	t.Helper()
	resp, err := http.Get(control + "/emulator/records")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var recs []redfish.Record
	if err := json.NewDecoder(resp.Body).Decode(&recs); err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestCLIAgainstEmulator(t *testing.T) {
	bmcs, control := runEmulator(t, "--servers", "2", "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0", "--power-delay", "20ms")
	if len(bmcs) != 2 || control == "" {
		t.Fatalf("emulator output: bmcs %v control %q", bmcs, control)
	}
	t.Setenv(bmccmd.PasswordEnv, "password")
	auth := []string{"--address", bmcs[1], "--username", "admin", "--timeout", "5s"}

	code, stdout, stderr := run(t, append([]string{"inspect"}, auth...)...)
	if code != 0 {
		t.Fatalf("inspect exited %d: %s", code, stderr)
	}
	var inv struct {
		Address string
		Manager *bmc.ManagerInfo
		Systems []bmc.Inventory
	}
	if err := json.Unmarshal([]byte(stdout), &inv); err != nil {
		t.Fatalf("inspect output is not JSON: %v\n%s", err, stdout)
	}
	if len(inv.Systems) != 1 || inv.Systems[0].System.UUID == "" || len(inv.Systems[0].NICs) == 0 || inv.Manager == nil {
		t.Fatalf("inspect output: %s", stdout)
	}
	id := inv.Systems[0].System.ID

	code, stdout, stderr = run(t, append([]string{"power", "on", "--wait", "5s"}, auth...)...)
	if code != 0 || !strings.Contains(stdout, "is On") {
		t.Fatalf("power on exited %d: %s %s", code, stdout, stderr)
	}
	code, _, stderr = run(t, append([]string{"boot-once", "pxe", "--system", id}, auth...)...)
	if code != 0 {
		t.Fatalf("boot-once exited %d: %s", code, stderr)
	}
	recs := records(t, control)
	if len(recs) != 2 || recs[0].Action != redfish.ActionReset || recs[0].ResetType != "On" || recs[0].SystemID != id ||
		recs[0].BMC != 1 || recs[1].Action != redfish.ActionBootOverride || recs[1].Boot.Target != "Pxe" {
		t.Fatalf("recorder saw %+v", recs)
	}

	code, _, stderr = run(t, "systems", "--address", bmcs[0], "--username", "admin", "--password", "wrong")
	if code != 1 || !strings.Contains(stderr, "AuthenticationFailed") || !strings.Contains(stderr, "hint:") {
		t.Fatalf("wrong password: exit %d, stderr %s", code, stderr)
	}
}

// boot-once pxe|http|cd and media list|insert|eject reach the BMC as the recorder shows.
func TestCLIBootOnceAndMedia(t *testing.T) {
	em, err := redfish.Start(redfish.Options{BMCs: 8, PowerDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer em.Close()
	var b *redfish.BMC
	for _, c := range em.BMCs() {
		if c.Vendor() != "supermicro" { // no UEFI HTTP boot there
			b = c
			break
		}
	}
	auth := []string{"--address", b.URL(), "--username", "admin", "--password", "password"}
	const iso, efi = "http://images.example/x.iso", "https://boot.example/shim.efi"
	for _, args := range [][]string{
		{"boot-once", "http", "--uri", efi},
		{"boot-once", "cd"},
		{"media", "insert", iso},
		{"media", "insert", iso}, // already in: nothing sent
		{"media", "eject"},
		{"media", "eject"}, // nothing in: nothing sent
	} {
		if code, stdout, stderr := run(t, append(args, auth...)...); code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, stdout, stderr)
		}
	}
	code, stdout, stderr := run(t, append([]string{"media", "list"}, auth...)...)
	var slots []bmc.MediaSlot
	if code != 0 || json.Unmarshal([]byte(stdout), &slots) != nil || len(slots) == 0 {
		t.Fatalf("media list: exit %d\n%s%s", code, stdout, stderr)
	}
	var got []string
	for _, r := range em.Records() {
		switch {
		case r.Action == redfish.ActionBootOverride && r.Boot.Target == "UefiHttp":
			got = append(got, r.Boot.Target+"@"+r.Boot.HTTPBootURI)
		case r.Action == redfish.ActionBootOverride:
			got = append(got, r.Boot.Target)
		default:
			got = append(got, r.Action+":"+r.Image)
		}
	}
	if want := "[UefiHttp@" + efi + " Cd InsertMedia:" + iso + " EjectMedia:" + iso + "]"; fmt.Sprint(got) != want {
		t.Fatalf("recorded %v, want %s", got, want)
	}
}

func TestCLIChoosesSystemExplicitly(t *testing.T) {
	em, err := redfish.Start(redfish.Options{SystemsPerBMC: 2, PowerDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer em.Close()
	b := em.BMC(0)
	args := []string{"power", "off", "--address", b.URL(), "--username", "admin", "--password", "password"}
	code, _, stderr := run(t, args...)
	if code != 2 {
		t.Fatalf("ambiguous system: exit %d", code)
	}
	for _, id := range b.SystemIDs() {
		if !strings.Contains(stderr, id) {
			t.Fatalf("error does not list system %s: %s", id, stderr)
		}
	}
	if len(em.Records()) != 0 {
		t.Fatal("a power action was sent without a chosen system")
	}
}

func TestCLIUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"explode"},
		{"power", "sideways", "--address", "x", "--username", "u", "--password", "p"},
		{"boot-once", "hdd", "--address", "x", "--username", "u", "--password", "p"},
		{"boot-once", "pxe", "--uri", "http://x", "--address", "x", "--username", "u", "--password", "p"},
		{"media", "--address", "x", "--username", "u", "--password", "p"},
		{"media", "insert", "--address", "x", "--username", "u", "--password", "p"},
		{"inspect"},
		{"inspect", "--address", "127.0.0.1:1", "--username", "u"},
		{"inspect", "--address", "127.0.0.1:1", "--username", "u", "--password", "p", "--insecure", "--ca-file", "x"},
	} {
		t.Setenv(bmccmd.PasswordEnv, "")
		if code, _, stderr := run(t, args...); code != 2 || stderr == "" {
			t.Errorf("%q: exit %d, stderr %q; want 2 with a message", args, code, stderr)
		}
	}
	if code := redfishemucmd.Main(context.Background(), []string{"bmc", "--servers", "0"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Errorf("emulate --servers 0: exit %d", code)
	}
	if code := redfishemucmd.Main(context.Background(), nil, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Errorf("emulate without subcommand: exit %d", code)
	}
}

package metal

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// bootActions writes a BMC's records as the boot tests read them: power and boot overrides as
// resetTypes does, virtual media with its image.
func bootActions(recs []redfish.Record) []string {
	var out []string
	for _, r := range recs {
		switch r.Action {
		case redfish.ActionInsertMedia, redfish.ActionEjectMedia:
			out = append(out, r.Action+":"+r.Image)
		case redfish.ActionBootOverride:
			b := "Boot:" + r.Boot.Target + "/" + r.Boot.Enabled
			if r.Boot.HTTPBootURI != "" {
				b += "@" + r.Boot.HTTPBootURI
			}
			out = append(out, b)
		default:
			out = append(out, suite.ResetTypes([]redfish.Record{r})...)
		}
	}
	return out
}

// bootClaim claims server with power On and the boot method and URI given.
func bootClaim(t *testing.T, server, name string, method metalv1alpha1.BootMethod, uri string) {
	t.Helper()
	c := &metalv1alpha1.ServerClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "img", BootMethod: method, BootURI: uri,
			ServerRef: &corev1.LocalObjectReference{Name: server}},
	}
	if err := env.Client.Create(ctx(), c); err != nil {
		t.Fatal(err)
	}
}

// takeBMCWhere reserves the next emulated BMC that ok accepts (the fleet's vendors differ in
// what they can boot).
func takeBMCWhere(t *testing.T, ok func(*redfish.BMC) bool) *redfish.BMC {
	t.Helper()
	for {
		if b := fleet.Take(t); ok(b) {
			return b
		}
	}
}

func availableOn(t *testing.T, b *redfish.BMC, name string) string {
	t.Helper()
	server := registerLabeled(t, b, name, nil)
	suite.WaitServerState(t, env, server, metalv1alpha1.ServerStateAvailable, 60*time.Second)
	waitPower(t, server, metalv1alpha1.PowerStateOff, 20*time.Second)
	return server
}

func wantActions(t *testing.T, b *redfish.BMC, start time.Time, want string) {
	t.Helper()
	if got := fmt.Sprint(bootActions(suite.Since(fleet.BoxActions(b), start))); got != want {
		t.Errorf("BMC actions %s, want %s", got, want)
	}
}

// A claim with virtual-media boot powers its server on from the ISO: InsertMedia, one-time Cd,
// power On; the medium is ejected once the claim is gone. The record of the medium is written
// before it goes in, so the release ejects it whatever happened in between.
func TestClaimBootsFromVirtualMedia(t *testing.T) {
	t.Parallel()
	const iso = "http://images.example/os.iso"
	b := fleet.Take(t)
	server := availableOn(t, b, "vmboot")
	start := time.Now()
	bootClaim(t, server, "vmboot", metalv1alpha1.BootMethodVirtualMedia, iso)
	waitClaim(t, "default", "vmboot", "Bound/Bound", 20*time.Second)
	waitSystemPower(t, b, redfish.PowerOn, 10*time.Second)
	waitPower(t, server, metalv1alpha1.PowerStateOn, 10*time.Second)
	if got := suite.Server(env, server).Annotations[serverstate.MediaAnnotation]; got != iso {
		t.Fatalf("media record %q, want %q", got, iso)
	}
	wantActions(t, b, start, "[InsertMedia:"+iso+" Boot:Cd/Once On]")

	if err := env.Client.Delete(ctx(), getClaim("default", "vmboot")); err != nil {
		t.Fatal(err)
	}
	s := suite.WaitServerState(t, env, server, metalv1alpha1.ServerStateAvailable, 20*time.Second)
	if s.Annotations[serverstate.MediaAnnotation] != "" {
		t.Errorf("released server keeps the media record %q", s.Annotations[serverstate.MediaAnnotation])
	}
	for _, m := range systemOf(b).Media() {
		if m.Inserted {
			t.Errorf("medium %s still inserted after the claim went: %s", m.ID, m.Image)
		}
	}
	acts := bootActions(suite.Since(fleet.BoxActions(b), start))
	if len(acts) < 2 || acts[len(acts)-1] != "EjectMedia:"+iso {
		t.Errorf("BMC actions %v, want the release to end with the eject", acts)
	}
	waitClaimGone(t, "default", "vmboot", 20*time.Second)
}

// The same with UEFI HTTP boot: a one-time UefiHttp override with the claim's URI before every
// power-on.
func TestClaimBootsOverUEFIHTTP(t *testing.T) {
	t.Parallel()
	const uri = "https://boot.example/shim.efi"
	b := takeBMCWhere(t, func(b *redfish.BMC) bool { return b.Vendor() != "supermicro" })
	server := availableOn(t, b, "httpboot")
	start := time.Now()
	bootClaim(t, server, "httpboot", metalv1alpha1.BootMethodHTTP, uri)
	waitClaim(t, "default", "httpboot", "Bound/Bound", 20*time.Second)
	waitSystemPower(t, b, redfish.PowerOn, 10*time.Second)
	waitPower(t, server, metalv1alpha1.PowerStateOn, 10*time.Second)
	updateClaim(t, "default", "httpboot", func(c *metalv1alpha1.ServerClaim) { c.Spec.Power = metalv1alpha1.PowerOff })
	waitSystemPower(t, b, redfish.PowerOff, 10*time.Second)
	updateClaim(t, "default", "httpboot", func(c *metalv1alpha1.ServerClaim) { c.Spec.Power = metalv1alpha1.PowerOn })
	waitSystemPower(t, b, redfish.PowerOn, 10*time.Second)
	wantActions(t, b, start, fmt.Sprintf("[Boot:UefiHttp/Once@%s On GracefulShutdown Boot:UefiHttp/Once@%s On]", uri, uri))
	if err := env.Client.Delete(ctx(), getClaim("default", "httpboot")); err != nil {
		t.Fatal(err)
	}
	waitClaimGone(t, "default", "httpboot", 20*time.Second)
}

// A BMC that advertises neither method: the claim's server gets a BootMethod condition (and a
// warning), and no boot action and no power-on reach the box.
func TestUnsupportedBootMethodIsAConditionNotAPXEBoot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		method metalv1alpha1.BootMethod
		uri    string
	}{
		{"novm", metalv1alpha1.BootMethodVirtualMedia, "http://images.example/os.iso"},
		{"nohttp", metalv1alpha1.BootMethodHTTP, "https://boot.example/shim.efi"},
	} {
		t.Run(string(tc.method), func(t *testing.T) {
			b := fleet.Take(t)
			b.SetFaults(redfish.Faults{NoVirtualMedia: true, NoHTTPBoot: true})
			server := availableOn(t, b, tc.name)
			start := time.Now()
			bootClaim(t, server, tc.name, tc.method, tc.uri)
			waitClaim(t, "default", tc.name, "Bound/Bound", 20*time.Second)
			testenv.Eventually(t, 20*time.Second, "BootMethod condition", func() (bool, string) {
				s := suite.Server(env, server)
				c := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionBootMethod)
				if c == nil {
					return false, "none"
				}
				return c.Status == metav1.ConditionFalse && c.Reason == metalv1alpha1.ReasonBootMethodUnsupported, c.Reason + ": " + c.Message
			})
			testenv.Eventually(t, 10*time.Second, "the claim shows it", func() (bool, string) {
				c := apimeta.FindStatusCondition(getClaim("default", tc.name).Status.Conditions, metalv1alpha1.ConditionBootMethod)
				return c != nil && c.Reason == metalv1alpha1.ReasonBootMethodUnsupported, fmt.Sprint(c)
			})
			if acts := bootActions(suite.Since(fleet.BoxActions(b), start)); len(acts) != 0 {
				t.Errorf("BMC actions %v, want none", acts)
			}
			if s := suite.Server(env, server); s.Annotations[serverstate.MediaAnnotation] != "" {
				t.Errorf("media recorded for a BMC without virtual media: %q", s.Annotations[serverstate.MediaAnnotation])
			}
			if err := env.Client.Delete(ctx(), getClaim("default", tc.name)); err != nil {
				t.Fatal(err)
			}
			waitClaimGone(t, "default", tc.name, 20*time.Second)
			b.ClearFaults()
		})
	}
}

// A boot the BMC cannot do is the user's to fix (another method, a firmware or licence that has
// it, an image the BMC can reach): the server says so in its BootMethod condition and one Warning
// event, and looks again calmly, without a pass that fails, is logged as "Reconciler error" and
// retried with backoff. Once the BMC can, that calm look boots the box.
func TestUserFixableBootProblemIsNotAReconcileError(t *testing.T) {
	t.Parallel()
	const iso, uri = "http://images.example/os.iso", "https://boot.example/shim.efi"
	for _, tc := range []struct {
		name   string
		method metalv1alpha1.BootMethod
		uri    string
		faults redfish.Faults
		reason string
		says   string // what the condition's message must mention
		booted string // the BMC's actions once the fault is gone
	}{
		{"uehttp", metalv1alpha1.BootMethodHTTP, uri, redfish.Faults{NoHTTPBoot: true},
			metalv1alpha1.ReasonBootMethodUnsupported, "UEFI HTTP boot", fmt.Sprintf("[Boot:UefiHttp/Once@%s On]", uri)},
		{"uenovm", metalv1alpha1.BootMethodVirtualMedia, iso, redfish.Faults{NoVirtualMedia: true},
			metalv1alpha1.ReasonBootMethodUnsupported, "virtual CD", "[InsertMedia:" + iso + " Boot:Cd/Once On]"},
		{"uemount", metalv1alpha1.BootMethodVirtualMedia, iso, redfish.Faults{MediaMountFails: true},
			metalv1alpha1.ReasonBootPreparationFailed, "reach the image", "[InsertMedia:" + iso + " Boot:Cd/Once On]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := takeBMCWhere(t, func(b *redfish.BMC) bool { return b.Vendor() != "supermicro" })
			b.SetFaults(tc.faults)
			defer b.ClearFaults()
			server := availableOn(t, b, tc.name)
			start := time.Now()
			bootClaim(t, server, tc.name, tc.method, tc.uri)
			testenv.Eventually(t, 20*time.Second, "BootMethod condition", func() (bool, string) {
				c := apimeta.FindStatusCondition(suite.Server(env, server).Status.Conditions, metalv1alpha1.ConditionBootMethod)
				return c != nil && c.Reason == tc.reason, fmt.Sprint(c)
			})
			c := apimeta.FindStatusCondition(suite.Server(env, server).Status.Conditions, metalv1alpha1.ConditionBootMethod)
			if !strings.Contains(c.Message, tc.says) {
				t.Errorf("condition message %q does not say %q", c.Message, tc.says)
			}
			// Several retry intervals' worth of passes: none of them may fail.
			deadline := time.Now().Add(6 * testOpts.RetryAfter)
			testenv.Eventually(t, 10*time.Second, "a few calm passes", func() (bool, string) {
				if n := reconcileErrors.Count("server", "", server); n > 0 {
					t.Fatalf("%d server passes failed with a Reconciler error", n)
				}
				return time.Now().After(deadline), ""
			})
			if got := warnings(t, server, tc.reason); got != 1 {
				t.Errorf("%d %s events, want 1", got, tc.reason)
			}
			if acts := bootActions(suite.Since(fleet.BoxActions(b), start)); len(acts) != 0 {
				t.Errorf("BMC actions %v, want none", acts)
			}

			b.ClearFaults()
			waitSystemPower(t, b, redfish.PowerOn, 10*time.Second)
			wantActions(t, b, start, tc.booted)
			testenv.Eventually(t, 10*time.Second, "BootMethod condition gone", func() (bool, string) {
				c := apimeta.FindStatusCondition(suite.Server(env, server).Status.Conditions, metalv1alpha1.ConditionBootMethod)
				return c == nil, fmt.Sprint(c)
			})
			if n := reconcileErrors.Count("server", "", server); n > 0 {
				t.Errorf("%d server passes failed with a Reconciler error", n)
			}
			if err := env.Client.Delete(ctx(), getClaim("default", tc.name)); err != nil {
				t.Fatal(err)
			}
			waitClaimGone(t, "default", tc.name, 20*time.Second)
		})
	}
}

// warnings counts the occurrences of Warning events with reason about the object named
// regarding (a repeat of one event is its series, not another object).
func warnings(t *testing.T, regarding, reason string) int {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := env.Client.List(ctx(), list); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if e.Regarding.Name != regarding || e.Reason != reason || e.Type != corev1.EventTypeWarning {
			continue
		}
		if e.Series != nil {
			n += int(e.Series.Count)
		} else {
			n++
		}
	}
	return n
}

// A status wipe mid-boot (the medium in, the power-on on its way) changes nothing on the BMC:
// the medium is bookkeeping, the power-on's record too.
func TestStatusWipeMidVirtualMediaBoot(t *testing.T) {
	t.Parallel()
	const iso = "http://images.example/os.iso"
	b := fleet.Take(t)
	server := availableOn(t, b, "vmwipe")
	b.SetPowerDelay(3 * time.Second)
	defer b.SetPowerDelay(powerDelay)
	start := time.Now()
	bootClaim(t, server, "vmwipe", metalv1alpha1.BootMethodVirtualMedia, iso)
	testenv.Eventually(t, 20*time.Second, "powering on from the medium", func() (bool, string) {
		st := systemOf(b).PowerState()
		return st == redfish.PowerPoweringOn, st
	})
	testenv.Eventually(t, 5*time.Second, "status wiped", func() (bool, string) {
		s := suite.Server(env, server) // the controller writes too: again on a conflict
		s.Status = metalv1alpha1.ServerStatus{}
		err := testenv.WriteStatus(ctx(), env.Client, s)
		return err == nil, fmt.Sprint(err)
	})
	if st := systemOf(b).PowerState(); st != redfish.PowerPoweringOn {
		t.Fatalf("the wipe came after the power-on settled (%s): raise the power delay", st)
	}
	waitSystemPower(t, b, redfish.PowerOn, 10*time.Second)
	suite.WaitServerState(t, env, server, metalv1alpha1.ServerStateReserved, 10*time.Second)
	waitPower(t, server, metalv1alpha1.PowerStateOn, 10*time.Second)
	wantActions(t, b, start, "[InsertMedia:"+iso+" Boot:Cd/Once On]")
	if err := env.Client.Delete(ctx(), getClaim("default", "vmwipe")); err != nil {
		t.Fatal(err)
	}
	suite.WaitServerState(t, env, server, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	if acts := bootActions(suite.Since(fleet.BoxActions(b), start)); !strings.HasPrefix(acts[len(acts)-1], "EjectMedia:") {
		t.Errorf("BMC actions %v, want the release to eject the medium", acts)
	}
}

// Root device hints resolve against the server's discovered disks before the power-on for the
// claim: the boot configuration reports the disk and the box boots. Hints no disk matches leave
// the box off with the BootMethod condition saying so, and a claim asking for a root volume and
// hints at once is refused by the API server.
func TestClaimRootDeviceHints(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	server := availableOn(t, b, "rdhint")
	var drives []metalv1alpha1.StorageDrive
	for _, st := range suite.Server(env, server).Status.Storages {
		drives = append(drives, st.Drives...)
	}
	if len(drives) == 0 {
		t.Fatal("the discovered server has no disks to hint at")
	}
	want := drives[len(drives)-1]
	hints := &metalv1alpha1.RootDeviceHints{SerialNumber: want.SerialNumber}
	if want.SerialNumber == "" {
		hints = &metalv1alpha1.RootDeviceHints{DeviceName: want.Name}
	}
	claim := func(name string, h *metalv1alpha1.RootDeviceHints, rv *metalv1alpha1.RootVolume) error {
		return env.Client.Create(ctx(), &metalv1alpha1.ServerClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "img", RootDeviceHints: h, RootVolume: rv,
				ServerRef: &corev1.LocalObjectReference{Name: server}},
		})
	}
	if err := claim("rdboth", hints, &metalv1alpha1.RootVolume{RAIDType: "RAID1"}); err == nil || !strings.Contains(err.Error(), "exclude each other") {
		t.Fatalf("a claim with a root volume and hints: %v", err)
	}

	if err := claim("rdhint", hints, nil); err != nil {
		t.Fatal(err)
	}
	waitClaim(t, "default", "rdhint", "Bound/Bound", 20*time.Second)
	waitSystemPower(t, b, redfish.PowerOn, 10*time.Second)
	sbc := &metalv1alpha1.ServerBootConfiguration{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Namespace: "default", Name: "rdhint"}, sbc); err != nil {
		t.Fatal(err)
	}
	if rd := sbc.Status.RootDevice; rd == nil || rd.Name != want.Name || rd.SerialNumber != want.SerialNumber {
		t.Fatalf("status.rootDevice %+v, want disk %s (serial %s)", rd, want.Name, want.SerialNumber)
	}
	if err := env.Client.Delete(ctx(), getClaim("default", "rdhint")); err != nil {
		t.Fatal(err)
	}
	waitClaimGone(t, "default", "rdhint", 20*time.Second)
	suite.WaitServerState(t, env, server, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	waitSystemPower(t, b, redfish.PowerOff, 10*time.Second)

	start := time.Now()
	if err := claim("rdnone", &metalv1alpha1.RootDeviceHints{Model: "NO SUCH MODEL"}, nil); err != nil {
		t.Fatal(err)
	}
	waitClaim(t, "default", "rdnone", "Bound/Bound", 20*time.Second)
	testenv.Eventually(t, 20*time.Second, "BootMethod condition", func() (bool, string) {
		c := apimeta.FindStatusCondition(suite.Server(env, server).Status.Conditions, metalv1alpha1.ConditionBootMethod)
		if c == nil {
			return false, "none"
		}
		return c.Status == metav1.ConditionFalse && c.Reason == metalv1alpha1.ReasonRootDeviceNotFound, c.Reason + ": " + c.Message
	})
	if acts := bootActions(suite.Since(fleet.BoxActions(b), start)); len(acts) != 0 {
		t.Errorf("BMC actions %v, want none", acts)
	}
	if err := env.Client.Delete(ctx(), getClaim("default", "rdnone")); err != nil {
		t.Fatal(err)
	}
	waitClaimGone(t, "default", "rdnone", 20*time.Second)
}

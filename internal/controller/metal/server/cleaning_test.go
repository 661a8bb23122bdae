package server

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/discovery"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/probe"
	"github.com/metalhub/metalhub/internal/probe/erase"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// onePass runs one pass of step over the server name on c, against b's first system, and
// returns the Server after it and the box's BMC actions of the pass.
func onePass(t *testing.T, b *redfish.BMC, c client.Client, opts Options, name string, state metalv1alpha1.ServerState,
	step func(r *Reconciler, bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error)) (*metalv1alpha1.Server, []string) {
	t.Helper()
	return onePassReading(t, b, c, c, opts, name, state, step)
}

// onePassReading is onePass with live the pass's reader past the cache.
func onePassReading(t *testing.T, b *redfish.BMC, c client.Client, live client.Reader, opts Options, name string, state metalv1alpha1.ServerState,
	step func(r *Reconciler, bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error)) (*metalv1alpha1.Server, []string) {
	t.Helper()
	pool, conn := suite.Connect(t, b)
	systems, err := conn.Systems(ctx())
	if err != nil || len(systems) == 0 {
		t.Fatalf("systems: %v %v", systems, err)
	}
	r := &Reconciler{Client: c, APIReader: live, Pool: pool, Recorder: events.NewFakeRecorder(100), Options: opts, Now: time.Now}
	start := time.Now()
	rec := lifecycle.NewReconciler[*metalv1alpha1.Server](c, func() *metalv1alpha1.Server { return &metalv1alpha1.Server{} },
		func(ctx context.Context, lp *lifecycle.Pass[*metalv1alpha1.Server]) (lifecycle.Result, error) {
			p := &serverPass{Pass: lp, c: lp.Client(), bctx: ctx, state: state, conn: conn, sysID: systems[0].ODataID}
			if p.sys, err = conn.System(ctx, p.sysID); err != nil {
				return lifecycle.Result{}, err
			}
			return step(r, ctx, ctx, p)
		})
	if _, err := rec.Reconcile(ctx(), ctrl.Request{NamespacedName: client.ObjectKey{Name: name}}); err != nil {
		t.Fatal(err)
	}
	s := &metalv1alpha1.Server{}
	if err := c.Get(ctx(), client.ObjectKey{Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s, suite.ResetTypes(suite.Since(fleet.BoxActions(b), start))
}

func cleaningServer(name, uuid string, ann map[string]string) *metalv1alpha1.Server {
	a := map[string]string{metalv1alpha1.OperationAnnotation: metalv1alpha1.OperationIgnore}
	for k, v := range ann {
		a[k] = v
	}
	return &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: a}, Spec: metalv1alpha1.ServerSpec{SystemUUID: strings.ToLower(uuid)}}
}

func cleaningOpts(policy metalv1alpha1.CleaningPolicy) Options {
	o := testOpts
	o.CleaningPolicy = policy
	o.Ignition = func(s *metalv1alpha1.Server, token string, c metalv1alpha1.CleaningPolicy) ([]byte, error) {
		return discovery.RenderIgnition(discovery.Params{RegistryURL: "http://registry.invalid", ServerUUID: s.Spec.SystemUUID, Token: token,
			ProbeImage: "probe", CleaningPolicy: string(c)}, "")
	}
	return o
}

func runCleaning(r *Reconciler, bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	return r.cleaning(bctx, ctx, p)
}

// The first pass in Cleaning boots a cleaning round once: its Secret carries the purpose and
// an ignition that cleans by the policy, the boot and the power-on are recorded with the round
// in one write; the next pass waits for the report and boots nothing.
func TestCleaningBootsItsRoundOnce(t *testing.T) {
	b := fleet.Take(t)
	sys := b.Systems()[0]
	sys.SetPowerState(redfish.PowerOff)
	name := "clean-boot"
	c := metaltest.FakeClient(cleaningServer(name, sys.UUID(), map[string]string{serverstate.CleaningAnnotation: "AllDisks"}))
	opts := cleaningOpts(metalv1alpha1.CleaningPolicyNone) // the mark decides, not the fleet
	s, acts := onePass(t, b, c, opts, name, metalv1alpha1.ServerStateCleaning, runCleaning)
	round, ok := parseCleaningRound(s.Annotations[serverstate.CleaningRoundAnnotation])
	if !ok || s.Annotations[discovery.RoundAnnotation] != round.id || s.Annotations[serverstate.BootOnceAnnotation] != round.id {
		t.Fatalf("round bookkeeping %v", s.Annotations)
	}
	if strings.Join(acts, ",") != "Boot:Pxe/Once,On" {
		t.Fatalf("BMC actions %v, want a one-time PXE boot and a power-on", acts)
	}
	sec := &corev1.Secret{}
	if err := c.Get(ctx(), client.ObjectKey{Namespace: opts.DiscoveryNamespace, Name: discovery.ObjectName(name)}, sec); err != nil {
		t.Fatal(err)
	}
	if sec.Labels[discovery.PurposeLabel] != discovery.PurposeCleaning || sec.Labels[discovery.CleaningPolicyLabel] != "AllDisks" ||
		!strings.Contains(string(sec.Data[discovery.IgnitionKey]), "--clean=AllDisks") {
		t.Fatalf("round Secret %v:\n%s", sec.Labels, sec.Data[discovery.IgnitionKey])
	}
	s, acts = onePass(t, b, c, opts, name, metalv1alpha1.ServerStateCleaning, runCleaning)
	if len(acts) != 0 || s.Annotations[serverstate.CleaningRoundAnnotation] != round.String() {
		t.Fatalf("second pass: actions %v, round %q (was %q)", acts, s.Annotations[serverstate.CleaningRoundAnnotation], round)
	}

	// The box goes off before its agent reports: the round is booted again, never the disk.
	waitFor(t, func() bool { return sys.PowerState() == redfish.PowerOn })
	sys.SetPowerState(redfish.PowerOff)
	s.Annotations[serverstate.PowerAnnotation] = powerRecord{target: metalv1alpha1.PowerOn, at: time.Now().Add(-time.Hour)}.String()
	if err := c.Update(ctx(), s); err != nil {
		t.Fatal(err)
	}
	_, acts = onePass(t, b, c, opts, name, metalv1alpha1.ServerStateCleaning, runCleaning)
	if strings.Join(acts, ",") != "Boot:Pxe/Once,On" {
		t.Fatalf("a box gone off mid-cleaning: actions %v, want the round's boot again", acts)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reported is a server in Cleaning whose round r1 the registry stored, with its record.
func reported(t *testing.T, name, uuid string, disks ...probe.DiskCleaning) client.Client {
	t.Helper()
	s := cleaningServer(name, uuid, map[string]string{
		serverstate.CleaningAnnotation:      "AllDisks",
		serverstate.CleaningRoundAnnotation: cleaningRound{id: "r1", at: time.Now()}.String(),
		discovery.RoundAnnotation:           "r1",
		discovery.CleanedAnnotation:         "r1",
		lifecycle.StateAnnotation:           string(metalv1alpha1.ServerStateCleaning),
	})
	cm, err := cleaning.ConfigMap(testOpts.DiscoveryNamespace, cleaning.Record{Server: name, Cleanings: []cleaning.Entry{{Round: "r1", Policy: "AllDisks", Disks: disks}}})
	if err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testOpts.DiscoveryNamespace, Name: discovery.ObjectName(name),
		Labels: map[string]string{discovery.ServerLabel: name, discovery.RoundLabel: "r1", discovery.PurposeLabel: discovery.PurposeCleaning}}}
	return metaltest.FakeClient(s, cm, sec)
}

func sanitized(name string, verified bool) probe.DiskCleaning {
	p := &erase.Proof{Method: erase.MethodDiscard, Verified: verified, Samples: 258}
	if !verified {
		p.Failure = "5 of 258 sampled blocks unchanged after Discard"
	}
	return probe.DiskCleaning{BlockDevice: probe.BlockDevice{Name: name, Serial: "SN-" + name}, Role: probe.RoleSanitize, Proof: p}
}

// A verified report ends the cleaning: power off, Available, the mark gone, the summary kept,
// in one write.
func TestCleaningVerifiedGoesAvailable(t *testing.T) {
	b := fleet.Take(t)
	sys := b.Systems()[0]
	sys.SetPowerState(redfish.PowerOn)
	name := "clean-ok"
	c := reported(t, name, sys.UUID(), sanitized("nvme0n1", true), sanitized("sda", true))
	s, acts := onePass(t, b, c, cleaningOpts(metalv1alpha1.CleaningPolicyNone), name, metalv1alpha1.ServerStateCleaning, runCleaning)
	if st := s.Annotations[lifecycle.StateAnnotation]; st != string(metalv1alpha1.ServerStateAvailable) {
		t.Fatalf("state %s", st)
	}
	for _, k := range []string{serverstate.CleaningAnnotation, serverstate.CleaningRoundAnnotation, serverstate.BootOnceAnnotation} {
		if _, ok := s.Annotations[k]; ok {
			t.Errorf("%s left: %v", k, s.Annotations)
		}
	}
	if !strings.Contains(s.Annotations[serverstate.LastCleaningAnnotation], "2 disks erased and read back") {
		t.Errorf("summary %q", s.Annotations[serverstate.LastCleaningAnnotation])
	}
	if strings.Join(acts, ",") != "ForceOff" {
		t.Errorf("BMC actions %v, want one power-off", acts)
	}
}

// A report with a disk that did not hold puts the server in Error naming the disk: the round's
// objects go (a late report of it is refused), the mark stays, and the Error is left only by a
// retry, which cleans again.
func TestCleaningFailedDiskIsError(t *testing.T) {
	b := fleet.Take(t)
	sys := b.Systems()[0]
	sys.SetPowerState(redfish.PowerOn)
	name := "clean-bad"
	c := reported(t, name, sys.UUID(), sanitized("nvme0n1", true), sanitized("sda", false))
	s, _ := onePass(t, b, c, cleaningOpts(metalv1alpha1.CleaningPolicyNone), name, metalv1alpha1.ServerStateCleaning, runCleaning)
	why := s.Annotations[serverstate.CleaningFailedAnnotation]
	if st := s.Annotations[lifecycle.StateAnnotation]; st != string(metalv1alpha1.ServerStateError) || !strings.Contains(why, "disk sda (serial SN-sda) not erased") {
		t.Fatalf("state %s, failure %q", st, why)
	}
	if s.Annotations[serverstate.CleaningAnnotation] != "AllDisks" || s.Annotations[serverstate.PreviousStateAnnotation] != string(metalv1alpha1.ServerStateCleaning) {
		t.Fatalf("annotations %v", s.Annotations)
	}
	if _, ok := s.Annotations[serverstate.CleaningRoundAnnotation]; ok {
		t.Fatal("the failed round is still recorded")
	}
	err := c.Get(ctx(), client.ObjectKey{Namespace: testOpts.DiscoveryNamespace, Name: discovery.ObjectName(name)}, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the failed round's Secret: %v", err)
	}
	if to, _, leave := errorExit(s, bmc.PowerStateOff); leave {
		t.Fatalf("a failed cleaning leaves Error on its own, to %s", to)
	}
	s.Annotations[serverstate.CleaningFailedAnnotation] = ""
	delete(s.Annotations, serverstate.CleaningFailedAnnotation)
	if previousState(s) != metalv1alpha1.ServerStateCleaning {
		t.Fatalf("a retry goes to %s, want Cleaning", previousState(s))
	}
}

// A discovered server metalhub never cleaned is cleaned first with --cleaning-on-discovery; one
// with a cleaning behind it, or without the flag, is Available.
func TestCleaningOnDiscovery(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flag    bool
		cleaned bool
		want    metalv1alpha1.ServerState
	}{
		{name: "disc-never", flag: true, want: metalv1alpha1.ServerStateCleaning},
		{name: "disc-cleaned", flag: true, cleaned: true, want: metalv1alpha1.ServerStateAvailable},
		{name: "disc-noflag", want: metalv1alpha1.ServerStateAvailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fleet.Take(t)
			sys := b.Systems()[0]
			sys.SetPowerState(redfish.PowerOn)
			ann := map[string]string{discovery.RoundAnnotation: "d1", discovery.ReportedAnnotation: "d1",
				lifecycle.StateAnnotation: string(metalv1alpha1.ServerStateDiscovery)}
			if tc.cleaned {
				ann[serverstate.LastCleaningAnnotation] = "policy AllDisks, round x: 1 disks erased and read back"
			}
			c := metaltest.FakeClient(cleaningServer(tc.name, sys.UUID(), ann))
			opts := cleaningOpts(metalv1alpha1.CleaningPolicyRootDisk)
			opts.CleanDiscovered = tc.flag
			s, _ := onePass(t, b, c, opts, tc.name, metalv1alpha1.ServerStateDiscovery, func(r *Reconciler, bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
				return r.discovery(bctx, ctx, p)
			})
			if got := metalv1alpha1.ServerState(s.Annotations[lifecycle.StateAnnotation]); got != tc.want {
				t.Fatalf("state %s, want %s", got, tc.want)
			}
			if tc.want == metalv1alpha1.ServerStateCleaning && s.Annotations[serverstate.CleaningAnnotation] != "RootDisk" {
				t.Fatalf("mark %q", s.Annotations[serverstate.CleaningAnnotation])
			}
		})
	}
}

// The mark recorded with a reservation: the fleet's or the server's policy, narrowed by the
// claim, None too; a mark left uncleaned is only widened.
func TestMarkForCleaning(t *testing.T) {
	for _, tc := range []struct {
		fleet, server, claim, prev, want metalv1alpha1.CleaningPolicy
	}{
		{fleet: "AllDisks", want: "AllDisks"},
		{fleet: "AllDisks", claim: "Metadata", want: "Metadata"},
		{fleet: "Metadata", claim: "AllDisks", want: "Metadata"},
		{fleet: "None", server: "RootDisk", want: "RootDisk"},
		{fleet: "AllDisks", claim: "None", want: "None"},
		{fleet: "AllDisks", claim: "None", prev: "RootDisk", want: "RootDisk"},
	} {
		r := &Reconciler{Options: Options{CleaningPolicy: tc.fleet}}
		s := &metalv1alpha1.Server{Spec: metalv1alpha1.ServerSpec{CleaningPolicy: tc.server}}
		if tc.prev != "" {
			s.Annotations = map[string]string{serverstate.CleaningAnnotation: string(tc.prev)}
		}
		r.markForCleaning(s, &metalv1alpha1.ServerClaim{Spec: metalv1alpha1.ServerClaimSpec{CleaningPolicy: tc.claim}})
		if got := s.Annotations[serverstate.CleaningAnnotation]; got != string(tc.want) {
			t.Errorf("fleet %s server %s claim %s prev %s: mark %q, want %s", tc.fleet, tc.server, tc.claim, tc.prev, got, tc.want)
		}
	}
}

// A park does not skip a cleaning: unparked, the server is in Cleaning again, and entering
// Cleaning from elsewhere drops a round recorded before, so a fresh one is booted.
func TestUnparkedCleaningStartsAFreshRound(t *testing.T) {
	s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		serverstate.PreviousStateAnnotation: string(metalv1alpha1.ServerStateCleaning)}}}
	if got := unparkedState(s); got != metalv1alpha1.ServerStateCleaning {
		t.Fatalf("unparked to %s, want Cleaning", got)
	}
	b := fleet.Take(t)
	sys := b.Systems()[0]
	name := "clean-unpark"
	c := metaltest.FakeClient(cleaningServer(name, sys.UUID(), map[string]string{
		lifecycle.StateAnnotation:           string(metalv1alpha1.ServerStateParked),
		serverstate.CleaningAnnotation:      "AllDisks",
		serverstate.CleaningRoundAnnotation: cleaningRound{id: "old", at: time.Now()}.String(),
	}))
	got, _ := onePass(t, b, c, testOpts, name, metalv1alpha1.ServerStateParked, func(r *Reconciler, bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
		return r.transition(ctx, p, metalv1alpha1.ServerStateCleaning, "unparked", nil)
	})
	if _, ok := got.Annotations[serverstate.CleaningRoundAnnotation]; ok || got.Annotations[serverstate.CleaningAnnotation] != "AllDisks" {
		t.Fatalf("annotations after entering Cleaning: %v", got.Annotations)
	}
}

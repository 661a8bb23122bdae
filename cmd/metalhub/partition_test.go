package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/shard"
	"github.com/metalhub/metalhub/internal/testenv"
)

// newAPILink is a testenv.APILink to target, closed with the test.
func newAPILink(t *testing.T, target string) *testenv.APILink {
	t.Helper()
	l, err := testenv.NewAPILink(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// kubeconfigVia writes a copy of the test's kubeconfig whose server is reached through link.
func kubeconfigVia(t *testing.T, link *testenv.APILink) string {
	t.Helper()
	path, err := testenv.KubeconfigVia(env.Kubeconfig, t.TempDir(), link)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// The replica holding a BMC's shard is cut off from the API server while a 9 s request to that
// BMC is in flight. It can no longer renew its shard, but it keeps running and keeps reaching
// the BMC: the other replica takes the shard over once the Lease expired, and the BMC's own
// journal shows that no request of the new owner started before the old owner's last one ended
// (the old owner sends none that could outlast what its lease leaves it).
func TestPartitionedShardOwnerEndsItsRequestsFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a shard lease behind a partition")
	}
	const (
		bmcs   = 4
		shards = 2
		lease  = "metalhub-partition-test"
		// The defaults: a request may run 10 s, and the lease leaves it room for that.
		leaseDuration, renewDeadline, retryPeriod, requestTimeout = 15 * time.Second, 10 * time.Second, 2 * time.Second, 10 * time.Second
		slow                                                      = 9 * time.Second
	)
	purgeMetal(t)
	t.Cleanup(func() { purgeMetal(t) })
	bin, err := testenv.MetalhubBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fleet := bootableFleet(t, bmcs, 300*time.Millisecond)
	api, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	apiHost := api.Host

	managers := make([]*managerProcess, 2)
	links := make([]*testenv.APILink, 2)
	for i := range managers {
		links[i] = newAPILink(t, apiHost)
		managers[i] = &managerProcess{bin: bin, logPath: filepath.Join(t.TempDir(), fmt.Sprintf("manager-%d.log", i)), args: []string{
			"--kubeconfig", kubeconfigVia(t, links[i]), "--controllers", "metal", "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
			"--shards", fmt.Sprint(shards), "--shard-namespace", "default", "--shard-lease-name", lease,
			"--leader-election-lease-duration", leaseDuration.String(), "--leader-election-renew-deadline", renewDeadline.String(), "--leader-election-retry-period", retryPeriod.String(),
			"--bmc-request-timeout", requestTimeout.String(),
			"--registry-bind-address", "127.0.0.1:0", "--power-poll", "100ms", "--discovery-namespace", "default",
			"--zap-time-encoding", "rfc3339nano",
		}}
	}
	front := registryFront(t, managers...)
	for _, m := range managers {
		m.args = append(m.args, "--registry-url", front)
		m.start(t)
	}
	defer func() {
		for _, m := range managers {
			m.kill()
		}
	}()
	identityRE := regexp.MustCompile(`"msg":"sharding the fleet".*"identity":"([^"]+)"`)
	ids := make([]string, len(managers))
	for i, m := range managers {
		b, _ := os.ReadFile(m.logPath)
		s := identityRE.FindSubmatch(b)
		if s == nil {
			t.Fatalf("no shard identity in %s:\n%s", m.logPath, b)
		}
		ids[i] = string(s[1])
	}
	holderOf := func(i int) string {
		l := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: fmt.Sprintf("%s-%d", lease, i)}, l); err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}

	names := registerFleet(t, fleet, "part")
	waitFor := func(what string, timeout time.Duration, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(timeout); !done(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after %s", what, timeout)
			}
		}
	}
	server := func(name string) *metalv1alpha1.Server {
		s := &metalv1alpha1.Server{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
			return &metalv1alpha1.Server{}
		}
		return s
	}
	waitFor("every server Available", 3*time.Minute, func() bool {
		for _, n := range names {
			if server(n).Annotations[lifecycle.StateAnnotation] != string(metalv1alpha1.ServerStateAvailable) {
				return false
			}
		}
		return true
	})
	// Both replicas hold a shard; the one holding BMC 0's is the one cut off.
	target := shard.Of(shard.KeyBMC("part-0"), shards)
	waitFor("both shards held by different replicas", time.Minute, func() bool {
		a, b := holderOf(0), holderOf(1)
		return a != "" && b != "" && a != b
	})
	old := 0
	if holderOf(target) == ids[1] {
		old = 1
	}
	next := 1 - old
	t.Logf("BMC part-0 is in shard %d, held by replica %d (%s)", target, old, ids[old])

	// Every answer of BMC 0 now takes 9 s; its journal records who sent what, and when.
	b := fleet.BMC(0)
	b.JournalRequests(true)
	b.SetFaults(redfish.Faults{Latency: redfish.Duration(slow)})
	claimed := time.Now()
	if err := env.Client.Create(ctx, &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "part-0"},
		Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "img", ServerRef: &corev1.LocalObjectReference{Name: names[0]}}}); err != nil {
		t.Fatal(err)
	}
	waitFor("a request of the shard's owner in flight at BMC 0", time.Minute, func() bool { return b.Stats().InFlight > 0 })
	cut := time.Now()
	links[old].Partition()
	t.Logf("replica %d cut off from the API server with a request in flight", old)

	waitFor("the shard taken over", 2*leaseDuration+4*retryPeriod, func() bool { return holderOf(target) == ids[next] })
	t.Logf("replica %d took shard %d %s after the cut", next, target, time.Since(cut).Round(100*time.Millisecond))
	byNew := func() int {
		n := 0
		for _, s := range b.RequestSpans() {
			if strings.Contains(s.UserAgent, ids[next]) {
				n++
			}
		}
		return n
	}
	waitFor("a request of the new owner answered at BMC 0", 3*time.Minute, func() bool { return byNew() > 0 })
	// The answers may be quick again: what is judged is who sent what, and when.
	b.SetFaults(redfish.Faults{})
	waitFor("the claimed server Reserved and On under the new owner", 3*time.Minute, func() bool {
		s := server(names[0])
		return s.Annotations[lifecycle.StateAnnotation] == string(metalv1alpha1.ServerStateReserved) && s.Status.PowerState == metalv1alpha1.PowerStateOn
	})

	var lastOld, firstNew time.Time
	inFlightAtCut := false
	for _, s := range b.RequestSpans() {
		switch {
		case strings.Contains(s.UserAgent, ids[old]):
			if s.End.After(lastOld) {
				lastOld = s.End
			}
			if s.Start.Before(cut) && s.End.After(cut) && s.End.Sub(s.Start) >= slow {
				inFlightAtCut = true
			}
		case strings.Contains(s.UserAgent, ids[next]):
			if firstNew.IsZero() || s.Start.Before(firstNew) {
				firstNew = s.Start
			}
		default:
			t.Errorf("a request to BMC 0 from no replica: %+v", s)
		}
	}
	if !inFlightAtCut {
		t.Fatalf("no 9 s request of the old owner was in flight at the cut: %+v", b.RequestSpans())
	}
	t.Logf("old owner's last request ended %s after the cut; new owner's first began %s after it",
		lastOld.Sub(cut).Round(10*time.Millisecond), firstNew.Sub(cut).Round(10*time.Millisecond))
	if !firstNew.After(lastOld) {
		for _, s := range b.RequestSpans() {
			t.Logf("%s %s %s..%s", s.UserAgent, s.Method+" "+s.Path, s.Start.Sub(cut).Round(10*time.Millisecond), s.End.Sub(cut).Round(10*time.Millisecond))
		}
		t.Fatalf("the new owner's first request began %s before the old owner's last one ended", lastOld.Sub(firstNew))
	}
	ons := 0
	for _, r := range fleet.Records() {
		if r.BMC == 0 && r.Action == "Reset" && r.ResetType == "On" && r.Time.After(claimed) {
			ons++
		}
	}
	if got := fmt.Sprint(actionsPerBMC(fleet)[0]); ons != 1 {
		t.Errorf("BMC 0: %d power-ons for the claim, want exactly one across the hand-over (actions %s)", ons, got)
	}
}

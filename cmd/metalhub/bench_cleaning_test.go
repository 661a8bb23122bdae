package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/emulator/netboot"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
)

// BenchmarkReleaseCleaning: 100 claimed servers (METALHUB_BENCH_SERVERS), their tenants' OS
// having written to every disk, are released at once with --cleaning-policy AllDisks; timed
// from the claims' deletion until every one is Available again with a verified record and no
// tenant data left on its disk files. Reports the wall time and the API writes per server of
// the release (cleaning included).
func BenchmarkReleaseCleaning(b *testing.B) {
	n := 100
	if v, err := strconv.Atoi(os.Getenv("METALHUB_BENCH_SERVERS")); err == nil && v > 0 {
		n = v
	}
	bin, err := testenv.MetalhubBinary()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		purgeMetal(b)
		_ = env.Client.DeleteAllOf(ctx, &metalv1alpha1.ServerClaim{}, client.InNamespace("default"))
		mgr := &managerProcess{bin: bin, logPath: filepath.Join(b.TempDir(), "manager.log"), args: []string{
			"--kubeconfig", env.Kubeconfig, "--controllers", "metal", "--zap-log-level", "error",
			"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "0", "--registry-bind-address", "127.0.0.1:0",
			"--discovery-namespace", "default", "--kube-api-qps", "500", "--kube-api-burst", "1000", "--metal-concurrency", "32",
			"--cleaning-policy", "AllDisks", "--power-poll", "500ms",
		}}
		front := registryFront(b, mgr)
		mgr.args = append(mgr.args, "--registry-url", front)
		// The claimed machines' OS boots (which write the tenant data) read their metadata from
		// the registry.
		nb, err := netboot.New(netboot.Options{Client: env.Client, Namespace: "default", MaxConcurrent: 16, ProbeInterval: time.Second,
			TenantData: true, MetadataURL: front, Logger: logr.Discard()})
		if err != nil {
			b.Fatal(err)
		}
		fleet, err := redfish.Start(redfish.Options{BMCs: n, PowerDelay: -1, OnBoot: nb.OnBoot, MaxSessions: 4})
		if err != nil {
			b.Fatal(err)
		}
		mgr.start(b)
		names := registerFleet(b, fleet, "rel")
		waitStates(b, names, metalv1alpha1.ServerStateAvailable, 10*time.Minute)
		uuids := map[string]string{}
		for i, name := range names {
			s := &metalv1alpha1.Server{}
			if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
				b.Fatal(err)
			}
			uuids[name] = s.Spec.SystemUUID
			c := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("rel-claim-%d", i)},
				Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "os:1", ServerRef: &corev1.LocalObjectReference{Name: name}}}
			if err := env.Client.Create(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
		waitStates(b, names, metalv1alpha1.ServerStateReserved, 10*time.Minute)
		deadline := time.Now().Add(5 * time.Minute)
		for _, name := range names {
			for {
				held, err := nb.TenantData(uuids[name])
				if err == nil && len(held) > 0 {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("%s: its OS wrote no tenant data (%v)", name, err)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}

		writes0 := apiWrites(b)
		b.StartTimer()
		start := time.Now()
		if err := env.Client.DeleteAllOf(ctx, &metalv1alpha1.ServerClaim{}, client.InNamespace("default")); err != nil {
			b.Fatal(err)
		}
		waitStates(b, names, metalv1alpha1.ServerStateAvailable, 20*time.Minute)
		wall := time.Since(start)
		b.StopTimer()
		writes1 := apiWrites(b)
		all, breakdown := testenv.WritesPer(writes0, writes1, n, nil)
		toServer, _ := testenv.WritesPer(writes0, writes1, n, toServers)

		disks := 0
		for _, name := range names {
			cm := &corev1.ConfigMap{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: cleaning.ObjectName(name)}, cm); err != nil {
				b.Fatalf("%s: %v", name, err)
			}
			rec, err := cleaning.Decode(cm)
			if err != nil || len(rec.Cleanings) != 1 {
				b.Fatalf("%s: record %+v %v", name, rec, err)
			}
			if ok, why := cleaning.Verdict(rec.Cleanings[0], metalv1alpha1.CleaningPolicyAllDisks, nil); !ok {
				b.Fatalf("%s: %s", name, why)
			}
			disks += len(rec.Cleanings[0].Disks)
			if held, err := nb.TenantData(uuids[name]); err != nil || len(held) > 0 {
				b.Fatalf("%s: disks %v still hold tenant data (%v)", name, held, err)
			}
		}
		b.ReportMetric(wall.Seconds(), "s-release-to-all-available")
		b.ReportMetric(all, "api-writes/server")
		b.ReportMetric(toServer, "server-object-writes/server")
		fmt.Printf("%d servers released at once: all cleaned (AllDisks, %d disks erased and read back) and Available in %s; %.1f API writes per server (%.1f to the Server object)\n",
			n, disks, wall.Round(100*time.Millisecond), all, toServer)
		fmt.Printf("API writes per server by resource and verb: %s\n", breakdown)
		mgr.kill()
		nb.Close()
		_ = fleet.Close()
		_ = env.Client.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace("default"))
	}
}

// waitStates waits until every named Server's durable state is state.
func waitStates(b *testing.B, names []string, state metalv1alpha1.ServerState, within time.Duration) {
	b.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(metalv1alpha1.GroupVersion.WithKind("ServerList"))
		if err := env.Client.List(ctx, list, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}); err != nil {
			b.Fatal(err)
		}
		want := map[string]bool{}
		for _, n := range names {
			want[n] = true
		}
		counts := map[string]int{}
		for _, s := range list.Items {
			if want[s.Name] {
				counts[s.Annotations[lifecycle.StateAnnotation]]++
			}
		}
		if counts[string(state)] == len(names) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("not all %s after %s: %v", state, within, counts)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

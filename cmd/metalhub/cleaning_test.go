package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/emulator/netboot"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/probe"
	"github.com/metalhub/metalhub/internal/testenv"
)

// A released server is cleaned before anyone can claim it again, through the real registry and
// agent: its tenant's OS wrote to its disks; after the claim goes it is in Cleaning, a claim made
// meanwhile binds another server, and it is Available only once every disk was erased and read
// back, with the proof in its cleaning record and the tenant's data gone from the disk files.
// A machine with a disk that cannot be erased ends in Error naming that disk, unclaimable.
func TestReleaseCleansBeforeAvailable(t *testing.T) {
	purgeMetal(t)
	bin, err := testenv.MetalhubBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m := &managerProcess{bin: bin, logPath: filepath.Join(t.TempDir(), "manager.log"), args: []string{
		"--kubeconfig", env.Kubeconfig, "--controllers", "metal", "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--registry-bind-address", "127.0.0.1:0", "--power-poll", "100ms", "--retry-after", "500ms", "--discovery-namespace", "default",
		"--cleaning-policy", "AllDisks",
	}}
	front := registryFront(t, m)
	m.args = append(m.args, "--registry-url", front)
	nb, err := netboot.New(netboot.Options{Client: env.Client, Namespace: "default", ProbeInterval: 200 * time.Millisecond,
		MetadataURL: front, TenantData: true, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	fleet, err := redfish.Start(redfish.Options{BMCs: 3, PowerDelay: 200 * time.Millisecond, OnBoot: nb.OnBoot})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	m.start(t)
	defer m.kill()

	names := registerFleet(t, fleet, "clean")
	waitServers(t, names, metalv1alpha1.ServerStateAvailable, 90*time.Second)
	for _, name := range names {
		// A merge patch of the label alone: the controllers write the Server at the same time.
		s := server(t, name)
		patch := client.MergeFrom(s.DeepCopy())
		s.Labels = map[string]string{"pool": "cleaning-test"}
		if err := env.Client.Patch(ctx, s, patch); err != nil {
			t.Fatal(err)
		}
	}
	first := names[0]
	uuid := server(t, first).Spec.SystemUUID

	claim(t, "tenant-a", &corev1.LocalObjectReference{Name: first}, nil)
	waitFor(t, 60*time.Second, "the tenant's OS to write to its disks", func() (bool, string) {
		held, err := nb.TenantData(uuid)
		return err == nil && len(held) > 0, fmt.Sprintf("%v %v", held, err)
	})
	held, _ := nb.TenantData(uuid)
	deleteClaim(t, "tenant-a")
	waitServers(t, []string{first}, metalv1alpha1.ServerStateCleaning, 60*time.Second)

	// A claim made while the released server is cleaned binds another one.
	claim(t, "tenant-b", nil, &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "cleaning-test"}})
	var boundTo string
	waitFor(t, 60*time.Second, "tenant-b to bind", func() (bool, string) {
		c := &metalv1alpha1.ServerClaim{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "tenant-b"}, c); err != nil || c.Spec.ServerRef == nil {
			return false, fmt.Sprint(err)
		}
		boundTo = c.Spec.ServerRef.Name
		return c.Status.Phase == metalv1alpha1.PhaseBound, string(c.Status.Phase)
	})
	if boundTo == first {
		t.Fatalf("tenant-b bound %s, the server being cleaned", first)
	}

	waitServers(t, []string{first}, metalv1alpha1.ServerStateAvailable, 120*time.Second)
	s := server(t, first)
	cond := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionCleaned)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != metalv1alpha1.ReasonCleaningVerified {
		t.Fatalf("Cleaned condition %+v", cond)
	}
	if left, err := nb.TenantData(uuid); err != nil || len(left) != 0 {
		t.Fatalf("after a verified cleaning, disks %v still hold the tenant's data (%v)", left, err)
	}
	rec := record(t, first)
	if len(rec.Cleanings) != 1 {
		t.Fatalf("%d cleanings recorded", len(rec.Cleanings))
	}
	e := rec.Cleanings[0]
	var erased []string
	for _, d := range e.Disks {
		if d.Role != probe.RoleSanitize || d.Proof == nil || !d.Proof.Verified || d.Proof.Samples == 0 || d.Serial == "" {
			t.Fatalf("disk %+v proof %+v", d, d.Proof)
		}
		erased = append(erased, d.Name)
	}
	slices.Sort(erased)
	slices.Sort(held)
	if e.Policy != "AllDisks" || !slices.Equal(erased, held) {
		t.Fatalf("policy %s, disks erased %v, disks the tenant wrote %v", e.Policy, erased, held)
	}

	// A machine with a disk that cannot be erased: its release ends in Error naming the disk.
	other := server(t, boundTo).Spec.SystemUUID
	waitFor(t, 60*time.Second, "tenant-b's OS to write to its disks", func() (bool, string) {
		held, err := nb.TenantData(other)
		return err == nil && len(held) > 0, fmt.Sprintf("%v %v", held, err)
	})
	disks, err := nb.DiskNames(other)
	if err != nil || len(disks) == 0 {
		t.Fatalf("disks of %s: %v %v", boundTo, disks, err)
	}
	if err := nb.BreakDisk(other, disks[0]); err != nil {
		t.Fatal(err)
	}
	deleteClaim(t, "tenant-b")
	waitServers(t, []string{boundTo}, metalv1alpha1.ServerStateError, 120*time.Second)
	s = server(t, boundTo)
	cond = apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionCleaned)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != metalv1alpha1.ReasonCleaningFailed || !strings.Contains(cond.Message, "disk "+disks[0]) {
		t.Fatalf("Cleaned condition of the server with a broken disk: %+v", cond)
	}
	if s.Annotations["lifecycle.metalhub.io/cleaning"] != "AllDisks" {
		t.Fatalf("the failed server lost its mark: %v", s.Annotations)
	}
}

func server(t *testing.T, name string) *metalv1alpha1.Server {
	t.Helper()
	s := &metalv1alpha1.Server{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func record(t *testing.T, name string) *cleaning.Record {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: cleaning.ObjectName(name)}, cm); err != nil {
		t.Fatal(err)
	}
	rec, err := cleaning.Decode(cm)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func claim(t *testing.T, name string, ref *corev1.LocalObjectReference, sel *metav1.LabelSelector) {
	t.Helper()
	c := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: metalv1alpha1.ServerClaimSpec{
		Power: metalv1alpha1.PowerOn, ServerRef: ref, ServerSelector: sel, Image: "os-image:1"}}
	if err := env.Client.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

func deleteClaim(t *testing.T, name string) {
	t.Helper()
	c := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	if err := env.Client.Delete(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls ok until it holds or within passes; what names what is awaited.
func waitFor(t *testing.T, within time.Duration, what string, ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		done, last := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting %s for %s: %s", within, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/discovery"
	"github.com/metalhub/metalhub/internal/probe"
	"github.com/metalhub/metalhub/internal/probe/erase"
)

// newServerCleaning is a Server in a cleaning round: the round Secret carries the cleaning purpose.
func newServerCleaning(t *testing.T, r *running, name, uuid string) *round {
	t.Helper()
	rd := newServerInDiscovery(t, r, name, uuid)
	sec := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: discovery.ObjectName(name)}, sec); err != nil {
		t.Fatal(err)
	}
	sec.Labels[discovery.PurposeLabel] = discovery.PurposeCleaning
	if err := env.Client.Update(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	return rd
}

func cleaningReport(uuid string, verified bool) *probe.CleaningReport {
	p := &erase.Proof{Device: "/dev/nvme0n1", Method: erase.MethodDiscard, Verified: verified, Samples: 258}
	if !verified {
		p.Failure = "4 of 258 sampled blocks unchanged after Discard"
	}
	return &probe.CleaningReport{Version: probe.ReportVersion, SystemUUID: uuid, DMIUUID: strings.ToLower(uuid), Policy: probe.CleaningAllDisks,
		Disks: []probe.DiskCleaning{{BlockDevice: probe.BlockDevice{Name: "nvme0n1", Serial: "S64N"}, Role: probe.RoleSanitize, Proof: p}}}
}

func postCleaning(t *testing.T, url, token string, rep *probe.CleaningReport) (int, string) {
	t.Helper()
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url+probe.CleanPath, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

func cleaningRecord(t *testing.T, server string) *cleaning.Record {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: cleaning.ObjectName(server)}, cm); err != nil {
		t.Fatal(err)
	}
	rec, err := cleaning.Decode(cm)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// A cleaning report with the cleaning round's token is stored in the record, failed disks as
// faithfully as erased ones, and the round is marked cleaned; a retry changes nothing.
func TestCleaningReportStored(t *testing.T) {
	r := startRegistry(t, nil)
	const uuid = "6a1f0c1e-0000-4000-8000-00000000c1ea"
	rd := newServerCleaning(t, r, "clean-1", uuid)
	code, body := postCleaning(t, r.url, rd.token, cleaningReport(uuid, false))
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	if got := get(t, "clean-1").Annotations[discovery.CleanedAnnotation]; got != rd.id {
		t.Fatalf("cleaned annotation %q, want round %s", got, rd.id)
	}
	rec := cleaningRecord(t, "clean-1")
	e, ok := rec.Of(rd.id)
	if !ok || e.Policy != probe.CleaningAllDisks || len(e.Disks) != 1 || e.Disks[0].Proof.Verified || e.Disks[0].Proof.Failure == "" {
		t.Fatalf("record %+v", rec)
	}
	if ok, why := cleaning.Verdict(e, metalv1alpha1.CleaningPolicyAllDisks, nil); ok || !strings.Contains(why, "nvme0n1 (serial S64N) not erased") {
		t.Fatalf("verdict of the stored entry: %v %q", ok, why)
	}
	if code, body := postCleaning(t, r.url, rd.token, cleaningReport(uuid, true)); code != http.StatusOK {
		t.Fatalf("retry: %d %s", code, body)
	}
	if rec := cleaningRecord(t, "clean-1"); len(rec.Cleanings) != 1 || rec.Cleanings[0].Disks[0].Proof.Verified {
		t.Fatalf("a retry of a stored round rewrote it: %+v", rec)
	}
}

// A discovery round's token posts no cleaning, a cleaning round's no hardware, and a report
// from another machine is refused.
func TestCleaningRefusals(t *testing.T) {
	r := startRegistry(t, nil)
	const uuid = "6a1f0c1e-0000-4000-8000-00000000c1eb"
	rd := newServerInDiscovery(t, r, "clean-2", uuid)
	if code, _ := postCleaning(t, r.url, rd.token, cleaningReport(uuid, true)); code != http.StatusUnauthorized {
		t.Fatalf("a discovery token posted a cleaning: %d", code)
	}
	const uuid3 = "6a1f0c1e-0000-4000-8000-00000000c1ec"
	rc := newServerCleaning(t, r, "clean-3", uuid3)
	if code, _ := post(t, r.url, "Bearer "+rc.token, encode(t, sampleReport(uuid3))); code != http.StatusUnauthorized {
		t.Fatalf("a cleaning token posted hardware: %d", code)
	}
	other := cleaningReport(uuid3, true)
	other.DMIUUID = "6a1f0c1e-0000-4000-8000-0000000000ff"
	if code, _ := postCleaning(t, r.url, rc.token, other); code != http.StatusForbidden {
		t.Fatalf("a report from another machine: %d", code)
	}
	bad := cleaningReport(uuid3, true)
	bad.Policy = "Shred"
	if code, _ := postCleaning(t, r.url, rc.token, bad); code != http.StatusBadRequest {
		t.Fatalf("an invalid report: %d", code)
	}
	for _, name := range []string{"clean-2", "clean-3"} {
		if s := get(t, name); s.Annotations[discovery.CleanedAnnotation] != "" || s.Annotations[discovery.ReportedAnnotation] != "" {
			t.Fatalf("%s was marked after refusals: %v", name, s.Annotations)
		}
	}
}

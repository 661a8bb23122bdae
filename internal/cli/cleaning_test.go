package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/probe"
	"github.com/metalhub/metalhub/internal/probe/erase"
)

// The report prints the record the registry keeps, each cleaning with the verdict of its own
// policy; a record of an earlier server of the same name is not this one's.
func TestCleaningReport(t *testing.T) {
	ctx := context.Background()
	s := server(t, "cln-a", "Available", nil)
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	disk := func(name string, verified bool) probe.DiskCleaning {
		p := &erase.Proof{Device: "/dev/" + name, Method: erase.MethodDiscard, Start: at, End: at.Add(90 * time.Second), Samples: 258, Verified: verified}
		if !verified {
			p.Failure = "2 of 258 sampled blocks unchanged after Discard"
		}
		return probe.DiskCleaning{BlockDevice: probe.BlockDevice{Name: name, Serial: "SN-" + name, SizeBytes: 960 << 30}, Role: probe.RoleSanitize, Proof: p}
	}
	rec := cleaning.Record{Server: "cln-a", Cleanings: []cleaning.Entry{
		{Round: "r1", Policy: "AllDisks", Reported: at, Disks: []probe.DiskCleaning{disk("nvme0n1", true), disk("nvme1n1", false)}},
		{Round: "r2", Policy: "AllDisks", Reported: at.Add(time.Hour), Disks: []probe.DiskCleaning{disk("nvme0n1", true), disk("nvme1n1", true)}},
	}}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cln-ns"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cm, err := cleaning.ConfigMap("cln-ns", rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := controllerutil.SetOwnerReference(s, cm, env.Client.Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cm) })

	out, _, err := runCmd(t, "cleaning", "report", "cln-a")
	if err != nil {
		t.Fatal(err)
	}
	var rep CleaningReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Server != "cln-a" || rep.SystemUUID != "uuid-cln-a" || len(rep.Cleanings) != 2 {
		t.Fatalf("report %+v", rep)
	}
	if v := rep.Cleanings[0].Verdict; !strings.HasPrefix(v, "failed: disk nvme1n1 (serial SN-nvme1n1) not erased") {
		t.Fatalf("verdict of the failed cleaning: %q", v)
	}
	if v := rep.Cleanings[1].Verdict; v != "verified" || rep.Cleanings[1].Disks[1].Proof.Samples != 258 {
		t.Fatalf("second cleaning: %+v", rep.Cleanings[1])
	}
	out, _, err = runCmd(t, "cleaning", "report", "cln-a", "-o", "table", "--discovery-namespace", "cln-ns")
	if err != nil || !strings.Contains(out, "SN-nvme1n1") || !strings.Contains(out, "90.0") || !strings.Contains(out, "verified") {
		t.Fatalf("table: %v\n%s", err, out)
	}

	// The same name, another server: the old record is not its proof.
	if err := env.Client.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := env.Client.Get(ctx, clientKey("cln-a"), s); apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("server not gone")
		}
		time.Sleep(50 * time.Millisecond)
	}
	server(t, "cln-a", "Available", nil)
	if out, _, err = runCmd(t, "cleaning", "report", "cln-a"); err != nil || !strings.Contains(out, `"cleanings": []`) {
		t.Fatalf("a new server of the name shows the old record: %v\n%s", err, out)
	}
	if _, _, err := runCmd(t, "cleaning", "report", "cln-a", "-o", "xml"); err == nil || !IsUsage(err) {
		t.Fatalf("bad format: %v", err)
	}
}

func clientKey(name string) client.ObjectKey { return client.ObjectKey{Name: name} }

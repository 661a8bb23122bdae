package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccert"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/testenv"
)

// BMCs served with self-signed certificates get one from a CA through the certificate flow, with
// the manager (its own process) killed with SIGKILL while each BMC's request waits for the
// signer, and again while the signed certificates are being installed, and a BMC's status wiped
// mid-way. Each BMC ends with exactly one certificate installed (one ReplaceCertificate), never
// more than one request outstanding, and the manager connecting to it with TLS verified against
// the CA alone.
func TestCertificateSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs and kills the manager binary")
	}
	const n, signer = 4, "example.com/bmc-serving"
	purgeMetal(t)
	bin, err := testenv.MetalhubBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := env.Client
	fleet, err := redfish.Start(redfish.Options{BMCs: n, TLS: true, PowerDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	ca := testenv.NewCA(t, "metalhub test BMC CA")
	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bmc-ca"}, Data: map[string]string{"ca.crt": string(ca.PEM)}}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bmc-ca"}})
	}()
	names := make([]string, n)
	for i, b := range fleet.BMCs() {
		user, pass := b.Credentials()
		names[i] = fmt.Sprintf("cert-%d", i)
		port, _ := strconv.Atoi(b.URL()[strings.LastIndex(b.URL(), ":")+1:])
		if err := c.Create(ctx, &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: names[i]},
			StringData: map[string]string{"username": user, "password": pass}}); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, &metalv1alpha1.BMC{
			// Self-signed at first: reached with verification off, as fleets run today.
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Annotations: map[string]string{bmcaccess.InsecureAnnotation: "true"}},
			Spec: metalv1alpha1.BMCSpec{
				Access: &metalv1alpha1.InlineEndpoint{IP: "127.0.0.1"}, BMCSecretRef: corev1.LocalObjectReference{Name: names[i]},
				Protocol: metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: int32(port), Scheme: "https"},
				Certificate: &metalv1alpha1.BMCCertificate{SignerName: signer, Duration: &metav1.Duration{Duration: time.Hour},
					CABundleRef: &metalv1alpha1.CABundleReference{Namespace: "default", Name: "bmc-ca"}},
			}}); err != nil {
			t.Fatal(err)
		}
	}
	mgr := &managerProcess{bin: bin, logPath: filepath.Join(t.TempDir(), "manager.log"), args: []string{
		"--kubeconfig", env.Kubeconfig, "--controllers", "metal",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--registry-bind-address", "0",
		"--bmc-request-timeout", "2s", "--discovery-namespace", "default", "--graceful-shutdown-timeout", "1s",
	}}
	mgr.start(t)
	defer func() {
		mgr.kill()
		if t.Failed() {
			if b, err := os.ReadFile(mgr.logPath); err == nil {
				lines := strings.Split(string(b), "\n")
				t.Logf("last manager log lines:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
			}
		}
	}()

	requests := func() map[string][]certificatesv1.CertificateSigningRequest {
		list := &certificatesv1.CertificateSigningRequestList{}
		if err := c.List(ctx, list, client.HasLabels{bmccert.BMCLabel}); err != nil {
			t.Fatal(err)
		}
		out := map[string][]certificatesv1.CertificateSigningRequest{}
		for _, r := range list.Items {
			if r.DeletionTimestamp.IsZero() {
				out[r.Labels[bmccert.BMCLabel]] = append(out[r.Labels[bmccert.BMCLabel]], r)
			}
		}
		return out
	}
	// Every BMC's request is waiting for the signer: the manager dies.
	testenv.Eventually(t, 60*time.Second, "a request per BMC", func() (bool, string) {
		reqs := requests()
		return len(reqs) == n, fmt.Sprintf("%d of %d BMCs have a request", len(reqs), n)
	})
	mgr.kill()
	wipeStatus(t, names[0])
	mgr.start(t)
	// The signer signs; the manager dies again as the installs begin.
	kills, signed := 0, 0
	testenv.Eventually(t, 90*time.Second, "every BMC pinned", func() (bool, string) {
		reqs := requests()
		for name, rs := range reqs {
			if len(rs) > 1 {
				t.Fatalf("BMC %s has %d requests outstanding: %v", name, len(rs), rs)
			}
			for _, r := range rs {
				if len(r.Status.Certificate) == 0 && !denied(r) {
					approveAndSign(t, c, ca, r)
					signed++
				}
			}
		}
		if signed >= n && kills == 0 {
			kills++
			mgr.kill()
			wipeStatus(t, names[1])
			mgr.start(t)
		}
		pinned := 0
		for _, name := range names {
			b := &metalv1alpha1.BMC{}
			if err := c.Get(ctx, client.ObjectKey{Name: name}, b); err != nil {
				return false, err.Error()
			}
			cond := meta.FindStatusCondition(b.Status.Conditions, metalv1alpha1.ConditionCertificateReady)
			if b.Status.Certificate != nil && b.Status.Certificate.Pinned && cond != nil && cond.Reason == metalv1alpha1.ReasonCertificateInstalled {
				pinned++
			}
		}
		return pinned == n, fmt.Sprintf("%d of %d pinned, %d signed", pinned, n, signed)
	})
	if left := requests(); len(left) != 0 {
		t.Errorf("requests left behind: %v", left)
	}
	replaced := map[int]int{}
	for _, r := range fleet.Records() {
		if r.Action == redfish.ActionReplaceCertificate {
			replaced[r.BMC]++
		}
	}
	pool := bmc.NewPool(bmc.Options{RequestTimeout: 5 * time.Second})
	defer pool.Close()
	for i, b := range fleet.BMCs() {
		if replaced[i] != 1 {
			t.Errorf("BMC %d: %d certificates installed, want 1", i, replaced[i])
		}
		if got := b.Certificate().Issuer.CommonName; got != "metalhub test BMC CA" {
			t.Errorf("BMC %d serves a certificate from %q", i, got)
		}
		obj := &metalv1alpha1.BMC{}
		if err := c.Get(ctx, client.ObjectKey{Name: names[i]}, obj); err != nil {
			t.Fatal(err)
		}
		ep, err := bmcaccess.Endpoint(ctx, c, obj)
		if err != nil {
			t.Fatal(err)
		}
		if ep.InsecureSkipVerify || string(ep.CACert) != string(ca.PEM) {
			t.Errorf("BMC %d: insecure %v, CA pinned %v", i, ep.InsecureSkipVerify, string(ep.CACert) == string(ca.PEM))
			continue
		}
		conn, _ := pool.Get(ep)
		if _, err := conn.Systems(ctx); err != nil {
			t.Errorf("BMC %d: a verified connection: %v", i, err)
		}
	}
	// The manager itself reaches them verified, with verification off nowhere: the insecure
	// annotation goes (the step a fleet takes once its BMCs are pinned), which brings a pass of
	// the BMC controller. Its requests arrive over connections made after the pin (a pinned
	// endpoint is a new connection in the pool), and it still reports the BMCs connected.
	before := make([]int64, n)
	for i, b := range fleet.BMCs() {
		before[i] = b.Stats().Requests
	}
	for _, name := range names {
		b := &metalv1alpha1.BMC{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, b); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(b.DeepCopy())
		delete(b.Annotations, bmcaccess.InsecureAnnotation)
		if err := c.Patch(ctx, b, patch); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "BMCs reached and connected without the insecure annotation", func() (bool, string) {
		for i, name := range names {
			if got := fleet.BMC(i).Stats().Requests; got <= before[i] {
				return false, fmt.Sprintf("%s: no request since the annotation went", name)
			}
			b := &metalv1alpha1.BMC{}
			if err := c.Get(ctx, client.ObjectKey{Name: name}, b); err != nil {
				return false, err.Error()
			}
			if cond := meta.FindStatusCondition(b.Status.Conditions, metalv1alpha1.ConditionReady); cond == nil || cond.Reason != metalv1alpha1.ReasonConnected {
				return false, fmt.Sprintf("%s: %v", name, cond)
			}
		}
		return true, ""
	})
}

func denied(r certificatesv1.CertificateSigningRequest) bool {
	for _, c := range r.Status.Conditions {
		if c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed {
			return true
		}
	}
	return false
}

// wipeStatus empties a BMC's status, as a restore without status does.
func wipeStatus(t *testing.T, name string) {
	t.Helper()
	b := &metalv1alpha1.BMC{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, b); err != nil {
		t.Fatal(err)
	}
	b.Status = metalv1alpha1.BMCStatus{}
	if err := env.Client.Status().Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// approveAndSign is the approver and the signer of a request: approval through its subresource,
// the certificate (for the request's key and names, an hour) through status.
func approveAndSign(t *testing.T, c client.Client, ca *testenv.CA, r certificatesv1.CertificateSigningRequest) {
	t.Helper()
	ctx := context.Background()
	r.Status.Conditions = append(r.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "TestApproved", Message: "approved by the test"})
	if err := c.SubResource("approval").Update(ctx, &r); err != nil {
		t.Fatal(err)
	}
	r.Status.Certificate = ca.Sign(t, r.Spec.Request, time.Now().Add(-time.Minute), time.Hour)
	if err := c.Status().Update(ctx, &r); err != nil {
		t.Fatal(err)
	}
}

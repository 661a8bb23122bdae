package dev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controlplane"
	"github.com/metalhub/metalhub/internal/dashboard/browsertest"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
)

// metalhubCLI runs the metalhub binary against the dev run's cluster and returns its output
// and exit code.
func metalhubCLI(t *testing.T, bin, kubeconfig string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, append(args, "--kubeconfig", kubeconfig)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errOut.String(), 0
	case errors.As(err, &exit):
		return out.String(), errOut.String(), exit.ExitCode()
	default:
		t.Fatalf("metalhub %v: %v", args, err)
		return "", "", -1
	}
}

func (r *devRun) setFaults(t *testing.T, bmcIndex int, faults string) {
	t.Helper()
	method := http.MethodPut
	if faults == "" {
		method = http.MethodDelete
	}
	req, _ := http.NewRequest(method, fmt.Sprintf("http://%s/emulator/bmcs/%d/faults", r.control, bmcIndex), strings.NewReader(faults))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		t.Fatalf("faults: %s", resp.Status)
	}
}

func (r *devRun) server(t *testing.T, name string) *metalv1alpha1.Server {
	t.Helper()
	s := &metalv1alpha1.Server{}
	if err := r.c.Get(context.Background(), client.ObjectKey{Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// The everyday commands and the dashboard against `metalhub dev`, as a user runs them: the
// operator carries out what they write and the emulated BMCs record it; a power request while
// one is pending is refused; a claim applied with kubectl shows Reserved on the page within 2 s
// of the operator binding it, without a reload.
func TestFleetCommandsAndDashboardEndToEnd(t *testing.T) {
	t.Parallel() // a run of its own: every address on port 0, its own data directory
	if testing.Short() {
		t.Skip("end to end")
	}
	bin, err := testenv.MetalhubBinary()
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	run := startDev(t, bin, dataDir, []string{"--servers", "3", "--power-delay", "300ms", "--metrics-bind-address", "0",
		"--table=false"})
	kubeconfig := filepath.Join(dataDir, "kubeconfig")
	run.wait(t, "3/3 Available", 3*time.Minute, func() (bool, string) {
		st := run.states(t)
		n := 0
		for _, v := range st {
			if v == "Available/Off" {
				n++
			}
		}
		return n == 3, fmt.Sprint(st)
	})
	var names []string
	for n := range run.states(t) {
		names = append(names, n)
	}
	sort.Strings(names)
	cordoned, parked := names[0], names[2]

	out, errOut, code := metalhubCLI(t, bin, kubeconfig, "servers")
	if code != 0 || strings.Count(out, "Available") != 3 {
		t.Fatalf("servers: exit %d\n%s%s", code, out, errOut)
	}

	// cordon / uncordon: spec.unclaimable.
	if out, errOut, code = metalhubCLI(t, bin, kubeconfig, "cordon", cordoned); code != 0 || !run.server(t, cordoned).Spec.Unclaimable {
		t.Fatalf("cordon: exit %d %s%s", code, out, errOut)
	}
	if out, errOut, code = metalhubCLI(t, bin, kubeconfig, "uncordon", cordoned); code != 0 || run.server(t, cordoned).Spec.Unclaimable {
		t.Fatalf("uncordon: exit %d %s%s", code, out, errOut)
	}

	// park / unpark.
	if out, errOut, code = metalhubCLI(t, bin, kubeconfig, "park", parked); code != 0 {
		t.Fatalf("park: exit %d %s%s", code, out, errOut)
	}
	run.wait(t, parked+" Parked", time.Minute, func() (bool, string) {
		st := run.server(t, parked).Annotations[lifecycle.StateAnnotation]
		return st == string(metalv1alpha1.ServerStateParked), st
	})
	if out, errOut, code = metalhubCLI(t, bin, kubeconfig, "unpark", parked); code != 0 {
		t.Fatalf("unpark: exit %d %s%s", code, out, errOut)
	}
	run.wait(t, parked+" back to Available", time.Minute, func() (bool, string) {
		st := run.server(t, parked).Annotations[lifecycle.StateAnnotation]
		return st == string(metalv1alpha1.ServerStateAvailable), st
	})

	// The dashboard, in a real browser: the sample claim applied with kubectl.
	bctx := browsertest.New(t)
	browse := func(timeout time.Duration, a chromedp.Action[chromedp.Void]) error {
		c, cancel := context.WithTimeout(bctx, timeout)
		defer cancel()
		_, err := chromedp.Run(c, a)
		return err
	}
	if err := browse(15*time.Second, chromedp.Navigate(run.dashboard)); err != nil {
		t.Fatal(err)
	}
	if err := browse(15*time.Second, chromedp.Poll[chromedp.Void](
		`document.querySelector('#conn').dataset.status === 'live' && document.querySelectorAll('[data-rack^="DEV/"] [data-server]').length === 3`,
		chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("dashboard never showed the 3 servers live in dev's rack: %v", err)
	}
	// dev turns the buttons on: Cordon on the page writes what metalhub cordon writes.
	if err := browse(10*time.Second, chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-server=%q]`, cordoned)))); err != nil {
		t.Fatal(err)
	}
	if err := browse(10*time.Second, chromedp.Click(chromedp.CSS(`button[data-action="cordon"]`))); err != nil {
		t.Fatal(err)
	}
	run.wait(t, "the page's Cordon button cordons "+cordoned, 10*time.Second, func() (bool, string) {
		return run.server(t, cordoned).Spec.Unclaimable, "not unclaimable"
	})
	if out, errOut, code = metalhubCLI(t, bin, kubeconfig, "uncordon", cordoned); code != 0 || !strings.Contains(out, "uncordoned") {
		t.Fatalf("uncordon after the button: exit %d %s%s", code, out, errOut)
	}
	if err := browse(5*time.Second, chromedp.Evaluate[chromedp.Void](`window.__noReload = true`)); err != nil {
		t.Fatal(err)
	}
	assets, err := controlplane.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := exec.Command(filepath.Join(assets, "kubectl"), "apply", "-f", "../../config/samples/dev/serverclaim.yaml")
	kubectl.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	if out, err := kubectl.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	var bound string
	var reserved time.Time
	run.wait(t, "the claim's server Reserved", time.Minute, func() (bool, string) {
		claim := &metalv1alpha1.ServerClaim{}
		if err := run.c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "dev-claim"}, claim); err != nil || claim.Spec.ServerRef == nil {
			return false, fmt.Sprint(err)
		}
		bound = claim.Spec.ServerRef.Name
		st := run.server(t, bound).Annotations[lifecycle.StateAnnotation]
		reserved = time.Now()
		return st == string(metalv1alpha1.ServerStateReserved), st
	})
	if err := browse(2*time.Second, chromedp.Poll[chromedp.Void](
		fmt.Sprintf(`window.__noReload === true && document.querySelector('[data-server=%q]').dataset.state === 'Reserved'`, bound),
		chromedp.WithPollingInterval(10*time.Millisecond))); err != nil {
		t.Fatalf("%s Reserved in the cluster but not on the page within 2s: %v", bound, err)
	}
	t.Logf("%s shown Reserved on the page %s after the cluster said so", bound, time.Since(reserved).Round(time.Millisecond))

	// power, on the claimed server (an Available one is kept off by the operator): a BMC slow to
	// answer keeps the first request pending, so the second is refused.
	s := run.server(t, bound)
	bmcIndex := -1
	if _, err := fmt.Sscanf(s.Spec.BMCRef.Name, "bmc-%d", &bmcIndex); err != nil {
		t.Fatalf("BMC of %s: %v", bound, err)
	}
	run.wait(t, bound+" On", time.Minute, func() (bool, string) {
		s := run.server(t, bound)
		return s.Status.PowerState == metalv1alpha1.PowerStateOn, string(s.Status.PowerState)
	})
	run.setFaults(t, bmcIndex, `{"latency":"3s"}`)
	out, errOut, code = metalhubCLI(t, bin, kubeconfig, "power", "restart", bound, "--wait=false")
	if code != 0 {
		t.Fatalf("power restart: exit %d %s%s", code, out, errOut)
	}
	out, errOut, code = metalhubCLI(t, bin, kubeconfig, "power", "hard-restart", bound)
	if code != 1 || !strings.Contains(errOut, "refused") || !strings.Contains(errOut, "still pending") {
		t.Fatalf("second request while one is pending: exit %d\n%s%s", code, out, errOut)
	}
	run.setFaults(t, bmcIndex, "")
	run.wait(t, "the restart done", time.Minute, func() (bool, string) {
		a := run.server(t, bound).Annotations
		return a[metalv1alpha1.OperationAnnotation] == "" && a["lifecycle.metalhub.io/operation"] == "" &&
			strings.Contains(a["lifecycle.metalhub.io/operation-result"], " done"), fmt.Sprint(a)
	})
	if out, errOut, code = metalhubCLI(t, bin, kubeconfig, "power", "hard-restart", bound, "--timeout", "1m"); code != 0 || !strings.Contains(out, "power hard-restart: done") {
		t.Fatalf("power hard-restart: exit %d %s%s", code, out, errOut)
	}
	resets := map[string]int{}
	for _, rec := range run.records(t) {
		if rec["action"] == "Reset" && int(rec["bmc"].(float64)) == bmcIndex {
			resets[rec["resetType"].(string)]++
		}
	}
	// Each request reached the BMC exactly once (a vendor without GracefulRestart gets a
	// ForceRestart for restart); the refused one never did.
	if n := resets["GracefulRestart"] + resets["ForceRestart"]; n != 2 {
		t.Errorf("BMC %d recorded resets %v: want two restarts, one per accepted request", bmcIndex, resets)
	}

	// The release: a dev run cleans every disk before the server is Available again, and the
	// proof is what `metalhub cleaning report` prints.
	kubectl = exec.Command(filepath.Join(assets, "kubectl"), "delete", "-f", "../../config/samples/dev/serverclaim.yaml")
	kubectl.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	if out, err := kubectl.CombinedOutput(); err != nil {
		t.Fatalf("kubectl delete: %v\n%s", err, out)
	}
	seen := map[string]bool{}
	run.wait(t, bound+" cleaned and Available", 2*time.Minute, func() (bool, string) {
		st := run.server(t, bound).Annotations[lifecycle.StateAnnotation]
		seen[st] = true
		return st == string(metalv1alpha1.ServerStateAvailable) && seen[string(metalv1alpha1.ServerStateCleaning)], fmt.Sprint(seen)
	})
	out, errOut, code = metalhubCLI(t, bin, kubeconfig, "cleaning", "report", bound)
	if code != 0 || !strings.Contains(out, `"verdict": "verified"`) || !strings.Contains(out, `"policy": "AllDisks"`) {
		t.Fatalf("cleaning report: exit %d %s%s", code, out, errOut)
	}
}

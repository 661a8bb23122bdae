package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/syncbuf"
	"github.com/metalhub/metalhub/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

// runCmd runs one fleet command as a user would, with the test cluster's kubeconfig.
func runCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := &cobra.Command{Use: "metalhub", SilenceErrors: true, SilenceUsage: true}
	for _, c := range append(FleetCommands(), DeliveryCommands()...) {
		root.AddCommand(c)
	}
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append(args, "--kubeconfig", env.Kubeconfig))
	err := root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func server(t *testing.T, name, state string, mutate func(*metalv1alpha1.Server)) *metalv1alpha1.Server {
	t.Helper()
	s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: name,
		Annotations: map[string]string{lifecycle.StateAnnotation: state},
		Labels:      map[string]string{metalv1alpha1.MetadataKeyPrefix + "rack": "1-2"}},
		Spec: metalv1alpha1.ServerSpec{SystemUUID: "uuid-" + name}}
	if mutate != nil {
		mutate(s)
	}
	if err := env.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), s) })
	return s
}

func get(t *testing.T, name string) *metalv1alpha1.Server {
	t.Helper()
	s := &metalv1alpha1.Server{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestServersTableAndFormats(t *testing.T) {
	server(t, "tbl-a", "Available", nil)
	server(t, "tbl-b", "Reserved", func(s *metalv1alpha1.Server) {
		s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "ns", Name: "claim-b"}
		s.Spec.Unclaimable = true
		s.Annotations[metalv1alpha1.HardwareFaultAnnotation] = `[{"entry":"3","message":"PSU 1 failed"}]`
		s.Annotations[metalv1alpha1.InventoryDriftAnnotation] = "1 of 8 GPUs missing"
	})
	out, _, err := runCmd(t, "servers", "tbl-a", "tbl-b")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME ") {
		t.Fatalf("table:\n%s", out)
	}
	for _, want := range [][]string{{"tbl-a", "Available", "<none>", "false", " ok "}, {"tbl-b", "Reserved", "ns/claim-b", "true", "fault,drift"}} {
		row := strings.Join(strings.Fields(lines[map[string]int{"tbl-a": 1, "tbl-b": 2}[want[0]]]), " ")
		for _, w := range want {
			if !strings.Contains(row, w) {
				t.Errorf("row %q lacks %q", row, w)
			}
		}
	}

	out, _, err = runCmd(t, "servers", "-o", "wide", "-l", metalv1alpha1.MetadataKeyPrefix+"rack=1-2")
	if err != nil || !strings.Contains(out, "SYSTEM UUID") || !strings.Contains(out, "uuid-tbl-a") || !strings.Contains(out, "1-2") || !strings.Contains(out, "CLEANED") {
		t.Fatalf("wide: %v\n%s", err, out)
	}
	out, _, err = runCmd(t, "servers", "tbl-b", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Kind  string
		Items []metalv1alpha1.Server
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || list.Kind != "ServerList" || len(list.Items) != 1 || list.Items[0].Name != "tbl-b" {
		t.Fatalf("json: %v\n%s", err, out)
	}
	out, _, err = runCmd(t, "servers", "tbl-a", "-o", "yaml")
	if err != nil || !strings.Contains(out, "kind: Server\n") || !strings.Contains(out, "name: tbl-a") {
		t.Fatalf("yaml: %v\n%s", err, out)
	}
	if out, _, err = runCmd(t, "servers", "-o", "name", "tbl-a"); err != nil || out != "server/tbl-a\n" {
		t.Fatalf("name: %v %q", err, out)
	}
	if _, _, err = runCmd(t, "servers", "-o", "xml"); err == nil || !IsUsage(err) {
		t.Fatalf("bad format: %v", err)
	}
	if _, _, err = runCmd(t, "servers", "no-such-server"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing server: %v", err)
	}
}

func TestCordonUncordon(t *testing.T) {
	server(t, "cord", "Available", nil)
	out, _, err := runCmd(t, "cordon", "cord")
	if err != nil || out != "server/cord cordoned\n" || !get(t, "cord").Spec.Unclaimable {
		t.Fatalf("cordon: %v %q unclaimable=%v", err, out, get(t, "cord").Spec.Unclaimable)
	}
	if out, _, _ = runCmd(t, "cordon", "cord"); out != "server/cord already cordoned\n" {
		t.Errorf("second cordon: %q", out)
	}
	if out, _, err = runCmd(t, "uncordon", "cord"); err != nil || out != "server/cord uncordoned\n" || get(t, "cord").Spec.Unclaimable {
		t.Fatalf("uncordon: %v %q", err, out)
	}
	if _, _, err = runCmd(t, "cordon"); err == nil || !IsUsage(err) {
		t.Errorf("cordon without a server: %v", err)
	}
}

func TestParkWritesTheOperation(t *testing.T) {
	server(t, "prk", "Available", nil)
	out, _, err := runCmd(t, "park", "prk")
	if err != nil || out != "server/prk park requested\n" {
		t.Fatalf("park: %v %q", err, out)
	}
	if op := get(t, "prk").Annotations[metalv1alpha1.OperationAnnotation]; op != metalv1alpha1.OperationPark {
		t.Fatalf("operation annotation %q", op)
	}
	// Asked again before the operator took it up: nothing new is written, and it says so.
	if out, _, err = runCmd(t, "park", "prk"); err != nil || out != "server/prk: nothing to do (parked, or park already requested)\n" {
		t.Fatalf("second park: %v %q", err, out)
	}
	// Unparking a server that is not parked changes nothing; one parked gets the operation.
	server(t, "prk2", "Parked", nil)
	if out, _, err = runCmd(t, "unpark", "prk2"); err != nil || out != "server/prk2 unpark requested\n" {
		t.Fatalf("unpark: %v %q", err, out)
	}
	if op := get(t, "prk2").Annotations[metalv1alpha1.OperationAnnotation]; op != metalv1alpha1.OperationUnpark {
		t.Fatalf("operation annotation %q", op)
	}
}

// rediscover, accept-inventory and clear-hardware-fault write their operation; asking again
// says so; another pending operation refuses them.
func TestOperationCommands(t *testing.T) {
	server(t, "ops", "Available", nil)
	for _, tc := range []struct{ cmd, op string }{
		{"rediscover", metalv1alpha1.OperationRediscover},
		{"accept-inventory", metalv1alpha1.OperationAcceptInventory},
		{"clear-hardware-fault", metalv1alpha1.OperationClearHardwareFault},
	} {
		s := get(t, "ops")
		delete(s.Annotations, metalv1alpha1.OperationAnnotation)
		if err := env.Client.Update(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		out, _, err := runCmd(t, tc.cmd, "ops")
		if err != nil || out != "server/ops "+tc.cmd+" requested\n" {
			t.Fatalf("%s: %v %q", tc.cmd, err, out)
		}
		if op := get(t, "ops").Annotations[metalv1alpha1.OperationAnnotation]; op != tc.op {
			t.Fatalf("%s: operation annotation %q", tc.cmd, op)
		}
		if out, _, err = runCmd(t, tc.cmd, "ops"); err != nil || out != "server/ops: "+tc.cmd+" already requested\n" {
			t.Fatalf("%s again: %v %q", tc.cmd, err, out)
		}
	}
	// clear-hardware-fault is pending: rediscover is refused.
	if _, _, err := runCmd(t, "rediscover", "ops"); err == nil || !strings.Contains(err.Error(), "clear-hardware-fault") {
		t.Fatalf("rediscover while another operation is pending: %v", err)
	}
}

// A power request writes the operation and its token in one write; a second one while the first
// is pending — asked for, or taken up by the operator and not reported — is refused, and so is
// one against an unknown verb.
func TestPowerRequestAndRefusal(t *testing.T) {
	server(t, "pwr", "Available", nil)
	out, errOut, err := runCmd(t, "power", "restart", "pwr", "--wait=false")
	if err != nil {
		t.Fatalf("power restart: %v %s", err, errOut)
	}
	s := get(t, "pwr")
	token := s.Annotations[intent.RequesterAnnotation]
	if s.Annotations[metalv1alpha1.OperationAnnotation] != metalv1alpha1.OperationGracefulRestartServer || !strings.HasPrefix(token, "cli-") || !strings.Contains(out, token) {
		t.Fatalf("annotations %v, output %q", s.Annotations, out)
	}
	_, errOut, err = runCmd(t, "power", "restart", "pwr")
	var code ExitCode
	if !errors.As(err, &code) || code != 1 || !strings.Contains(errOut, "refused") || !strings.Contains(errOut, "graceful-restart-server is still pending") {
		t.Fatalf("second request: %v %q", err, errOut)
	}
	// Taken up by the operator (the intent) and still pending: refused too.
	patch := client.MergeFrom(s.DeepCopy())
	delete(s.Annotations, metalv1alpha1.OperationAnnotation)
	s.Annotations[intent.Annotation] = "graceful-restart-server/issuing@1"
	if err := env.Client.Patch(context.Background(), s, patch); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err = runCmd(t, "power", "off", "pwr"); err == nil || !strings.Contains(errOut, "still pending") {
		t.Fatalf("request during the intent: %v %q", err, errOut)
	}
	if _, _, err = runCmd(t, "power", "sideways", "pwr"); err == nil || !IsUsage(err) {
		t.Fatalf("unknown verb: %v", err)
	}
}

// --wait returns with the outcome the operator reports under the request's token, however
// many other results the server carries; a refused outcome fails the command.
func TestPowerWaitsForItsOutcome(t *testing.T) {
	server(t, "pwait", "Available", nil)
	for _, tc := range []struct{ outcome, want string }{{intent.ResultDone, "power on: done"}, {intent.ResultRefused, "power on: refused"}} {
		// The operator's part: take up the request and report it under its token.
		go func() {
			for {
				s := &metalv1alpha1.Server{}
				if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "pwait"}, s); err != nil {
					return
				}
				if tok := s.Annotations[intent.RequesterAnnotation]; tok != "" {
					patch := client.MergeFrom(s.DeepCopy())
					delete(s.Annotations, metalv1alpha1.OperationAnnotation)
					delete(s.Annotations, intent.RequesterAnnotation)
					s.Annotations[intent.ResultAnnotation] = "other-1 done," + tok + " " + tc.outcome
					if env.Client.Patch(context.Background(), s, patch) == nil {
						return
					}
				}
			}
		}()
		out, _, err := runCmd(t, "power", "on", "pwait", "--timeout", "30s")
		if !strings.Contains(out, tc.want) || (tc.outcome == intent.ResultDone) != (err == nil) {
			t.Fatalf("outcome %s: %v\n%s", tc.outcome, err, out)
		}
	}
}

// Shell completion offers the servers the user may list, and the power verbs.
func TestCompletion(t *testing.T) {
	server(t, "comp-a", "Available", nil)
	server(t, "comp-b", "Available", nil)
	complete := func(words ...string) string {
		t.Helper()
		root := &cobra.Command{Use: "metalhub", SilenceErrors: true, SilenceUsage: true}
		root.AddCommand(FleetCommands()...)
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&bytes.Buffer{})
		// The last word is the one being completed; the kubeconfig goes before it.
		args := append([]string{"__complete", words[0], "--kubeconfig", env.Kubeconfig}, words[1:]...)
		root.SetArgs(args)
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	if out := complete("cordon", "comp-"); !strings.Contains(out, "comp-a\n") || !strings.Contains(out, "comp-b\n") {
		t.Fatalf("cordon completion:\n%s", out)
	}
	if out := complete("power", ""); !strings.Contains(out, "restart\n") || strings.Contains(out, "comp-a") {
		t.Fatalf("power verb completion:\n%s", out)
	}
	if out := complete("power", "off", "comp-b"); !strings.Contains(out, "comp-b\n") || strings.Contains(out, "comp-a") {
		t.Fatalf("power server completion:\n%s", out)
	}
}

// --watch prints the list, then a line for each change of the servers named, until stopped.
func TestServersWatch(t *testing.T) {
	server(t, "watch-a", "Available", nil)
	server(t, "watch-b", "Available", nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := &cobra.Command{Use: "metalhub", SilenceErrors: true, SilenceUsage: true}
	root.AddCommand(FleetCommands()...)
	out := &syncbuf.Buffer{}
	root.SetOut(out)
	root.SetErr(out)
	root.SetArgs([]string{"servers", "watch-a", "--watch", "--kubeconfig", env.Kubeconfig})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	lines := func() int { return strings.Count(out.String(), "watch-a") }
	testenv.Eventually(t, 20*time.Second, "the list", func() (bool, string) { return lines() == 1, out.String() })

	for _, name := range []string{"watch-b", "watch-a"} { // a change of another server prints nothing
		s := get(t, name)
		patch := client.MergeFrom(s.DeepCopy())
		s.Annotations[lifecycle.StateAnnotation] = string(metalv1alpha1.ServerStateReserved)
		if err := env.Client.Patch(context.Background(), s, patch); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 20*time.Second, "the change", func() (bool, string) {
		return lines() == 2 && strings.Contains(out.String(), "Reserved"), out.String()
	})
	if strings.Contains(out.String(), "watch-b") {
		t.Errorf("watching watch-a printed watch-b:\n%s", out.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("--watch ended with %v", err)
	}
}

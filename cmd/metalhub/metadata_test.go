package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/emulator/netboot"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/metadata"
	"github.com/metalhub/metalhub/internal/testenv"
)

// A claimed machine reads its own metadata and user data with the token its boot configuration
// hands it: two claimed servers boot (the emulated boot provider passes each the token of its
// claim's spec.metadataTokenSecretRef) and ask the operator's metadata service from the same
// source address; each gets its own claim's user data, none the other's. A token outlives
// nothing: once its claim is deleted, the machine that kept it is refused.
func TestClaimedMachinesReadTheirOwnUserData(t *testing.T) {
	purgeMetal(t)
	bin, err := testenv.MetalhubBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m := &managerProcess{bin: bin, logPath: filepath.Join(t.TempDir(), "manager.log"), args: []string{
		"--kubeconfig", env.Kubeconfig, "--controllers", "metal", "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--registry-bind-address", "127.0.0.1:0", "--power-poll", "100ms", "--discovery-namespace", "default",
	}}
	front := registryFront(t, m)
	m.args = append(m.args, "--registry-url", front)

	booted := make(chan netboot.Result, 16)
	nb, err := netboot.New(netboot.Options{Client: env.Client, Namespace: "default", ProbeInterval: 200 * time.Millisecond,
		MetadataURL: front, Logger: logr.Discard(), OnResult: func(r netboot.Result) {
			if r.OS {
				select {
				case booted <- r:
				default: // a boot past what the test reads must not hold up the emulator's Close
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	fleet, err := redfish.Start(redfish.Options{BMCs: 2, PowerDelay: 200 * time.Millisecond, OnBoot: nb.OnBoot})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	m.start(t)
	defer m.kill()

	names := registerFleet(t, fleet, "meta")
	waitServers(t, names, metalv1alpha1.ServerStateAvailable, 90*time.Second)

	claims := map[string]string{} // server -> claim
	for i, name := range names {
		claim := fmt.Sprintf("tenant-%d", i)
		claims[name] = claim
		ud := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: claim + "-user-data"},
			Type: "metal.ironcore.dev/user-data", StringData: map[string]string{metadata.UserDataKey: "ignition of " + claim}}
		if err := env.Client.Create(ctx, ud); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		c := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: claim}, Spec: metalv1alpha1.ServerClaimSpec{
			Power: metalv1alpha1.PowerOn, ServerRef: &corev1.LocalObjectReference{Name: name}, Image: "os-image:1",
			UserDataRef: &corev1.LocalObjectReference{Name: ud.Name}}}
		if err := env.Client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}

	got := map[string]netboot.Result{}
	timeout := time.After(90 * time.Second)
	for len(got) < len(names) {
		select {
		case r := <-booted:
			if r.Err != nil {
				t.Logf("%s booted and was not served: %v", r.Server, r.Err)
				continue
			}
			got[r.Server] = r
		case <-timeout:
			t.Fatalf("after 90 s, %d of %d claimed machines read their documents (%v)", len(got), len(names), got)
		}
	}
	for server, r := range got {
		claim := claims[server]
		if want := "ignition of " + claim; string(r.UserData) != want {
			t.Errorf("%s read user data %q, want %q", server, r.UserData, want)
		}
		var doc metadata.Document
		if err := json.Unmarshal(r.Metadata, &doc); err != nil {
			t.Fatalf("%s: metadata %q: %v", server, r.Metadata, err)
		}
		if doc.Server.Name != server || doc.Claim == nil || doc.Claim.Name != claim {
			t.Errorf("%s read metadata of server %q claim %+v, want its own (%s)", server, doc.Server.Name, doc.Claim, claim)
		}
	}

	// The machine of tenant-0 keeps its token; the claim goes.
	tok := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: metadata.TokenSecretName("tenant-0")}, tok); err != nil {
		t.Fatal(err)
	}
	c := &metalv1alpha1.ServerClaim{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "tenant-0"}, c); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, c); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code := userDataStatus(t, front, string(tok.Data[metadata.TokenKey]))
		if code == http.StatusForbidden {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deleted claim's token is still answered: %d", code)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func userDataStatus(t *testing.T, base, token string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/user-data", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(metadata.FlavorHeader, metadata.Flavor)
	req.Header.Set(metadata.TokenHeader, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitServers waits until every named Server reports state.
func waitServers(t *testing.T, names []string, state metalv1alpha1.ServerState, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		last := ""
		for _, name := range names {
			s := &metalv1alpha1.Server{}
			if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, s); err != nil {
				last = err.Error()
			} else if s.Status.State != state {
				last = fmt.Sprintf("%s is %q", name, s.Status.State)
			}
		}
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not all %s after %s: %s", state, within, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

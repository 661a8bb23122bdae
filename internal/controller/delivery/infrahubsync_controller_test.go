package delivery

import (
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
)

// Defect 1: status.checksums is kept, and a pass over unchanged artifacts downloads nothing and
// writes nothing; a changed artifact reaches the cluster within one sync interval, and only it
// is downloaded.
func TestDefect01_ChecksumsKeptNothingDownloadedWhenUnchanged(t *testing.T) {
	const interval = 2 * time.Second
	o := fastOptions()
	o.Settings.RequeueSyncAfter = interval
	h := startManager(t, o)
	e, url := startInfrahub(t, nil, "d01")
	if err := e.LoadSample(); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t)
	newSync(t, "d01", url, emu.SampleArtifactName, ns)

	s := waitSync(t, "d01", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
	arts, _ := e.Artifacts("main", time.Time{})
	if len(arts) != 2 {
		t.Fatalf("sample has %d artifacts", len(arts))
	}
	var want []string
	for _, a := range arts {
		want = append(want, a.ID+":"+a.Checksum)
	}
	slices.Sort(want)
	if !slices.Equal(s.Status.Checksums, want) {
		t.Fatalf("status.checksums = %v, want %v", s.Status.Checksums, want)
	}
	for _, a := range arts {
		waitResource(t, a.ID, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	}
	eventually(t, 10*time.Second, func() error { return exists(t, env.Client, &appsv1.Deployment{}, ns, "web-b") })
	eventually(t, 10*time.Second, func() error { return exists(t, env.Client, &corev1.Service{}, ns, "web-b") })

	// Unchanged passes: queries, nothing else.
	before := e.Counters()
	h.writes.reset()
	lastSync, syncGen := getSync(t, "d01").Status.LastSyncTime, getSync(t, "d01").Generation
	// Two periodic passes (a busy machine may take longer than two intervals to run them).
	eventually(t, 10*interval, func() error {
		if q := e.Counters().Queries - before.Queries; q < 2 {
			return fmt.Errorf("%d queries since the unchanged passes began, want 2 (one per interval)", q)
		}
		return nil
	})
	after := e.Counters()
	if d := after.Downloads - before.Downloads; d != 0 {
		t.Fatalf("%d downloads over unchanged artifacts", d)
	}
	// The one write of an unchanged pass is the sync's own report: lastSyncTime is the last
	// successful pass (#16), so that a "sync stale" alert does not fire on a healthy sync.
	if n := h.writes.n.Load() - int64(h.writes.count("PUT", "/infrahubsyncs/d01/status")); n != 0 {
		t.Fatalf("unchanged passes wrote: %s", h.writes)
	}
	if s := getSync(t, "d01"); !s.Status.LastSyncTime.After(lastSync.Time) || s.Generation != syncGen {
		t.Fatalf("lastSyncTime %s (was %s), generation %d (was %d): want a later time, the same spec", s.Status.LastSyncTime, lastSync, s.Generation, syncGen)
	}
	if after.Logins > 1 {
		t.Fatalf("%d logins: the client must be kept across passes", after.Logins)
	}

	// A change reaches the cluster within one sync interval, downloading only that artifact.
	webA := arts[0]
	if !strings.Contains(string(webA.Content), "web-a") {
		webA = arts[1]
	}
	before = e.Counters()
	changed := time.Now()
	updated, err := e.UpdateArtifact("main", webA.ID, []byte(configMapYAML("web-a", "", "v3")))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, interval+interval/10+3*time.Second, func() error {
		cm := &corev1.ConfigMap{}
		if err := exists(t, env.Client, cm, ns, "web-a"); err != nil {
			return err
		}
		if cm.Data["value"] != "v3" {
			return fmt.Errorf("web-a data %v", cm.Data)
		}
		return nil
	})
	t.Logf("artifact change reached the cluster after %s (sync interval %s)", time.Since(changed).Round(10*time.Millisecond), interval)
	if d := e.Counters().Downloads - before.Downloads; d != 1 {
		t.Fatalf("%d downloads for one changed artifact", d)
	}
	eventually(t, 5*time.Second, func() error {
		if s := getSync(t, "d01"); !slices.Contains(s.Status.Checksums, updated.ID+":"+updated.Checksum) {
			return fmt.Errorf("status.checksums %v lacks the new checksum %s", s.Status.Checksums, updated.Checksum)
		}
		return nil
	})
}

// Defect 2: a sync deletes only its own VidraResources, never those of another sync with the
// same destination.
func TestDefect02_SyncDeletesOnlyItsOwnResources(t *testing.T) {
	startManager(t, fastOptions())
	e, url := startInfrahub(t, nil, "d02-one", "d02-two")
	ns := namespace(t)
	a1, _ := e.AddArtifact("", "app-one", "", []byte(configMapYAML("one", "", "1")))
	a2, _ := e.AddArtifact("", "app-one", "", []byte(configMapYAML("one-b", "", "1")))
	b1, _ := e.AddArtifact("", "app-two", "", []byte(configMapYAML("two", "", "1")))
	newSync(t, "d02-one", url, "app-one", ns)
	newSync(t, "d02-two", url, "app-two", ns)
	waitSync(t, "d02-one", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
	waitSync(t, "d02-two", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
	for _, id := range []string{a1.ID, a2.ID, b1.ID} {
		waitResource(t, id, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	}

	// One artifact of sync one leaves its result; a forced pass of both syncs follows.
	if err := e.DeleteArtifact("", a2.ID); err != nil {
		t.Fatal(err)
	}
	requestSync(t, getSync(t, "d02-one"))
	requestSync(t, getSync(t, "d02-two"))
	eventually(t, 10*time.Second, func() error {
		if err := exists(t, env.Client, &infrahubv1alpha1.VidraResource{}, "", a2.ID); err == nil {
			return fmt.Errorf("VidraResource %s of the removed artifact still there", a2.ID)
		}
		return nil
	})
	// Its objects went with it (finalizer); the other sync's resource and objects stayed.
	eventually(t, 10*time.Second, func() error {
		if exists(t, env.Client, &corev1.ConfigMap{}, ns, "one-b") == nil {
			return fmt.Errorf("ConfigMap one-b of the removed artifact still there")
		}
		return nil
	})
	consistently(t, time.Second, func() error {
		for _, id := range []string{a1.ID, b1.ID} {
			if err := exists(t, env.Client, &infrahubv1alpha1.VidraResource{}, "", id); err != nil {
				return err
			}
		}
		return exists(t, env.Client, &corev1.ConfigMap{}, ns, "two")
	})
}

// Defect 3: an empty result (a misspelt artefactName) fails the sync with a reason and deletes
// nothing; with spec.source.allowEmpty it deletes the sync's VidraResources.
func TestDefect03_EmptyResultFailsAndDeletesNothing(t *testing.T) {
	startManager(t, fastOptions())
	e, url := startInfrahub(t, nil, "d03")
	ns := namespace(t)
	a, _ := e.AddArtifact("", "Webserver_Manifest", "", []byte(configMapYAML("web", "", "1")))
	newSync(t, "d03", url, "Webserver_Manifest", ns)
	waitSync(t, "d03", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
	waitResource(t, a.ID, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)

	// A patch of the one field: the controller writes the sync too (status), so a
	// read-modify-Update could fail with a conflict.
	patchObject(t, env.Client, getSync(t, "d03"), func(s *infrahubv1alpha1.InfrahubSync) {
		s.Spec.Source.ArtefactName = "Webserver_Manfest" // misspelt
	})
	s := waitSync(t, "d03", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonEmptyResult, 10*time.Second)
	if !strings.Contains(s.Status.LastError, "Webserver_Manfest") || !strings.Contains(s.Status.LastError, "allowEmpty") {
		t.Fatalf("lastError does not explain the empty result: %q", s.Status.LastError)
	}
	if len(s.Status.Checksums) != 1 {
		t.Fatalf("checksums dropped on an empty result: %v", s.Status.Checksums)
	}
	consistently(t, time.Second, func() error {
		if err := exists(t, env.Client, &infrahubv1alpha1.VidraResource{}, "", a.ID); err != nil {
			return err
		}
		return exists(t, env.Client, &corev1.ConfigMap{}, ns, "web")
	})

	// Opting in: the empty result is accepted and the resource removed.
	patchObject(t, env.Client, getSync(t, "d03"), func(s *infrahubv1alpha1.InfrahubSync) { s.Spec.Source.AllowEmpty = true })
	waitSync(t, "d03", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 10*time.Second)
	eventually(t, 10*time.Second, func() error {
		if exists(t, env.Client, &infrahubv1alpha1.VidraResource{}, "", a.ID) == nil {
			return fmt.Errorf("VidraResource kept although allowEmpty is set")
		}
		return nil
	})
}

// Defect 5: the sync watches its VidraResources; one deleted by hand is back within 5 s, with
// no sync interval elapsing (the interval is 10 minutes).
func TestDefect05_DeletedVidraResourceComesBackAtOnce(t *testing.T) {
	startManager(t, fastOptions())
	e, url := startInfrahub(t, nil, "d05")
	ns := namespace(t)
	a, _ := e.AddArtifact("", "web", "", []byte(configMapYAML("web", "", "1")))
	newSync(t, "d05", url, "web", ns)
	waitResource(t, a.ID, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	old := getResource(t, a.ID)

	deleted := time.Now()
	if err := env.Client.Delete(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() error {
		vr := &infrahubv1alpha1.VidraResource{}
		if err := exists(t, env.Client, vr, "", a.ID); err != nil {
			return err
		}
		if vr.UID == old.UID {
			return fmt.Errorf("still the old VidraResource")
		}
		return nil
	})
	t.Logf("VidraResource back after %s", time.Since(deleted).Round(10*time.Millisecond))
	waitResource(t, a.ID, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 5*time.Second)
	eventually(t, 5*time.Second, func() error { return exists(t, env.Client, &corev1.ConfigMap{}, ns, "web") })
}

// Defect 8: requests to Infrahub are bounded by a timeout, a custom CA is trusted, API tokens
// work, the client logs in once and refreshes an expired token instead of failing.
func TestDefect08_InfrahubClientTimeoutCATokensLogin(t *testing.T) {
	o := fastOptions()
	o.InfrahubTimeout = time.Second
	startManager(t, o)
	ns := namespace(t)

	t.Run("hanging Infrahub times out", func(t *testing.T) {
		e, url := startInfrahub(t, nil, "d08-hang")
		_, _ = e.AddArtifact("", "web", "", []byte(configMapYAML("hang", "", "1")))
		e.SetFault(emu.ClassQuery, emu.Fault{Kind: emu.FaultHang})
		newSync(t, "d08-hang", url, "web", ns)
		waitSync(t, "d08-hang", infrahubv1alpha1.StateFailed, "Timeout", 10*time.Second)
		e.ClearFaults()
		requestSync(t, getSync(t, "d08-hang"))
		waitSync(t, "d08-hang", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 10*time.Second)
	})
	t.Run("API token", func(t *testing.T) {
		e, url := startInfrahub(t, map[string]string{"api-token": "test-token\n"}, "d08-token")
		_, _ = e.AddArtifact("", "web", "", []byte(configMapYAML("token", "", "1")))
		newSync(t, "d08-token", url, "web", ns)
		waitSync(t, "d08-token", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 10*time.Second)
		if c := e.Counters(); c.Logins != 0 || c.Unauthorized != 0 {
			t.Fatalf("token auth logged in or was refused: %+v", c)
		}
	})
	t.Run("login once, refresh on expiry", func(t *testing.T) {
		e, url := startInfrahub(t, nil, "d08-login")
		_, _ = e.AddArtifact("", "web", "", []byte(configMapYAML("login", "", "1")))
		newSync(t, "d08-login", url, "web", ns)
		waitSync(t, "d08-login", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 10*time.Second)
		for range 3 {
			before := e.Counters().Queries
			requestSync(t, getSync(t, "d08-login"))
			eventually(t, 5*time.Second, func() error {
				if e.Counters().Queries == before {
					return fmt.Errorf("no pass")
				}
				return nil
			})
		}
		if c := e.Counters(); c.Logins != 1 {
			t.Fatalf("%d logins over several passes, want 1", c.Logins)
		}
		e.RevokeAccessTokens()
		before := e.Counters()
		requestSync(t, getSync(t, "d08-login"))
		eventually(t, 5*time.Second, func() error {
			if c := e.Counters(); c.Refreshes == before.Refreshes {
				return fmt.Errorf("no refresh after the access token was revoked: %+v", c)
			}
			return nil
		})
		consistently(t, 500*time.Millisecond, func() error {
			if s := getSync(t, "d08-login"); s.Status.SyncState != infrahubv1alpha1.StateSucceeded {
				return fmt.Errorf("sync failed on an expired token: %s", s.Status.LastError)
			}
			return nil
		})
	})
	t.Run("custom CA", func(t *testing.T) {
		e := emu.New(emu.Options{})
		_, _ = e.AddArtifact("", "web", "", []byte(configMapYAML("tls", "", "1")))
		trusted := httptest.NewTLSServer(e)
		t.Cleanup(trusted.Close)
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: trusted.Certificate().Raw})
		createAnnotatedSecret(t, "default", infrahubv1alpha1.InfrahubAPIURLLabel, labelFor(t, trusted.URL), credsFor(trusted.URL, "d08-ca"),
			map[string]string{"username": emu.DefaultUsername, "password": emu.DefaultPassword, "ca.crt": string(ca)})
		newSync(t, "d08-ca", trusted.URL, "web", ns)
		waitSync(t, "d08-ca", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 10*time.Second)

		untrusted := httptest.NewTLSServer(e)
		t.Cleanup(untrusted.Close)
		createAnnotatedSecret(t, "default", infrahubv1alpha1.InfrahubAPIURLLabel, labelFor(t, untrusted.URL), credsFor(untrusted.URL, "d08-noca"),
			map[string]string{"username": emu.DefaultUsername, "password": emu.DefaultPassword})
		newSync(t, "d08-noca", untrusted.URL, "web2", ns)
		waitSync(t, "d08-noca", infrahubv1alpha1.StateFailed, "TLSError", 10*time.Second)
	})
}

// Bad Infrahub input fails the sync with a reason from infrahub.Reason (or ours) and a message.
func TestBadInfrahubInputFailsWithReason(t *testing.T) {
	startManager(t, fastOptions())
	ns := namespace(t)
	cases := []struct {
		name    string
		secret  map[string]string
		prepare func(e *emu.Emulator)
		url     func(url string) string
		mutate  func(*infrahubv1alpha1.InfrahubSync)
		reason  string
		message string
	}{
		{name: "wrong password", secret: map[string]string{"username": "admin", "password": "wrong"}, reason: "AuthenticationFailed"},
		{name: "unknown user", secret: map[string]string{"username": "nobody", "password": "x"}, reason: "AuthenticationFailed"},
		{name: "no usable keys", secret: map[string]string{"user": "admin"}, reason: infrahubv1alpha1.ReasonCredentialsInvalid},
		{name: "no credentials Secret", url: func(string) string { return closedURL(t) }, reason: infrahubv1alpha1.ReasonCredentialsNotFound},
		{name: "unknown query", prepare: func(e *emu.Emulator) { e.RemoveQuery(emu.DefaultQuery) }, reason: "QueryNotFound", message: "ArtifactIDs"},
		{name: "graphql error", prepare: func(e *emu.Emulator) { e.FailQuery(emu.DefaultQuery, "field storage_id unknown") }, reason: "QueryFailed", message: "storage_id unknown"},
		{name: "day units", mutate: func(s *infrahubv1alpha1.InfrahubSync) { s.Spec.Source.TargetDate = "now-2d" }, reason: "InvalidTargetDate", message: "now-48h"},
		{name: "future", mutate: func(s *infrahubv1alpha1.InfrahubSync) { s.Spec.Source.TargetDate = "now+2h" }, reason: "InvalidTargetDate", message: "in the past"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("bad-input-%d", i)
			e, url := startInfrahub(t, tc.secret, name)
			_, _ = e.AddArtifact("", "web", "", []byte(configMapYAML(fmt.Sprintf("bad-%d", i), "", "1")))
			if tc.prepare != nil {
				tc.prepare(e)
			}
			if tc.url != nil {
				url = tc.url(url)
			}
			muts := []func(*infrahubv1alpha1.InfrahubSync){}
			if tc.mutate != nil {
				muts = append(muts, tc.mutate)
			}
			newSync(t, name, url, "web", ns, muts...)
			s := waitSync(t, name, infrahubv1alpha1.StateFailed, tc.reason, 15*time.Second)
			if !strings.Contains(s.Status.LastError, tc.message) {
				t.Fatalf("lastError %q does not mention %q", s.Status.LastError, tc.message)
			}
			if len(s.Status.LastError) == 0 {
				t.Fatal("no lastError")
			}
		})
	}
	t.Run("unreachable with credentials", func(t *testing.T) {
		url := closedURL(t)
		createAnnotatedSecret(t, "default", infrahubv1alpha1.InfrahubAPIURLLabel, labelFor(t, url), credsFor(url, "bad-input-down"), map[string]string{"username": "admin", "password": "infrahub"})
		newSync(t, "bad-input-down", url, "web", ns)
		waitSync(t, "bad-input-down", infrahubv1alpha1.StateFailed, "Unavailable", 15*time.Second)
	})
}

// closedURL is the URL of a loopback port nothing listens on.
func closedURL(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	_ = ln.Close()
	return url
}

// Bad artifacts fail their own VidraResource with a reason; the others still apply.
func TestBadArtifactsFailTheirResourceOthersApply(t *testing.T) {
	startManager(t, fastOptions())
	e, url := startInfrahub(t, nil, "bad-artifacts")
	ns := namespace(t)
	good, _ := e.AddArtifact("", "mixed", "", []byte(configMapYAML("good", "", "1")))
	malformed, _ := e.AddArtifact("", "mixed", "", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [broken\n"))
	unknown, _ := e.AddArtifact("", "mixed", "", []byte(docs(configMapYAML("beside-widget", "", "1"),
		"apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n")))
	newSync(t, "bad-artifacts", url, "mixed", ns)
	// #16 scenario 8: the sync delivered every artifact, but reads Failed while some of its
	// VidraResources are, and names them.
	waitSync(t, "bad-artifacts", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonResourcesFailed, 30*time.Second)
	eventually(t, 10*time.Second, func() error {
		if got := getSync(t, "bad-artifacts").Status.Resources; got.Total != 3 || got.Succeeded != 1 || !slices.Equal(got.Failed, sorted(malformed.ID, unknown.ID)) {
			return fmt.Errorf("resources summary %+v, want 3 total, 1 succeeded, failed %s and %s", got, malformed.ID, unknown.ID)
		}
		return nil
	})
	waitResource(t, good.ID, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 10*time.Second)
	vr := waitResource(t, malformed.ID, infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonInvalidManifest, 10*time.Second)
	if !strings.Contains(vr.Status.LastError, "document 1") {
		t.Fatalf("malformed manifest error does not say where: %q", vr.Status.LastError)
	}
	vr = waitResource(t, unknown.ID, infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonUnknownKind, 10*time.Second)
	if !strings.Contains(vr.Status.LastError, "Widget") {
		t.Fatalf("unknown kind error does not name the kind: %q", vr.Status.LastError)
	}
	if err := exists(t, env.Client, &corev1.ConfigMap{}, ns, "good"); err != nil {
		t.Fatal(err)
	}
	// A manifest with an unknown kind is refused whole: its ConfigMap was not applied.
	if exists(t, env.Client, &corev1.ConfigMap{}, ns, "beside-widget") == nil {
		t.Fatal("part of a refused manifest was applied")
	}
}

// Defect 10: settings come from the ConfigMap labelled app=vidra and are picked up on change;
// unknown keys and malformed values are reported as Warning events, never a crash.
func TestDefect10_SettingsConfigMapPickedUpAndChecked(t *testing.T) {
	ns := namespace(t)
	o := fastOptions() // sync interval 10 minutes: only the change can bring passes
	o.SettingsNamespace = ns
	startManager(t, o)
	e, url := startInfrahub(t, nil, "d10")
	_, _ = e.AddArtifact("", "web", "", []byte(configMapYAML("cfg", "", "1")))
	newSync(t, "d10", url, "web", ns)
	waitSync(t, "d10", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)

	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "vidra-config", Namespace: ns, Labels: map[string]string{"app": "vidra"}},
		Data: map[string]string{
			"queryName":        "NoSuchQuery",
			"requeueSyncAfter": "banana",
			"colour":           "blue",
		},
	}
	if err := env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cm) })
	waitSync(t, "d10", infrahubv1alpha1.StateFailed, "QueryNotFound", 10*time.Second)
	eventually(t, 10*time.Second, func() error {
		var list eventsv1.EventList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		var notes []string
		for _, ev := range list.Items {
			if ev.Regarding.Name == "vidra-config" && ev.Type == "Warning" {
				notes = append(notes, ev.Note)
			}
		}
		all := strings.Join(notes, "\n")
		if !strings.Contains(all, `unknown key "colour"`) || !strings.Contains(all, "requeueSyncAfter") {
			return fmt.Errorf("warnings so far: %q", notes)
		}
		return nil
	})

	cm.Data["queryName"] = "ArtifactIDs"
	if err := env.Client.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	waitSync(t, "d10", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 10*time.Second)
}

package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/dashboard/browsertest"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/telemetry/latest"
	"github.com/metalhub/metalhub/internal/testenv"
)

// samplesDir is the metal-operator compatibility samples' directory (METALHUB_COMPAT_SAMPLES
// overrides it); without it the test is skipped, except under CI=true.
func samplesDir(t *testing.T) string {
	dir := os.Getenv("METALHUB_COMPAT_SAMPLES")
	if dir == "" {
		dir = filepath.Join(testenv.RepoRoot(), "..", "shared", "compat", "samples")
	}
	if _, err := os.Stat(dir); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("compat samples: %v (CI=true)", err)
		}
		t.Skipf("compat samples: %v", err)
	}
	return dir
}

func loadServers(t *testing.T, path string) []*metalv1alpha1.Server {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*metalv1alpha1.Server
	for {
		s := &metalv1alpha1.Server{}
		if err := dec.Decode(s); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if s.Kind == "Server" {
			out = append(out, s)
		}
	}
	return out
}

// The visualizer's 24 sample servers show in the racks their labels name, stacked by shelf, and
// a claim's binding recolours its tile within 2 s, without a reload.
func TestBrowserRacksAndLiveUpdate(t *testing.T) {
	path := filepath.Join(samplesDir(t), "metal-operator", "visualizer", "servers.yaml")
	samples := loadServers(t, path)
	if len(samples) != 24 {
		t.Fatalf("%s: %d servers, want 24", path, len(samples))
	}
	bctx := browsertest.New(t) // before creating anything: skips without a browser
	for _, s := range samples {
		status := s.Status
		create(t, s)
		s.Status = status
		if err := env.Client.Status().Update(ctx(), s); err != nil {
			t.Fatalf("status of %s: %v", s.Name, err)
		}
	}
	t.Cleanup(func() {
		for _, s := range samples {
			_ = env.Client.Delete(ctx(), s)
		}
	})
	srv := start(t, Options{})

	run := func(timeout time.Duration, a chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(bctx, timeout)
		defer cancel()
		if _, err := chromedp.Run(c, a); err != nil {
			t.Fatal(err)
		}
	}
	run(15*time.Second, chromedp.Navigate(srv.URL()))
	run(15*time.Second, chromedp.Poll[chromedp.Void](
		`document.querySelector('#conn').dataset.status === 'live' && document.querySelectorAll('[data-server^="demo-"]').length === 24`,
		chromedp.WithPollingInterval(50*time.Millisecond)))

	// Where each tile is: its rack, its state and its top edge.
	type tile struct {
		Rack  string  `json:"rack"`
		State string  `json:"state"`
		Top   float64 `json:"top"`
	}
	c, cancel := context.WithTimeout(bctx, 10*time.Second)
	tiles, err := chromedp.Run(c, chromedp.Evaluate[map[string]tile](`Object.fromEntries([...document.querySelectorAll('[data-server]')].map(e => {
		const r = e.closest('[data-rack]');
		return [e.dataset.server, {rack: r ? r.dataset.rack : '', state: e.dataset.state, top: e.getBoundingClientRect().top}];
	}))`))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	byRack := map[string][]*metalv1alpha1.Server{}
	for _, s := range samples {
		want := s.Labels[LabelLocation] + "/" + s.Labels[LabelRack]
		got, ok := tiles[s.Name]
		switch {
		case !ok:
			t.Errorf("%s: no tile", s.Name)
		case got.Rack != want:
			t.Errorf("%s: in rack %q, want %q", s.Name, got.Rack, want)
		case got.State != string(s.Status.State):
			t.Errorf("%s: data-state %q, want %q", s.Name, got.State, s.Status.State)
		}
		byRack[want] = append(byRack[want], s)
	}
	// Within a rack a higher shelf is drawn higher up the page.
	for rack, ss := range byRack {
		for _, a := range ss {
			for _, b := range ss {
				sa, _ := strconv.Atoi(a.Labels[LabelShelf])
				sb, _ := strconv.Atoi(b.Labels[LabelShelf])
				if sa > sb && tiles[a.Name].Top >= tiles[b.Name].Top {
					t.Errorf("rack %s: %s (shelf %d) is not above %s (shelf %d)", rack, a.Name, sa, b.Name, sb)
				}
			}
		}
	}

	// Bind a claim as the operator does: the lifecycle record, the claim reference, the status.
	const name = "demo-r1-rk1-srv1"
	run(5*time.Second, chromedp.Evaluate[chromedp.Void](`window.__noReload = true`))
	began := time.Now()
	s := &metalv1alpha1.Server{}
	if err := env.Client.Get(ctx(), client.ObjectKey{Name: name}, s); err != nil {
		t.Fatal(err)
	}
	before := s.DeepCopy()
	lifecycle.SetAnnotation(s, lifecycle.StateAnnotation, string(metalv1alpha1.ServerStateReserved))
	s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "default", Name: "demo-claim"}
	if err := env.Client.Patch(ctx(), s, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	before = s.DeepCopy()
	s.Status.State = metalv1alpha1.ServerStateReserved
	s.Status.Conditions = []metav1.Condition{{Type: "Claimed", Status: metav1.ConditionTrue, Reason: "Bound", LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Patch(ctx(), s, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	run(2*time.Second, chromedp.Poll[chromedp.Void](
		fmt.Sprintf(`window.__noReload === true && document.querySelector('[data-server=%q]').dataset.state === 'Reserved'`, name),
		chromedp.WithPollingInterval(10*time.Millisecond)))
	t.Logf("%s shown Reserved %s after the first write, without a reload", name, time.Since(began).Round(time.Millisecond))

	// The details panel, then a screenshot of the whole page with it open.
	run(5*time.Second, chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-server=%q]`, name))))
	run(5*time.Second, chromedp.Poll[chromedp.Void](
		`!document.querySelector('#panel').hidden && document.querySelector('#panel-body').textContent.includes('default/demo-claim') && document.querySelector('#panel-body').textContent.includes('Claimed')`,
		chromedp.WithPollingInterval(20*time.Millisecond)))
	c, cancel = context.WithTimeout(bctx, 20*time.Second)
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(testenv.RepoRoot(), "bin", "test-output", "dashboard.png")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot is not a PNG (%d bytes)", len(png))
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", out)
}

// With --token-file the page asks for the token before the first action, sends it as a bearer
// token and keeps it for the tab; a refused token is forgotten and asked for again.
func TestBrowserActionAsksForToken(t *testing.T) {
	bctx := browsertest.New(t) // before creating anything: skips without a browser
	const tok = "browser-0123456789-abcdef"
	create(t, newServer("bt-s1", nil))
	t.Cleanup(func() { _ = env.Client.Delete(ctx(), newServer("bt-s1", nil)) })
	srv := start(t, Options{AllowActions: true, TokenFile: tokenFile(t, tok)})
	run := func(timeout time.Duration, a chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(bctx, timeout)
		defer cancel()
		if _, err := chromedp.Run(c, a); err != nil {
			t.Fatal(err)
		}
	}
	poll := func(expr string) {
		t.Helper()
		run(10*time.Second, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(20*time.Millisecond)))
	}
	run(15*time.Second, chromedp.Navigate(srv.URL()))
	poll(`document.querySelector('#conn').dataset.status === 'live' && !!document.querySelector('[data-server="bt-s1"]')`)
	// The first answer is wrong, every later one right.
	run(5*time.Second, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`window.__prompts = 0; window.prompt = () => ++window.__prompts === 1 ? "wrong-0123456789-abcdef" : %q`, tok)))
	run(5*time.Second, chromedp.Click(chromedp.CSS(`[data-server="bt-s1"]`)))
	poll(`!!document.querySelector('#panel-body button[data-action="cordon"]')`)
	run(5*time.Second, chromedp.Click(chromedp.CSS(`#panel-body button[data-action="cordon"]`)))
	poll(`document.querySelector('#panel-body .result.error')?.textContent.includes('not accepted')`)
	if unclaimable(t, "bt-s1") {
		t.Fatal("cordoned with the wrong token")
	}
	run(5*time.Second, chromedp.Click(chromedp.CSS(`#panel-body button[data-action="cordon"]`)))
	poll(`document.querySelector('#panel-body .result')?.textContent.includes('cordoned')`)
	testenv.Eventually(t, 5*time.Second, "bt-s1 cordoned", func() (bool, string) { return unclaimable(t, "bt-s1"), "" })
	poll(`!!document.querySelector('#panel-body button[data-action="uncordon"]')`)
	run(5*time.Second, chromedp.Click(chromedp.CSS(`#panel-body button[data-action="uncordon"]`)))
	poll(`document.querySelector('#panel-body .result')?.textContent.includes('uncordoned')`)
	c, cancel := context.WithTimeout(bctx, 5*time.Second)
	prompts, err := chromedp.Run(c, chromedp.Evaluate[int](`window.__prompts`))
	cancel()
	if err != nil || prompts != 2 {
		t.Errorf("asked for the token %d times (%v), want 2: once, and again after the refusal", prompts, err)
	}
	if unclaimable(t, "bt-s1") {
		t.Error("still cordoned after Uncordon")
	}
}

// A tile shows its server's power draw and hottest temperature, and a badge naming the failed
// power supply, from the telemetry the dashboard is given.
func TestBrowserTileTelemetry(t *testing.T) {
	bctx := browsertest.New(t) // before creating anything: skips without a browser
	create(t, newServer("btm-s1", nil), newServer("btm-s2", nil))
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx(), newServer("btm-s1", nil))
		_ = env.Client.Delete(ctx(), newServer("btm-s2", nil))
	})
	tel := &fakeTelemetry{}
	tel.set("btm-s1", latest.Reading{At: time.Now(), PowerWatts: watts(312.4), HottestCelsius: watts(61.6), HottestSensor: "CPU1 Temp",
		FailedPSUs: []string{"PSU2"}})
	srv := start(t, Options{Telemetry: tel, TelemetryRefresh: 50 * time.Millisecond})
	run := func(timeout time.Duration, a chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(bctx, timeout)
		defer cancel()
		if _, err := chromedp.Run(c, a); err != nil {
			t.Fatal(err)
		}
	}
	run(15*time.Second, chromedp.Navigate(srv.URL()))
	run(15*time.Second, chromedp.Poll[chromedp.Void](
		`document.querySelector('#conn').dataset.status === 'live' && !!document.querySelector('[data-server="btm-s2"]') &&
		 document.querySelector('[data-server="btm-s1"] .tel')?.textContent === '312W 62°'`,
		chromedp.WithPollingInterval(50*time.Millisecond)))
	type tile struct {
		Tel, Badge, Title string
		BadgeShown        bool
	}
	c, cancel := context.WithTimeout(bctx, 10*time.Second)
	tiles, err := chromedp.Run(c, chromedp.Evaluate[map[string]tile](`Object.fromEntries(['btm-s1', 'btm-s2'].map(n => {
		const e = document.querySelector('[data-server="' + n + '"]'), b = e.querySelector('.i.hw');
		return [n, {Tel: e.querySelector('.tel').textContent, Badge: b.title, BadgeShown: getComputedStyle(b).display !== 'none', Title: e.title}];
	}))`))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if got := tiles["btm-s1"]; !got.BadgeShown || got.Badge != "failed: PSU PSU2" || !strings.Contains(got.Title, "hottest CPU1 Temp 62 °C") {
		t.Errorf("btm-s1's tile: %+v", got)
	}
	if got := tiles["btm-s2"]; got.Tel != "" || got.BadgeShown {
		t.Errorf("btm-s2 (no reading) shows %+v", got)
	}

	// Repaired: the badge goes with the next reading.
	tel.set("btm-s1", latest.Reading{At: time.Now(), PowerWatts: watts(290), HottestCelsius: watts(55)})
	run(5*time.Second, chromedp.Poll[chromedp.Void](
		`document.querySelector('[data-server="btm-s1"] .tel').textContent === '290W 55°' &&
		 getComputedStyle(document.querySelector('[data-server="btm-s1"] .i.hw')).display === 'none'`,
		chromedp.WithPollingInterval(20*time.Millisecond)))
}

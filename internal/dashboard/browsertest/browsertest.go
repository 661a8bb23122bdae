// Package browsertest starts a headless Chromium for tests that drive a page: the dashboard's
// own tests and any end-to-end test that opens it.
//
// Only test files import it, and it imports no metalhub package: it knows nothing of what the page
// shows.
package browsertest

import (
	"context"
	"os"
	"testing"

	"github.com/chromedp/chromedp"
)

// ExecPath is where the Chromium package installs the browser.
const ExecPath = "/usr/bin/chromium"

// Available reports whether the browser is installed.
func Available() bool {
	_, err := os.Stat(ExecPath)
	return err == nil
}

// New starts a headless Chromium with a fresh profile and returns a chromedp context on a
// blank tab; the browser stops when the test ends. Without a browser the test is skipped,
// except under CI=true, where it fails: CI must not pass by skipping.
//
// The browser is already started, so callers may derive contexts with timeouts from the
// returned one for single actions without stopping the browser. Page console messages and
// uncaught exceptions go to t.Logf.
func New(t testing.TB) context.Context {
	t.Helper()
	if !Available() {
		if os.Getenv("CI") == "true" {
			t.Fatalf("browsertest: no browser at %s (CI=true: install the chromium package)", ExecPath)
		}
		t.Skipf("browsertest: no browser at %s", ExecPath)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(ExecPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc() // waits for the browser to exit, before TempDir's removal
	})
	if _, err := chromedp.Run(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("browsertest: starting %s: %v", ExecPath, err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			t.Logf("browser console: %s", m)
		}
	}()
	return ctx
}

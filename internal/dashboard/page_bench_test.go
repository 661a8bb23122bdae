package dashboard

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/dashboard/browsertest"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// onAll runs f for 0..n-1 with a few workers, as a busy operator's writes arrive.
func onAll(b *testing.B, n int, f func(i int) error) {
	b.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				if err := f(i); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

// The page with a thousand servers in 10 locations × 10 racks, in a real Chromium: how long the
// first render of every tile takes, and how long after the last of a thousand state changes
// (written as fast as the API server takes them) every tile shows its new state, with how busy
// the page's main thread was meanwhile (the longest task, from the Long Tasks API).
func BenchmarkPageThousandServers(b *testing.B) {
	const n = 1000
	servers := make([]*metalv1alpha1.Server, n)
	for i := range servers {
		servers[i] = newServer(fmt.Sprintf("bench-%04d", i), map[string]string{
			LabelLocation: fmt.Sprintf("DC%d", i/100), LabelRack: fmt.Sprintf("%d-%d", i/100%10+1, i/10%10+1),
			LabelShelf: fmt.Sprint(i%10*4 + 1), LabelHeight: "2"})
		lifecycle.SetAnnotation(servers[i], lifecycle.StateAnnotation, string(metalv1alpha1.ServerStateAvailable))
	}
	onAll(b, n, func(i int) error { return env.Client.Create(ctx(), servers[i]) })
	b.Cleanup(func() {
		onAll(b, n, func(i int) error { return client.IgnoreNotFound(env.Client.Delete(ctx(), servers[i])) })
	})
	srv := start(b, Options{})
	bctx := browsertest.New(b)
	run := func(timeout time.Duration, a chromedp.Action[chromedp.Void]) {
		b.Helper()
		c, cancel := context.WithTimeout(bctx, timeout)
		defer cancel()
		if _, err := chromedp.Run(c, a); err != nil {
			b.Fatal(err)
		}
	}
	state := metalv1alpha1.ServerStateAvailable
	b.ResetTimer()
	for range b.N {
		began := time.Now()
		run(60*time.Second, chromedp.Navigate(srv.URL()))
		run(60*time.Second, chromedp.Poll[chromedp.Void](
			fmt.Sprintf(`document.querySelectorAll('[data-server^="bench-"][data-state=%q]').length === %d`, state, n),
			chromedp.WithPollingInterval(20*time.Millisecond)))
		b.ReportMetric(float64(time.Since(began).Milliseconds()), "ms/first-render")

		// Long tasks are those over 50 ms; none observed reads 0, an unsupported API -1.
		run(10*time.Second, chromedp.Evaluate[chromedp.Void](`window.__noReload = true;
			window.__longest = PerformanceObserver.supportedEntryTypes.includes('longtask') ? 0 : -1;
			if (window.__longest === 0) new PerformanceObserver(l => { for (const e of l.getEntries()) window.__longest = Math.max(window.__longest, e.duration); })
				.observe({type: 'longtask'});`))
		next := metalv1alpha1.ServerStateReserved
		if state == next {
			next = metalv1alpha1.ServerStateAvailable
		}
		onAll(b, n, func(i int) error {
			s := &metalv1alpha1.Server{}
			if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(servers[i]), s); err != nil {
				return err
			}
			patch := client.MergeFrom(s.DeepCopy())
			lifecycle.SetAnnotation(s, lifecycle.StateAnnotation, string(next))
			return env.Client.Patch(ctx(), s, patch)
		})
		written := time.Now()
		run(60*time.Second, chromedp.Poll[chromedp.Void](
			fmt.Sprintf(`window.__noReload === true && document.querySelectorAll('[data-server^="bench-"][data-state=%q]').length === %d`, next, n),
			chromedp.WithPollingInterval(10*time.Millisecond)))
		b.ReportMetric(float64(time.Since(written).Milliseconds()), "ms/all-changes-shown")
		c, cancel := context.WithTimeout(bctx, 10*time.Second)
		longest, err := chromedp.Run(c, chromedp.Evaluate[float64](`window.__longest`))
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(longest, "ms/longest-task")
		state = next
	}
}

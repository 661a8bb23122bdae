package testenv

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
)

// WriteCounter wraps a manager's client (install it with NewClient) and counts its writes:
// per reconcile pass and object, where a second write of one object in one pass is a breach
// of the lifecycle discipline (Violations); per controller, when Controller names them; and
// the time they took.
type WriteCounter struct {
	client.Client
	// Controller names the controller a write is made for; nil counts every write under "".
	Controller func(context.Context) string
	// Written, if set, sees every write that succeeded, as it returned (obj is the server's
	// answer): a benchmark compares it with when its informers see the write.
	Written func(obj client.Object, what string)
	// New, if set, makes the client the counter wraps (client.New otherwise): the manager's
	// production client, say, with its write bound.
	New func(*rest.Config, client.Options) (client.Client, error)

	mu           sync.Mutex
	perPass      map[string]map[types.UID]int
	byController map[string]int
	violations   []string
	nanos        atomic.Int64
}

// NewClient is a manager's Options.NewClient that installs the counter.
func (w *WriteCounter) NewClient(cfg *rest.Config, o client.Options) (client.Client, error) {
	newClient := w.New
	if newClient == nil {
		newClient = client.New
	}
	c, err := newClient(cfg, o)
	if err != nil {
		return nil, err
	}
	w.Client = c
	return w, nil
}

// count records one write of obj; uid is the object's before the call (none for a create).
func (w *WriteCounter) count(ctx context.Context, obj client.Object, uid types.UID, what string, began time.Time, err *error) {
	w.nanos.Add(int64(time.Since(began)))
	if w.Written != nil && *err == nil {
		w.Written(obj, what)
	}
	name := ""
	if w.Controller != nil {
		name = w.Controller(ctx)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byController == nil {
		w.byController, w.perPass = map[string]int{}, map[string]map[types.UID]int{}
	}
	w.byController[name]++
	id := string(controller.ReconcileIDFromContext(ctx))
	if id == "" || uid == "" {
		return
	}
	m := w.perPass[id]
	if m == nil {
		m = map[types.UID]int{}
		w.perPass[id] = m
	}
	m[uid]++
	if m[uid] > 1 {
		w.violations = append(w.violations, fmt.Sprintf("%T %s: %s was write %d of pass %s", obj, obj.GetName(), what, m[uid], id))
	}
}

// Violations lists the passes that wrote one object more than once.
func (w *WriteCounter) Violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.violations...)
}

// Reset returns the writes per controller and the time spent in writes since the last Reset,
// and starts counting anew.
func (w *WriteCounter) Reset() (map[string]int, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.byController
	w.byController, w.perPass = map[string]int{}, map[string]map[types.UID]int{}
	return out, time.Duration(w.nanos.Swap(0))
}

// Create counts a create: an object without a UID yet, never a second write of a pass.
func (w *WriteCounter) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) (err error) {
	defer w.count(ctx, obj, "", "create", time.Now(), &err)
	return w.Client.Create(ctx, obj, opts...)
}

func (w *WriteCounter) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) (err error) {
	defer w.count(ctx, obj, obj.GetUID(), "update", time.Now(), &err)
	return w.Client.Update(ctx, obj, opts...)
}

func (w *WriteCounter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) (err error) {
	defer w.count(ctx, obj, obj.GetUID(), "patch", time.Now(), &err)
	return w.Client.Patch(ctx, obj, patch, opts...)
}

func (w *WriteCounter) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) (err error) {
	defer w.count(ctx, obj, obj.GetUID(), "delete", time.Now(), &err)
	return w.Client.Delete(ctx, obj, opts...)
}

func (w *WriteCounter) Status() client.SubResourceWriter {
	return &statusCounter{SubResourceWriter: w.Client.Status(), w: w}
}

type statusCounter struct {
	client.SubResourceWriter
	w *WriteCounter
}

func (s *statusCounter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) (err error) {
	defer s.w.count(ctx, obj, obj.GetUID(), "status update", time.Now(), &err)
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

func (s *statusCounter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) (err error) {
	defer s.w.count(ctx, obj, obj.GetUID(), "status patch", time.Now(), &err)
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// Scrape reads and parses a Prometheus text endpoint.
func Scrape(hc *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return nil, fmt.Errorf("reading metrics: %w", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics of %s: %w", url, err)
	}
	return families, nil
}

// apiMetrics reads the API server's own metrics.
func (e *Env) apiMetrics() (map[string]*dto.MetricFamily, error) {
	hc, err := rest.HTTPClientFor(e.Config)
	if err != nil {
		return nil, err
	}
	return Scrape(hc, strings.TrimSuffix(e.Config.Host, "/")+"/metrics")
}

// ClosedWatches is how many watches the API server has closed as unresponsive: a watch it
// cannot feed fast enough is closed, and the informer behind it sees every change late.
func (e *Env) ClosedWatches() (float64, error) {
	families, err := e.apiMetrics()
	if err != nil {
		return 0, err
	}
	sum := 0.0
	if fam := families["apiserver_terminated_watchers_total"]; fam != nil {
		for _, m := range fam.Metric {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum, nil
}

// APIWrites reads the API server's own request counter: writes (every client's) by "VERB
// resource[/subresource]", e.g. "PATCH servers" or "PUT servers/status".
func (e *Env) APIWrites() (map[string]float64, error) {
	return e.apiRequests("POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE", "DELETECOLLECTION")
}

// APIReads is APIWrites for the reads that reach the API server (GET and LIST, every client's;
// a LIST from the watch cache counts too): what a run costs it besides its writes.
func (e *Env) APIReads() (map[string]float64, error) {
	return e.apiRequests("GET", "LIST")
}

func (e *Env) apiRequests(verbs ...string) (map[string]float64, error) {
	families, err := e.apiMetrics()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	if fam := families["apiserver_request_total"]; fam != nil {
		for _, m := range fam.Metric {
			l := map[string]string{}
			for _, p := range m.Label {
				l[p.GetName()] = p.GetValue()
			}
			if !slices.Contains(verbs, l["verb"]) {
				continue
			}
			key := l["verb"] + " " + l["resource"]
			if l["subresource"] != "" {
				key += "/" + l["subresource"]
			}
			out[key] += m.GetCounter().GetValue()
		}
	}
	return out, nil
}

// WritesPer sums the writes between two APIWrites readings matching keep (nil: all) and divides
// by n; breakdown lists them largest first, e.g. "POST events 7.0, PATCH servers 3.0".
func WritesPer(before, after map[string]float64, n int, keep func(key string) bool) (total float64, breakdown string) {
	type row struct {
		key string
		v   float64
	}
	var rows []row
	for k, v := range after {
		d := (v - before[k]) / float64(n)
		if d <= 0 || (keep != nil && !keep(k)) {
			continue
		}
		total += d
		rows = append(rows, row{k, d})
	}
	sort.Slice(rows, func(i, j int) bool {
		return rows[i].v > rows[j].v || rows[i].v == rows[j].v && rows[i].key < rows[j].key
	})
	parts := make([]string, 0, len(rows))
	for _, r := range rows {
		parts = append(parts, fmt.Sprintf("%s %.2f", r.key, r.v))
	}
	return total, strings.Join(parts, ", ")
}

// Parallel runs f(0..n-1) on workers goroutines and returns the first error.
func Parallel(n, workers int, f func(i int) error) error {
	var next atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, err)
				}
			}
		})
	}
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return err
	}
	return nil
}

// ProfileAPIServer writes the API server's CPU profile over the next d into path, in the
// background; a failure is logged on tb.
func (e *Env) ProfileAPIServer(tb testing.TB, d time.Duration, path string) {
	go func() {
		hc, err := rest.HTTPClientFor(e.Config)
		if err == nil {
			var resp *http.Response
			url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(e.Config.Host, "/"), int(d.Seconds()))
			if resp, err = hc.Get(url); err == nil {
				defer resp.Body.Close()
				var raw []byte
				if raw, err = io.ReadAll(resp.Body); err == nil {
					err = os.WriteFile(path, raw, 0o644)
				}
			}
		}
		if err != nil {
			tb.Logf("apiserver profile: %v", err)
		}
	}()
}

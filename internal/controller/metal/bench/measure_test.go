package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv"
)

func apiWrites(b *testing.B, env *testenv.Env) map[string]float64 {
	b.Helper()
	w, err := env.APIWrites()
	if err != nil {
		b.Fatal(err)
	}
	return w
}

// timeline records, from the manager's informers, when each claim reached each step of its
// binding, to show where the time goes.
type timeline struct {
	mu    sync.Mutex
	steps map[string]map[string]time.Time // step -> claim -> first seen
	mark  func(step, claim string)
}

// written marks the steps whose writes returned.
func (tl *timeline) written(ns string) func(client.Object, string) {
	return func(o client.Object, _ string) {
		switch o := o.(type) {
		case *metalv1alpha1.Server:
			if ref := o.Spec.ServerClaimRef; ref != nil && ref.Namespace == ns {
				tl.mark("server patched", ref.Name)
			}
		case *metalv1alpha1.ServerClaim:
			if o.Namespace == ns && o.Spec.ServerRef != nil {
				tl.mark("claim patched", o.Name)
			}
		}
	}
}

// Steps as written (the write returned) and as the informers see them: the difference is the
// watch's delay, which every step waits for.
// After Bound, the steps on the way to On: whichever comes late is what holds the power-ons.
var steps = []string{"claim seen", "server patched", "server points at claim", "claim patched", "claim names server", "claim Bound",
	"boot configuration Ready", "server Reserved", "power-on issued", "server On"}

func newTimeline(b *testing.B, ctx context.Context, c crcache.Cache, ns string) *timeline {
	b.Helper()
	tl := &timeline{steps: map[string]map[string]time.Time{}}
	for _, s := range steps {
		tl.steps[s] = map[string]time.Time{}
	}
	tl.mark = func(step, claim string) {
		tl.mu.Lock()
		defer tl.mu.Unlock()
		if _, ok := tl.steps[step][claim]; !ok {
			tl.steps[step][claim] = time.Now()
		}
	}
	mark := tl.mark
	onClaim := func(o any) {
		if c, ok := o.(*metalv1alpha1.ServerClaim); ok && c.Namespace == ns {
			mark("claim seen", c.Name)
			if c.Spec.ServerRef != nil {
				mark("claim names server", c.Name)
			}
			if c.Status.Phase == metalv1alpha1.PhaseBound {
				mark("claim Bound", c.Name)
			}
		}
	}
	onServer := func(o any) {
		if s, ok := o.(*metalv1alpha1.Server); ok && s.Spec.ServerClaimRef != nil && s.Spec.ServerClaimRef.Namespace == ns {
			mark("server points at claim", s.Spec.ServerClaimRef.Name)
			if s.Annotations[lifecycle.StateAnnotation] == string(metalv1alpha1.ServerStateReserved) {
				mark("server Reserved", s.Spec.ServerClaimRef.Name)
			}
			if strings.HasPrefix(s.Annotations[serverstate.PowerAnnotation], string(metalv1alpha1.PowerOn)+"@") {
				mark("power-on issued", s.Spec.ServerClaimRef.Name)
			}
			if s.Status.PowerState == metalv1alpha1.PowerStateOn {
				mark("server On", s.Spec.ServerClaimRef.Name)
			}
		}
	}
	onBootConfiguration := func(o any) {
		if c, ok := o.(*metalv1alpha1.ServerBootConfiguration); ok && c.Namespace == ns && c.Status.State == metalv1alpha1.ServerBootConfigurationStateReady {
			if owner := metav1.GetControllerOf(c); owner != nil && owner.Kind == "ServerClaim" {
				mark("boot configuration Ready", owner.Name)
			}
		}
	}
	for obj, on := range map[client.Object]func(any){&metalv1alpha1.ServerClaim{}: onClaim, &metalv1alpha1.Server{}: onServer,
		&metalv1alpha1.ServerBootConfiguration{}: onBootConfiguration} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    on,
			UpdateFunc: func(_, o any) { on(o) },
		}); err != nil {
			b.Fatal(err)
		}
	}
	return tl
}

// count is how many claims reached step, as the informers' events marked them. The waits of
// the measured window use it: listing the fleet every poll would be counted as the manager's
// CPU, and grows with the fleet.
func (tl *timeline) count(step string) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return len(tl.steps[step])
}

func (tl *timeline) report(b *testing.B, start time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, step := range steps {
		var ds []time.Duration
		for _, t := range tl.steps[step] {
			ds = append(ds, t.Sub(start))
		}
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		q := func(f float64) time.Duration { return ds[int(f*float64(len(ds)-1))].Round(10 * time.Millisecond) }
		b.Logf("%-24s min %-8s p10 %-8s p50 %-8s p90 %-8s max %s", step, q(0), q(0.1), q(0.5), q(0.9), q(1))
	}
}

func closedWatches(b *testing.B, env *testenv.Env) float64 {
	b.Helper()
	n, err := env.ClosedWatches()
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// reconciles is controller-runtime's count of passes of one controller so far, all results
// (one manager per fleet size runs at a time; the counter is process-wide, so callers take
// differences).
func reconciles(b *testing.B, controller string) float64 {
	b.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// histogram is the sum and count so far of one of the workqueue histograms (by queue name),
// process-wide like reconciles.
func histogram(b *testing.B, metric, queue string) (sum, count float64) {
	b.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == queue {
					sum += m.GetHistogram().GetSampleSum()
					count += float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return sum, count
}

// queueTimes samples how long the controllers' requests waited in their queues and how long
// their passes took; since reports the means in between.
type queueTimes map[string][4]float64

var benchQueues = []string{"serverclaim", "server", "serverbootconfiguration"}

func sampleQueues(b *testing.B) queueTimes {
	q := queueTimes{}
	for _, name := range benchQueues {
		ws, wc := histogram(b, "workqueue_queue_duration_seconds", name)
		ps, pc := histogram(b, "workqueue_work_duration_seconds", name)
		q[name] = [4]float64{ws, wc, ps, pc}
	}
	return q
}

func (q queueTimes) since(before queueTimes) string {
	var out []string
	for _, name := range benchQueues {
		a, z := before[name], q[name]
		mean := func(s, c float64) time.Duration {
			if c <= 0 {
				return 0
			}
			return time.Duration(s / c * float64(time.Second)).Round(time.Millisecond)
		}
		out = append(out, fmt.Sprintf("%s waited %s, passed in %s (%.0f)", name, mean(z[0]-a[0], z[1]-a[1]), mean(z[2]-a[2], z[3]-a[3]), z[3]-a[3]))
	}
	return strings.Join(out, "; ")
}

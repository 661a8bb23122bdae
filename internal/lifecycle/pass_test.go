package lifecycle

import (
	"context"

	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

func newEndpoint(t *testing.T, name string) *metalv1alpha1.Endpoint {
	t.Helper()
	ep := &metalv1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: metalv1alpha1.EndpointSpec{IP: "127.0.0.1"}}
	if err := env.Client.Create(context.Background(), ep); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ep) })
	return ep
}

func req(name string) ctrl.Request {
	return ctrl.Request{NamespacedName: client.ObjectKey{Name: name}}
}

func newEP() *metalv1alpha1.Endpoint { return &metalv1alpha1.Endpoint{} }

func TestSecondWriteRefused(t *testing.T) {
	newEndpoint(t, "twice")
	var second error
	r := NewReconciler(env.Client, newEP, func(ctx context.Context, p *Pass[*metalv1alpha1.Endpoint]) (Result, error) {
		c := p.Client()
		if err := PatchMetadata(ctx, c, p.Obj, func(o client.Object) { SetAnnotation(o, "first", "1") }); err != nil {
			return Result{}, err
		}
		second = PatchMetadata(ctx, c, p.Obj, func(o client.Object) { SetAnnotation(o, "second", "1") })
		return Result{}, second
	})
	if _, err := r.Reconcile(context.Background(), req("twice")); !errors.Is(err, ErrSecondWrite) {
		t.Fatalf("Reconcile error = %v, want ErrSecondWrite", err)
	}
	got := &metalv1alpha1.Endpoint{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "twice"}, got); err != nil {
		t.Fatal(err)
	}
	if got.Annotations["first"] != "1" || got.Annotations["second"] != "" {
		t.Fatalf("annotations = %v: the second write must not reach the API server", got.Annotations)
	}
}

func TestRereadRefused(t *testing.T) {
	newEndpoint(t, "reread")
	r := NewReconciler(env.Client, newEP, func(ctx context.Context, p *Pass[*metalv1alpha1.Endpoint]) (Result, error) {
		return Done(), p.Client().Get(ctx, client.ObjectKeyFromObject(p.Obj), &metalv1alpha1.Endpoint{})
	})
	if _, err := r.Reconcile(context.Background(), req("reread")); !errors.Is(err, ErrReread) {
		t.Fatalf("err = %v, want ErrReread", err)
	}
}

func TestStoreSetIsOptimisticallyLocked(t *testing.T) {
	ep := newEndpoint(t, "locked")
	stale := ep.DeepCopy()
	store := Store[string]{Initial: "Initial"}
	ctx := context.Background()
	if err := store.Set(ctx, env.Client, ep, "A"); err != nil {
		t.Fatal(err)
	}
	err := store.Set(ctx, env.Client, stale, "B")
	if !apierrors.IsConflict(err) {
		t.Fatalf("a write from a stale copy must conflict, got %v", err)
	}
	got := &metalv1alpha1.Endpoint{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "locked"}, got); err != nil {
		t.Fatal(err)
	}
	if s, src := store.Get(got); s != "A" || src != FromAnnotation {
		t.Fatalf("state = %s (%s), want A from the annotation", s, src)
	}
	// A conflict inside a handler is a quick, quiet retry, not an error.
	r := NewReconciler(env.Client, newEP, func(ctx context.Context, p *Pass[*metalv1alpha1.Endpoint]) (Result, error) {
		return Result{}, store.Set(ctx, p.Client(), stale, "C")
	})
	res, err := r.Reconcile(ctx, req("locked"))
	if err != nil || res.RequeueAfter != ConflictRetry {
		t.Fatalf("conflict: res %+v err %v", res, err)
	}
}

// laggingReader serves a frozen copy of one object, as an informer cache does before the watch
// event of our own write has arrived.
type laggingReader struct {
	client.Client
	frozen *metalv1alpha1.Endpoint
}

func (l *laggingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if key.Name == l.frozen.Name {
		l.frozen.DeepCopyInto(obj.(*metalv1alpha1.Endpoint))
		return nil
	}
	return l.Client.Get(ctx, key, obj, opts...)
}

func TestStaleCacheRequeuesInsteadOfActing(t *testing.T) {
	ep := newEndpoint(t, "lagging")
	lag := &laggingReader{Client: env.Client, frozen: ep.DeepCopy()}
	calls := 0
	r := NewReconciler[*metalv1alpha1.Endpoint](lag, newEP, func(ctx context.Context, p *Pass[*metalv1alpha1.Endpoint]) (Result, error) {
		calls++
		return Wrote("step"), PatchMetadata(ctx, p.Client(), p.Obj, func(o client.Object) { SetAnnotation(o, "step", fmt.Sprint(calls)) })
	})
	ctx := context.Background()
	if res, err := r.Reconcile(ctx, req("lagging")); err != nil || res.RequeueAfter != 0 {
		t.Fatalf("first pass: %+v %v", res, err)
	}
	// The cache still has the old version: the step must not run again.
	res, err := r.Reconcile(ctx, req("lagging"))
	if err != nil || res.RequeueAfter != StaleRetry || calls != 1 {
		t.Fatalf("stale pass: res %+v err %v calls %d", res, err, calls)
	}
	// Once the cache catches up, the next step runs.
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "lagging"}, lag.frozen); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req("lagging")); err != nil || calls != 2 {
		t.Fatalf("caught-up pass: err %v calls %d", err, calls)
	}
}

// A real manager with the Predicate: a three-step lifecycle, each step one write, ends with one
// status write that must not bring another pass. Every transition happens exactly once.
func TestStepsRunOnceEachUnderAManager(t *testing.T) {
	const n = 10
	store := Store[string]{Initial: "Initial"}
	next := map[string]string{"Initial": "A", "A": "B", "B": "C"}
	var mu sync.Mutex
	transitions := map[string][]string{}
	passesAfterStatus := map[string]int{}
	statusWritten := map[string]bool{}

	handle := func(ctx context.Context, p *Pass[*metalv1alpha1.Server]) (Result, error) {
		state, _ := store.Get(p.Obj)
		mu.Lock()
		if statusWritten[p.Obj.Name] {
			passesAfterStatus[p.Obj.Name]++
		}
		mu.Unlock()
		if to, ok := next[state]; ok {
			if err := store.Set(ctx, p.Client(), p.Obj, to); err != nil {
				return Result{}, err
			}
			mu.Lock()
			transitions[p.Obj.Name] = append(transitions[p.Obj.Name], state+">"+to)
			mu.Unlock()
			return Wrote(to), nil
		}
		mu.Lock()
		written := statusWritten[p.Obj.Name]
		mu.Unlock()
		if !written { // the report: a status-only write, once
			p.Obj.Status.State = metalv1alpha1.ServerStateAvailable
			if err := p.Client().Status().Update(ctx, p.Obj); err != nil {
				return Result{}, err
			}
			mu.Lock()
			statusWritten[p.Obj.Name] = true
			mu.Unlock()
			return Wrote("status"), nil
		}
		return Done(), nil
	}

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: scheme.New(), Metrics: metricsserver.Options{BindAddress: "0"},
		Logger: logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	r := NewReconciler(mgr.GetClient(), func() *metalv1alpha1.Server { return &metalv1alpha1.Server{} }, handle)
	if err := ctrl.NewControllerManagedBy(mgr).Named("steps").
		For(&metalv1alpha1.Server{}, builder.WithPredicates(Predicate())).Complete(r); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	for i := range n {
		s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("steps-%d", i)}, Spec: metalv1alpha1.ServerSpec{SystemUUID: fmt.Sprint(i)}}
		if err := env.Client.Create(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), s) })
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		all := len(statusWritten) == n
		mu.Unlock()
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not all objects finished: %v", transitions)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // room for a wrongly triggered pass to show
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		name := fmt.Sprintf("steps-%d", i)
		if got := fmt.Sprint(transitions[name]); got != "[Initial>A A>B B>C]" {
			t.Errorf("%s transitions %s, want each step exactly once", name, got)
		}
		if passesAfterStatus[name] != 0 {
			t.Errorf("%s: %d passes after its status-only write; status churn must not trigger", name, passesAfterStatus[name])
		}
	}
}

// A handler that says Wrote after a status-only write would never be looked at again (no event
// passes the Predicate): the Reconciler gives it the periodic look, from ResyncFunc when set.
func TestStatusOnlyWriteGetsTheResync(t *testing.T) {
	s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "status-only"}, Spec: metalv1alpha1.ServerSpec{SystemUUID: "so"}}
	if err := env.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), s) })
	states := []metalv1alpha1.ServerState{metalv1alpha1.ServerStateAvailable, metalv1alpha1.ServerStateReserved}
	pass := 0
	r := NewReconciler(env.Client, func() *metalv1alpha1.Server { return &metalv1alpha1.Server{} },
		func(ctx context.Context, p *Pass[*metalv1alpha1.Server]) (Result, error) {
			p.Obj.Status.State = states[pass]
			pass++
			return Wrote("status"), p.Client().Status().Update(ctx, p.Obj)
		})
	r.Resync = time.Minute
	res, err := r.Reconcile(context.Background(), req("status-only"))
	if err != nil || res.RequeueAfter < time.Minute {
		t.Fatalf("status-only write: res %+v err %v, want the one-minute resync", res, err)
	}
	r.ResyncFunc = func(context.Context) time.Duration { return time.Hour }
	r.Guard = NewGuard() // the uncached client is never stale
	res, err = r.Reconcile(context.Background(), req("status-only"))
	if err != nil || res.RequeueAfter < time.Hour {
		t.Fatalf("with ResyncFunc: res %+v err %v, want the one-hour resync", res, err)
	}
	// A metadata write keeps Wrote: its own event brings the next pass.
	r2 := NewReconciler(env.Client, func() *metalv1alpha1.Server { return &metalv1alpha1.Server{} },
		func(ctx context.Context, p *Pass[*metalv1alpha1.Server]) (Result, error) {
			return Wrote("meta"), PatchMetadata(ctx, p.Client(), p.Obj, func(o client.Object) { SetAnnotation(o, "x", "1") })
		})
	if res, err := r2.Reconcile(context.Background(), req("status-only")); err != nil || res.RequeueAfter != 0 {
		t.Fatalf("metadata write: res %+v err %v, want no requeue", res, err)
	}
}

// A status changed in memory is written once by the Reconciler, at the end of a pass that made no
// other write (failed or not); the handler never writes status itself.
func TestStatusChangedInMemoryIsWrittenOnce(t *testing.T) {
	s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "dirty"}, Spec: metalv1alpha1.ServerSpec{SystemUUID: "dirty"}}
	if err := env.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), s) })
	get := func() *metalv1alpha1.Server {
		t.Helper()
		got := &metalv1alpha1.Server{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "dirty"}, got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	cases := []struct {
		name      string
		handle    Handler[*metalv1alpha1.Server]
		wantState metalv1alpha1.ServerState
		wantErr   bool
		wantAfter time.Duration // the requeue the result asked for survives the write
	}{
		{"changed: written", func(ctx context.Context, p *Pass[*metalv1alpha1.Server]) (Result, error) {
			p.Obj.Status.State = metalv1alpha1.ServerStateAvailable
			return RequeueAfter(time.Minute, "look again"), nil
		}, metalv1alpha1.ServerStateAvailable, false, time.Minute},
		{"unchanged: nothing written", func(ctx context.Context, p *Pass[*metalv1alpha1.Server]) (Result, error) {
			p.Obj.Status.State = metalv1alpha1.ServerStateAvailable
			return Done(), nil
		}, metalv1alpha1.ServerStateAvailable, false, 0},
		{"after a metadata write: left for the next pass", func(ctx context.Context, p *Pass[*metalv1alpha1.Server]) (Result, error) {
			p.Obj.Status.State = metalv1alpha1.ServerStateReserved
			return Wrote("meta"), PatchMetadata(ctx, p.Client(), p.Obj, func(o client.Object) { SetAnnotation(o, "x", "1") })
		}, metalv1alpha1.ServerStateAvailable, false, 0},
		{"after a failure: written, the failure reported", func(ctx context.Context, p *Pass[*metalv1alpha1.Server]) (Result, error) {
			p.Obj.Status.State = metalv1alpha1.ServerStateError
			return Result{}, errors.New("boom")
		}, metalv1alpha1.ServerStateError, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := get().ResourceVersion
			r := NewReconciler(env.Client, func() *metalv1alpha1.Server { return &metalv1alpha1.Server{} }, tc.handle)
			r.Resync = 0
			res, err := r.Reconcile(context.Background(), req("dirty"))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			got := get()
			if got.Status.State != tc.wantState {
				t.Errorf("status.state %q, want %q", got.Status.State, tc.wantState)
			}
			if tc.name == "unchanged: nothing written" && got.ResourceVersion != before {
				t.Errorf("an unchanged status was written")
			}
			if !tc.wantErr && res.RequeueAfter != tc.wantAfter {
				t.Errorf("requeue after %v, want %v", res.RequeueAfter, tc.wantAfter)
			}
		})
	}
	// A lost race on the write: the next pass decides again on the fresh object.
	r := NewReconciler(env.Client, func() *metalv1alpha1.Server { return &metalv1alpha1.Server{} },
		func(ctx context.Context, p *Pass[*metalv1alpha1.Server]) (Result, error) {
			stale := p.Obj.DeepCopy()
			if err := PatchMetadata(ctx, env.Client, stale, func(o client.Object) { SetAnnotation(o, "racer", "1") }); err != nil {
				return Result{}, err
			}
			p.Obj.Status.State = metalv1alpha1.ServerStateInitial
			return Done(), nil
		})
	res, err := r.Reconcile(context.Background(), req("dirty"))
	if err != nil || res.RequeueAfter != ConflictRetry {
		t.Fatalf("conflicting status write: res %+v err %v, want a conflict retry", res, err)
	}
	if got := get(); got.Status.State == metalv1alpha1.ServerStateInitial {
		t.Errorf("status written over a newer object")
	}
}

// Two groups' kinds of one Go name are different objects: a pass over one may read the other of
// the same namespace and name (the maintenance group's ServerMaintenance reads its
// metal.ironcore.dev counterpart).
func TestIsOwnTellsKindsOfOneNameApart(t *testing.T) {
	own := &maintenancev1alpha1.ServerMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m", UID: "u1"}}
	p := newPass[*maintenancev1alpha1.ServerMaintenance](own, nil, nil)
	other := &metalv1alpha1.ServerMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"}}
	if p.isOwn(other) {
		t.Fatal("the metal.ironcore.dev ServerMaintenance of the same name counted as the reconciled object")
	}
	if !p.isOwn(&maintenancev1alpha1.ServerMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"}}) {
		t.Fatal("the reconciled object itself (no UID yet) not recognised")
	}
}

// Owner decides whether this process acts on an object (shards): one it does not own gets no
// pass and no write, not even a pause acknowledgement; a pass that loses the object midway
// writes no report (the new holder makes it); an owned one runs under the Owner's context.
func TestOwnerGatesPasses(t *testing.T) {
	s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "sharded", Annotations: map[string]string{PausedAnnotation: "p"}},
		Spec: metalv1alpha1.ServerSpec{SystemUUID: "sharded"}}
	if err := env.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), s) })
	get := func() *metalv1alpha1.Server {
		t.Helper()
		got := &metalv1alpha1.Server{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "sharded"}, got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	type ctxKey struct{}
	owned, passes := false, 0
	r := NewReconciler(env.Client, func() *metalv1alpha1.Server { return &metalv1alpha1.Server{} },
		func(ctx context.Context, p *Pass[*metalv1alpha1.Server]) (Result, error) {
			passes++
			if ctx.Value(ctxKey{}) == nil {
				t.Error("the pass does not run under the Owner's context")
			}
			p.Obj.Status.State = metalv1alpha1.ServerStateAvailable
			owned = false // lost during the pass
			return Done(), nil
		})
	r.Owner = func(ctx context.Context, _ client.Object) (context.Context, Ownership) {
		if !owned {
			return ctx, NotOwned
		}
		return context.WithValue(ctx, ctxKey{}, true), Owned
	}
	before := get().ResourceVersion
	if _, err := r.Reconcile(context.Background(), req("sharded")); err != nil {
		t.Fatal(err)
	}
	if got := get(); got.ResourceVersion != before || got.Annotations[PauseAckAnnotation] != "" {
		t.Errorf("an object of another shard was written (pause ack %q)", got.Annotations[PauseAckAnnotation])
	}
	// Owned and paused: the owner acknowledges.
	owned = true
	if _, err := r.Reconcile(context.Background(), req("sharded")); err != nil {
		t.Fatal(err)
	}
	if got := get(); got.Annotations[PauseAckAnnotation] != "p" {
		t.Errorf("the owner did not acknowledge the pause: %v", got.Annotations)
	}
	if err := PatchMetadata(context.Background(), env.Client, get(), func(o client.Object) { RemoveAnnotation(o, PausedAnnotation) }); err != nil {
		t.Fatal(err)
	}
	// Owned at the start, lost during the pass: the report is not written.
	owned = true
	if _, err := r.Reconcile(context.Background(), req("sharded")); err != nil {
		t.Fatal(err)
	}
	if passes != 1 {
		t.Fatalf("%d passes, want the one of the owned, unpaused object", passes)
	}
	if got := get(); got.Status.State != "" {
		t.Errorf("a pass that lost its object wrote its report: status.state %q", got.Status.State)
	}
}

// fenceRefused stands for a BMC request its shard fence refused (bmc.Error reports Fenced).
type fenceRefused struct{}

func (fenceRefused) Error() string { return "Fenced: shard 0: the request may run past the hand-over" }
func (fenceRefused) Fenced() bool  { return true }

// A request the fence refused is not a failure: the pass looks again after FencedRetry, with no
// error (no "Reconciler error" line, no backoff); without an Owner the error stays an error.
func TestFencedRequestLooksAgainWithoutAnError(t *testing.T) {
	newEndpoint(t, "fenced")
	handle := func(context.Context, *Pass[*metalv1alpha1.Endpoint]) (Result, error) {
		return Done(), fmt.Errorf("read manager: %w", fenceRefused{})
	}
	r := NewReconciler(env.Client, newEP, handle)
	r.Owner = func(ctx context.Context, _ client.Object) (context.Context, Ownership) { return ctx, Owned }
	res, err := r.Reconcile(context.Background(), req("fenced"))
	if err != nil || res.RequeueAfter != FencedRetry {
		t.Errorf("fenced pass: result %+v, error %v; want a look after %s and no error", res, err, FencedRetry)
	}
	r.Owner = nil
	if _, err := r.Reconcile(context.Background(), req("fenced")); err == nil {
		t.Error("without shards a fenced error (which cannot happen) vanished")
	}
}

// An object held but not for certain this moment (a shard's renewal late) is looked at again
// after FencedRetry, before and after its pass, never dropped: nothing else brings it back.
func TestUncertainOwnershipLooksAgain(t *testing.T) {
	newEndpoint(t, "uncertain")
	passes := 0
	own := OwnedUncertain
	r := NewReconciler(env.Client, newEP, func(_ context.Context, p *Pass[*metalv1alpha1.Endpoint]) (Result, error) {
		passes++
		own = OwnedUncertain // the renewal runs late during the pass
		return Done(), nil
	})
	r.Owner = func(ctx context.Context, _ client.Object) (context.Context, Ownership) { return ctx, own }
	res, err := r.Reconcile(context.Background(), req("uncertain"))
	if err != nil || res.RequeueAfter != FencedRetry || passes != 0 {
		t.Fatalf("uncertain before the pass: result %+v, error %v, %d passes; want a look after %s and no pass", res, err, passes, FencedRetry)
	}
	own = Owned
	res, err = r.Reconcile(context.Background(), req("uncertain"))
	if err != nil || res.RequeueAfter != FencedRetry || passes != 1 {
		t.Fatalf("uncertain after the pass: result %+v, error %v, %d passes; want a look after %s", res, err, passes, FencedRetry)
	}
}

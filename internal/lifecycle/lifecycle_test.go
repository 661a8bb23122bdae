package lifecycle

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

// testStore is a lifecycle defined for these tests, to check Store's generic behaviour; the
// Server's own store is tested in internal/controller/metal. Adoption is left out here.
var testStore = Store[string]{
	Initial: "New",
	Valid:   func(s string) bool { return s == "New" || s == "Running" || s == "Held" },
	Derive: func(o client.Object) (string, bool) {
		v, ok := o.GetLabels()["held"]
		return v, ok // any label value, so that an invalid derived one can be tried
	},
}

func TestStoreGet(t *testing.T) {
	tests := []struct {
		name       string
		store      Store[string]
		annotation *string
		held       *string
		want       string
		wantSource Source
	}{
		{name: "annotation wins over derived", store: testStore, annotation: ptr.To("Running"), held: ptr.To("Held"), want: "Running", wantSource: FromAnnotation},
		{name: "annotation kept", store: testStore, annotation: ptr.To("Held"), want: "Held", wantSource: FromAnnotation},
		{name: "no annotation: derived", store: testStore, held: ptr.To("Held"), want: "Held", wantSource: FromDerived},
		{name: "invalid annotation ignored: derived", store: testStore, annotation: ptr.To("Bogus"), held: ptr.To("Held"), want: "Held", wantSource: FromDerived},
		{name: "empty annotation ignored: derived", store: testStore, annotation: ptr.To(""), held: ptr.To("Held"), want: "Held", wantSource: FromDerived},
		{name: "invalid annotation, nothing derived", store: testStore, annotation: ptr.To("Bogus"), want: "New", wantSource: FromInitial},
		{name: "invalid derived state ignored", store: testStore, held: ptr.To("Bogus"), want: "New", wantSource: FromInitial},
		{name: "empty derived state ignored", store: testStore, held: ptr.To(""), want: "New", wantSource: FromInitial},
		{name: "nothing known", store: testStore, want: "New", wantSource: FromInitial},
		{name: "without Valid any non-empty value is a state", store: Store[string]{Initial: "New"}, annotation: ptr.To("Anything"), want: "Anything", wantSource: FromAnnotation},
		{name: "without Valid the empty value is still none", store: Store[string]{Initial: "New"}, annotation: ptr.To(""), want: "New", wantSource: FromInitial},
		{name: "without Derive nothing is derived", store: Store[string]{Initial: "New", Valid: testStore.Valid}, held: ptr.To("Held"), want: "New", wantSource: FromInitial},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := &metav1.PartialObjectMetadata{}
			if tc.annotation != nil {
				SetAnnotation(obj, StateAnnotation, *tc.annotation)
			}
			if tc.held != nil {
				obj.SetLabels(map[string]string{"held": *tc.held})
			}
			got, src := tc.store.Get(obj)
			if got != tc.want || src != tc.wantSource {
				t.Fatalf("Get = %s (%s), want %s (%s)", got, src, tc.want, tc.wantSource)
			}
		})
	}
}

func TestRelevant(t *testing.T) {
	base := func() *metalv1alpha1.Server {
		return &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{
			Name: "s", Generation: 1, ResourceVersion: "10",
			Annotations: map[string]string{"a": "1"}, Labels: map[string]string{"l": "1"}, Finalizers: []string{"f"},
		}}
	}
	now := metav1.Now()
	tests := []struct {
		name   string
		mutate func(*metalv1alpha1.Server)
		want   bool
	}{
		{name: "status only", mutate: func(s *metalv1alpha1.Server) { s.ResourceVersion = "11"; s.Status.State = "Available" }, want: false},
		{name: "nothing", mutate: func(*metalv1alpha1.Server) {}, want: false},
		{name: "spec (generation)", mutate: func(s *metalv1alpha1.Server) { s.Generation = 2 }, want: true},
		{name: "annotation changed", mutate: func(s *metalv1alpha1.Server) { s.Annotations["a"] = "2" }, want: true},
		{name: "annotation added", mutate: func(s *metalv1alpha1.Server) { s.Annotations[StateAnnotation] = "Discovery" }, want: true},
		{name: "label removed", mutate: func(s *metalv1alpha1.Server) { s.Labels = nil }, want: true},
		{name: "finalizer removed", mutate: func(s *metalv1alpha1.Server) { s.Finalizers = nil }, want: true},
		{name: "deletion", mutate: func(s *metalv1alpha1.Server) { s.DeletionTimestamp = &now }, want: true},
		{name: "owner reference", mutate: func(s *metalv1alpha1.Server) {
			s.OwnerReferences = []metav1.OwnerReference{{Name: "o", UID: "u", Kind: "BMC", APIVersion: "v"}}
		}, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old, new := base(), base()
			tc.mutate(new)
			if got := Relevant(old, new); got != tc.want {
				t.Fatalf("Relevant = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestGuard(t *testing.T) {
	now := time.Unix(1000, 0)
	g := NewGuard()
	g.now = func() time.Time { return now }
	obj := func(rv string) *metalv1alpha1.Server {
		return &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{UID: types.UID("u1"), ResourceVersion: rv}}
	}
	if g.Stale(obj("5")) {
		t.Fatal("stale without a write")
	}
	g.Wrote("u1", "5")
	if !g.Stale(obj("5")) {
		t.Fatal("cache still at the replaced version must be stale")
	}
	if g.Stale(obj("7")) {
		t.Fatal("cache past our write is not stale")
	}
	if g.Len() != 0 {
		t.Fatal("write not forgotten once the cache moved on")
	}
	g.Wrote("u1", "7")
	now = now.Add(guardTTL + time.Second)
	if g.Stale(obj("7")) {
		t.Fatal("a write whose event never came must not block forever")
	}
}

func TestReport(t *testing.T) {
	var last *metav1.Time
	var lastErr string
	r := Report{LastSuccess: &last, LastError: &lastErr}
	now := time.Unix(5000, 0)
	if !r.Succeeded(now, false) || last == nil {
		t.Fatal("first success must be recorded")
	}
	if r.Succeeded(now.Add(time.Minute), false) {
		t.Fatal("an idle pass must not write a timestamp")
	}
	if !r.Succeeded(now.Add(time.Minute), true) || !last.Time.Equal(now.Add(time.Minute)) {
		t.Fatal("a pass that progressed moves the time")
	}
	if !r.Failed(errors.New("boom")) || lastErr != "boom" {
		t.Fatal("error not recorded")
	}
	if r.Failed(errors.New("boom")) {
		t.Fatal("the same error again must not write")
	}
	if !r.Succeeded(now.Add(2*time.Minute), false) || lastErr != "" {
		t.Fatal("recovery clears the error")
	}
}

func TestResultToCtrl(t *testing.T) {
	if r := Wrote("x").ctrlResult(time.Minute); r.RequeueAfter != 0 {
		t.Fatalf("a write needs no requeue: %+v", r)
	}
	if r := RequeueAfter(3*time.Second, "power").ctrlResult(time.Minute); r.RequeueAfter != 3*time.Second {
		t.Fatalf("requeue: %+v", r)
	}
	r := Done().ctrlResult(time.Minute)
	if r.RequeueAfter < time.Minute || r.RequeueAfter > time.Minute+6*time.Second+1 {
		t.Fatalf("done must come back after the resync (jittered): %+v", r)
	}
	if r := Done().ctrlResult(0); r.RequeueAfter != 0 {
		t.Fatalf("resync disabled: %+v", r)
	}
	if r := RequeueAfter(time.Second, "bound next").Ahead().ctrlResult(time.Minute); r.Priority == nil || *r.Priority != AheadPriority || r.RequeueAfter != time.Second {
		t.Fatalf("a requeue asked ahead carries the priority: %+v", r)
	}
	if r := RequeueAfter(time.Second, "power").ctrlResult(time.Minute); r.Priority != nil {
		t.Fatalf("a plain requeue keeps the request's priority: %+v", r)
	}
}

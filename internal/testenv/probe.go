package testenv

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ProbeGroup holds the copies of the metal kinds that a benchmark's write probe writes to
// (CopyCRD): the same schema and validation, and no controller watches them.
const ProbeGroup = "probe.bench.metalhub.io"

// ProbeObject is an object of kind in ProbeGroup (version v1alpha1) named name, in namespace
// ("" for a cluster-scoped kind), for a write probe to fill in.
func ProbeObject(kind, name, namespace string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: ProbeGroup, Version: "v1alpha1", Kind: kind})
	u.SetName(name)
	u.SetNamespace(namespace)
	return u
}

// CopyCRD serves a copy of the kind plural of group in the group to, with the same schema and
// validation, so that a benchmark's write probe writes objects as costly to the API server as
// the operator's while no controller watches them. A copy already served is kept.
func CopyCRD(tb testing.TB, ctx context.Context, c client.Client, plural, group, to string) {
	tb.Helper()
	orig := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: plural + "." + group}, orig); err != nil {
		tb.Fatal(err)
	}
	cp := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + to},
		Spec:       *orig.Spec.DeepCopy(),
	}
	cp.Spec.Group = to
	cp.Spec.Names.ShortNames = nil
	cp.Spec.Names.Categories = nil
	cp.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	if err := c.Create(ctx, cp); err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatal(err)
	}
	Eventually(tb, time.Minute, plural+" copy served", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(cp), cp); err != nil {
			return false, err.Error()
		}
		if cp.DeletionTimestamp != nil {
			return false, "a former copy is being deleted"
		}
		for _, cond := range cp.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, ""
			}
		}
		return false, "not established"
	})
}

// ParallelRate runs round in writers goroutines, each starting its next round as soon as its
// last returned, for d (or until limit rounds began, when limit > 0), and returns the writes
// per second the rounds counted in n, and whether the rounds ran out before d.
func ParallelRate(tb testing.TB, writers int, d time.Duration, limit int64, round func(i int64, n *atomic.Int64) error) (float64, bool) {
	tb.Helper()
	var n, seq atomic.Int64
	deadline := time.Now().Add(d)
	start := time.Now()
	if err := Parallel(writers, writers, func(int) error {
		for time.Now().Before(deadline) {
			i := seq.Add(1) - 1
			if limit > 0 && i >= limit {
				return nil
			}
			if err := round(i, &n); err != nil {
				return fmt.Errorf("round %d: %w", i, err)
			}
		}
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	return float64(n.Load()) / time.Since(start).Seconds(), limit > 0 && seq.Load() >= limit
}

package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/testenv"
)

// claimWriteRate measures how many of a binding's own writes per second the API server takes
// from writers in parallel, each writing as soon as its last write returned: the five writes
// every claim needs before it is Bound (the claim created, the server's claim ref patched with
// an optimistic lock, the boot configuration created, the claim's server ref and finalizer
// patched, its Bound status written), on copies of the ServerClaim, Server and
// ServerBootConfiguration kinds that nothing watches. The writes are the binding's; what the
// probe leaves out (the watches' fan-out, every other controller's writes) makes it a floor.
// servers bounds the sequences: each needs a server of its own (the claim ref is immutable).
// The probe's servers are copies of like (a server of the fleet, as discovered: its labels,
// annotations, spec and status), so that the lock writes an object of the fleet's size.
func claimWriteRate(b *testing.B, c client.Client, writers, servers int, d time.Duration, like *metalv1alpha1.Server) float64 {
	b.Helper()
	ctx := context.Background()
	for _, plural := range []string{"servers", "serverclaims", "serverbootconfigurations"} {
		testenv.CopyCRD(b, ctx, c, plural, metalv1alpha1.GroupVersion.Group, testenv.ProbeGroup)
	}
	const ns = "claim-write-probe"
	if err := c.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}); err != nil {
		b.Fatal(err)
	}
	// The servers, set up beforehand, as the fleet is: not counted. Their resourceVersions are
	// what the lock is conditioned on (the controller reads them from its cache).
	tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(like)
	if err != nil {
		b.Fatal(err)
	}
	versions := make([]string, servers)
	if err := testenv.Parallel(servers, 32, func(i int) error {
		s := testenv.ProbeObject("Server", fmt.Sprintf("probe-%05d", i), "")
		s.SetLabels(like.Labels)
		s.SetAnnotations(like.Annotations)
		s.Object["spec"] = runtime.DeepCopyJSONValue(tmpl["spec"])
		if err := unstructured.SetNestedField(s.Object, fmt.Sprintf("00000000-0000-0000-0000-%012d", i), "spec", "systemUUID"); err != nil {
			return err
		}
		if err := c.Create(ctx, s); err != nil {
			return err
		}
		s.Object["status"] = runtime.DeepCopyJSONValue(tmpl["status"])
		if err := c.Status().Update(ctx, s); err != nil {
			return err
		}
		versions[i] = s.GetResourceVersion()
		return nil
	}); err != nil {
		b.Fatal(err)
	}

	rate, ranOut := testenv.ParallelRate(b, writers, d, int64(servers), func(i int64, n *atomic.Int64) error {
		name := fmt.Sprintf("probe-%05d", i)
		claim := testenv.ProbeObject("ServerClaim", name, ns)
		claim.Object["spec"] = map[string]any{"power": string(metalv1alpha1.PowerOn), "image": "os-image:latest"}
		if err := c.Create(ctx, claim); err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		n.Add(1)
		// The lock: the server's refs, optimistically locked on what was read.
		srv := testenv.ProbeObject("Server", name, "")
		lock := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"spec":{"serverClaimRef":{"namespace":%q,"name":%q},"bootConfigurationRef":{"namespace":%q,"name":%q}}}`,
			versions[i], ns, name, ns, name)
		if err := c.Patch(ctx, srv, client.RawPatch(types.MergePatchType, []byte(lock))); err != nil {
			return fmt.Errorf("server: %w", err)
		}
		n.Add(1)
		sbc := testenv.ProbeObject("ServerBootConfiguration", name, ns)
		sbc.Object["spec"] = map[string]any{"serverRef": map[string]any{"name": name}, "image": "os-image:latest"}
		sbc.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: testenv.ProbeGroup + "/" + metalv1alpha1.GroupVersion.Version, Kind: "ServerClaim", Name: name,
			UID: claim.GetUID(), Controller: new(true), BlockOwnerDeletion: new(true)}})
		if err := c.Create(ctx, sbc); err != nil {
			return fmt.Errorf("boot configuration: %w", err)
		}
		n.Add(1)
		record := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"finalizers":["metal.ironcore.dev/serverclaim"]},"spec":{"serverRef":{"name":%q}}}`,
			claim.GetResourceVersion(), name)
		if err := c.Patch(ctx, claim, client.RawPatch(types.MergePatchType, []byte(record))); err != nil {
			return fmt.Errorf("claim record: %w", err)
		}
		n.Add(1)
		var conds []metav1.Condition
		apimeta.SetStatusCondition(&conds, metav1.Condition{Type: metalv1alpha1.ConditionBound, Status: metav1.ConditionTrue,
			Reason: metalv1alpha1.ReasonBound, Message: "bound to server " + name, ObservedGeneration: claim.GetGeneration()})
		status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&metalv1alpha1.ServerClaimStatus{Phase: metalv1alpha1.PhaseBound, Conditions: conds})
		if err != nil {
			return err
		}
		claim.Object["status"] = status
		if err := c.Status().Update(ctx, claim); err != nil {
			return fmt.Errorf("claim status: %w", err)
		}
		n.Add(1)
		return nil
	})
	if ranOut {
		b.Logf("claim-write probe ran out of its %d servers before %s", servers, d)
	}
	return rate
}

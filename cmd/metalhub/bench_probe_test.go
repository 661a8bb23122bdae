package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/inventory"
	"github.com/metalhub/metalhub/internal/testenv"
)

// discoveryWriteRate measures how many of a discovery's own writes per second the API server
// takes from writers in parallel, each writing as soon as its last write returned. A round is
// one server's discovery as the operator writes it (docs/scale.md lists them): the Server
// created, the round's Secret and boot configuration created, the boot configuration's Ready,
// the move to Discovery (annotations, finalizer, boot reference), its event, the report (the
// inventory into status, the inventory record, the reported labels), the move to Available
// and its event, the Secret and boot configuration deleted, the status mirror. The Servers and
// boot configurations are copies of the kinds in testenv.ProbeGroup that nothing watches (same schema
// and validation), the Secrets, ConfigMaps and events in a namespace of the probe's; each
// write is of the size the fleet's is, its objects modelled on like (a discovered server). What
// the probe leaves out (the watches' fan-out, reads, every other process on the cores) makes it
// a floor, one that prices a custom resource's write as the API server does (a ConfigMap's
// create costs it a fraction of a large Server's patch).
func discoveryWriteRate(b *testing.B, c client.Client, writers int, d time.Duration, like *metalv1alpha1.Server) (rate float64, perRound int) {
	b.Helper()
	ctx := context.Background()
	for _, plural := range []string{"servers", "serverbootconfigurations"} {
		testenv.CopyCRD(b, ctx, c, plural, metalv1alpha1.GroupVersion.Group, testenv.ProbeGroup)
	}
	ns := fmt.Sprintf("discovery-write-probe-%d", time.Now().UnixNano())
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(like)
	if err != nil {
		b.Fatal(err)
	}
	status, _ := tmpl["status"].(map[string]any)
	report, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		b.Fatal(err)
	}
	labels, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": like.Labels}})
	if err != nil {
		b.Fatal(err)
	}
	record, err := inventory.ConfigMap(ns, "probe", inventory.Record{Round: "probe", Current: inventory.FromStatus(&like.Status), Baseline: inventory.FromStatus(&like.Status)})
	if err != nil {
		b.Fatal(err)
	}
	prefix := fmt.Sprintf("p%x", time.Now().UnixNano()%0xfffff)
	const writes = 14
	rate, _ = testenv.ParallelRate(b, writers, d, 0, func(i int64, n *atomic.Int64) error {
		name := fmt.Sprintf("%s-%06d", prefix, i)
		w := func(what string, err error) error {
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			n.Add(1)
			return nil
		}
		srv := testenv.ProbeObject("Server", name, "")
		srv.Object["spec"] = runtime.DeepCopyJSONValue(tmpl["spec"])
		unstructured.RemoveNestedField(srv.Object, "spec", "bootConfigurationRef")
		if err := unstructured.SetNestedField(srv.Object, fmt.Sprintf("00000000-0000-0000-%04x-%012d", i>>32, i&0xffffffff), "spec", "systemUUID"); err != nil {
			return err
		}
		if err := w("server", c.Create(ctx, srv)); err != nil {
			return err
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"token": []byte(name + name)}}
		if err := w("round secret", c.Create(ctx, secret)); err != nil {
			return err
		}
		sbc := testenv.ProbeObject("ServerBootConfiguration", name, ns)
		sbc.Object["spec"] = map[string]any{"serverRef": map[string]any{"name": name}, "image": "discovery:latest",
			"ignitionSecretRef": map[string]any{"name": name}}
		if err := w("boot configuration", c.Create(ctx, sbc)); err != nil {
			return err
		}
		sbc.Object["status"] = map[string]any{"state": string(metalv1alpha1.ServerBootConfigurationStateReady)}
		if err := w("boot configuration ready", c.Status().Update(ctx, sbc)); err != nil {
			return err
		}
		toDiscovery, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": srv.GetResourceVersion(), "annotations": like.Annotations, "finalizers": like.Finalizers},
			"spec":     map[string]any{"bootConfigurationRef": map[string]any{"namespace": ns, "name": name}},
		})
		if err != nil {
			return err
		}
		if err := w("to discovery", c.Patch(ctx, srv, client.RawPatch(types.MergePatchType, toDiscovery))); err != nil {
			return err
		}
		if err := w("event", c.Create(ctx, probeEvent(name, srv, "Discovery"))); err != nil {
			return err
		}
		if err := w("report", c.Status().Patch(ctx, srv, client.RawPatch(types.MergePatchType, report))); err != nil {
			return err
		}
		cm := record.DeepCopy()
		cm.Name = inventory.ObjectName(name)
		if err := w("inventory record", c.Create(ctx, cm)); err != nil {
			return err
		}
		if err := w("reported labels", c.Patch(ctx, srv, client.RawPatch(types.MergePatchType, labels))); err != nil {
			return err
		}
		toAvailable, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": srv.GetResourceVersion(), "annotations": map[string]any{"probe.bench.metalhub.io/state": "Available"}},
			"spec":     map[string]any{"bootConfigurationRef": nil},
		})
		if err != nil {
			return err
		}
		if err := w("to available", c.Patch(ctx, srv, client.RawPatch(types.MergePatchType, toAvailable))); err != nil {
			return err
		}
		if err := w("event", c.Create(ctx, probeEvent(name, srv, "Available"))); err != nil {
			return err
		}
		if err := w("round secret deleted", c.Delete(ctx, secret)); err != nil {
			return err
		}
		if err := w("boot configuration deleted", c.Delete(ctx, sbc)); err != nil {
			return err
		}
		if err := unstructured.SetNestedField(srv.Object, string(metalv1alpha1.PowerStateOff), "status", "powerState"); err != nil {
			return err
		}
		if err := unstructured.SetNestedField(srv.Object, string(metalv1alpha1.ServerStateAvailable), "status", "state"); err != nil {
			return err
		}
		return w("status mirror", c.Status().Update(ctx, srv))
	})
	// The copies go with their namespace and their kinds' definitions; the fleet's objects stay.
	if err := c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsNotFound(err) {
		b.Fatal(err)
	}
	return rate, writes
}

// probeEvent is an event about a probe server, as a transition's: in the default namespace, as
// the events of a cluster-scoped object are.
func probeEvent(name string, srv *unstructured.Unstructured, state string) *corev1.Event {
	now := metav1.Now()
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, GenerateName: name + "."},
		InvolvedObject: corev1.ObjectReference{APIVersion: srv.GetAPIVersion(), Kind: "Server", Name: name, UID: srv.GetUID(), ResourceVersion: srv.GetResourceVersion()},
		Reason:         "Transition", Message: "server moved to " + state, Type: corev1.EventTypeNormal,
		FirstTimestamp: now, LastTimestamp: now, Count: 1, Source: corev1.EventSource{Component: "probe"},
	}
}

package dev

import (
	"context"
	"io"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/scheme"
)

// runOnce runs `metalhub dev` in-process until fn returns, then stops it and waits for it to exit.
func runOnce(t *testing.T, o Options, fn func(c client.Client)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	readyCh := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, o, io.Discard, zap.New(zap.WriteTo(io.Discard)), func(kc string) { readyCh <- kc })
	}()
	var kubeconfig string
	select {
	case kubeconfig = <-readyCh:
	case err := <-done:
		t.Fatalf("dev exited early: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("dev not up after 2m")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	fn(c)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("dev stopped with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("dev did not stop within 1m of cancel")
	}
}

// A second run with the same --data-dir finds what the first run left.
func TestDataDirResumes(t *testing.T) {
	o := DefaultOptions()
	o.DataDir = t.TempDir()
	o.Manager.MetricsAddr = "0"
	o.Manager.HealthAddr = "127.0.0.1:0"
	ctx := context.Background()
	runOnce(t, o, func(c client.Client) {
		s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Spec: metalv1alpha1.ServerSpec{SystemUUID: "u-kept"}}
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	})
	runOnce(t, o, func(c client.Client) {
		s := &metalv1alpha1.Server{}
		if err := c.Get(ctx, client.ObjectKey{Name: "kept"}, s); err != nil {
			t.Fatalf("server from the first run is gone: %v", err)
		}
		if s.Spec.SystemUUID != "u-kept" {
			t.Fatalf("systemUUID = %q", s.Spec.SystemUUID)
		}
	})
}

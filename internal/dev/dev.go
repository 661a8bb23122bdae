// Package dev is `metalhub dev`: everything a newcomer needs to see metalhub work on one machine —
// a local control plane (or an existing cluster) with the CRDs installed and the operator running
// in the same process. Ctrl-C stops all of it.
package dev

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/metalhub/metalhub/config/crd"
	"github.com/metalhub/metalhub/internal/controlplane"
	"github.com/metalhub/metalhub/internal/manager"
)

// Options configure a dev run.
type Options struct {
	// DataDir keeps etcd's data and the kubeconfig between runs; empty means a temporary
	// directory removed on exit.
	DataDir string
	// Kubeconfig points at an existing cluster to use instead of a local control plane.
	Kubeconfig string
	// Manager configures the operator run in-process.
	Manager manager.Options
}

// DefaultOptions binds the operator's endpoints to loopback so a dev run exposes nothing.
func DefaultOptions() Options {
	m := manager.DefaultOptions()
	m.MetricsAddr = "127.0.0.1:8080"
	m.HealthAddr = "127.0.0.1:8081"
	return Options{Manager: m}
}

// BindFlags registers the dev flags on fs.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "Keep etcd's data and the kubeconfig in this directory so a second run resumes (default: temporary, removed on exit).")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Use the cluster of this kubeconfig instead of starting a local control plane.")
	fs.StringVar(&o.Manager.MetricsAddr, "metrics-bind-address", o.Manager.MetricsAddr, "Address of the operator's metrics endpoint; \"0\" disables it.")
	fs.StringVar(&o.Manager.HealthAddr, "health-probe-bind-address", o.Manager.HealthAddr, "Address of the operator's /healthz and /readyz.")
	fs.Var(&o.Manager.Controllers, "controllers", "Controller families to run: metal, delivery, or both.")
}

// Run runs the dev environment until ctx is cancelled. ready, if not nil, is called with the
// kubeconfig path once the operator is about to start.
func Run(ctx context.Context, o Options, out io.Writer, log logr.Logger, ready func(kubeconfig string)) error {
	cfg, kubeconfig, stop, err := cluster(o, out)
	if err != nil {
		return err
	}
	defer stop()

	fmt.Fprintf(out, "\nmetalhub dev is up. In another shell:\n  export KUBECONFIG=%s\n", kubeconfig)
	if o.Kubeconfig == "" {
		fmt.Fprintf(out, "  alias kubectl=%s\n", filepath.Join(controlplaneAssets(), "kubectl"))
	}
	fmt.Fprintf(out, "  kubectl get bmcs,servers,serverclaims,infrahubsyncs,vidraresources\nCtrl-C stops everything.\n\n")
	if ready != nil {
		ready(kubeconfig)
	}
	return manager.Run(ctx, cfg, o.Manager, log)
}

var assetsDir string

func controlplaneAssets() string { return assetsDir }

// cluster starts a local control plane, or connects to the one o.Kubeconfig names and installs
// the CRDs there. It returns a config, a kubeconfig path for users and a stop function.
func cluster(o Options, out io.Writer) (*rest.Config, string, func(), error) {
	crds, err := crd.CRDs()
	if err != nil {
		return nil, "", nil, err
	}
	if o.Kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		if err != nil {
			return nil, "", nil, fmt.Errorf("reading kubeconfig %s: %w", o.Kubeconfig, err)
		}
		fmt.Fprintf(out, "installing %d CRDs into the cluster of %s\n", len(crds), o.Kubeconfig)
		if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: crds}); err != nil {
			return nil, "", nil, fmt.Errorf("installing CRDs: %w", err)
		}
		return cfg, o.Kubeconfig, func() {}, nil
	}

	dataDir, cleanup := o.DataDir, func() {}
	if dataDir == "" {
		tmp, err := os.MkdirTemp("", "metalhub-dev-")
		if err != nil {
			return nil, "", nil, err
		}
		dataDir, cleanup = tmp, func() { _ = os.RemoveAll(tmp) }
	} else if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, "", nil, fmt.Errorf("creating data dir: %w", err)
	}
	fmt.Fprintf(out, "starting kube-apiserver and etcd (data in %s)\n", dataDir)
	cp, err := controlplane.Start(controlplane.Options{DataDir: dataDir})
	if err != nil {
		cleanup()
		return nil, "", nil, err
	}
	assetsDir = cp.AssetsDir
	stop := func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(out, "stopping control plane: %v\n", err)
		}
		cleanup()
	}
	kubeconfig := filepath.Join(dataDir, "kubeconfig")
	if err := cp.WriteAdminKubeconfig(kubeconfig); err != nil {
		stop()
		return nil, "", nil, err
	}
	return cp.Config, kubeconfig, stop, nil
}

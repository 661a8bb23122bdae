package suite

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/testenv"
)

// Manager is a controller manager on the suite's control plane, running until Stop: a process
// of the binary, which a suite may stop and start again as a process is killed and restarted.
type Manager struct {
	ctrl.Manager
	cancel context.CancelFunc
	done   chan struct{}
}

// StartManager makes a manager on env with o (metalhub's scheme and no metrics listener unless
// o says otherwise), lets setup register the controllers, as the binary does, and starts it.
func StartManager(env *testenv.Env, o ctrl.Options, setup func(ctx context.Context, mgr ctrl.Manager) error) (*Manager, error) {
	if o.Scheme == nil {
		o.Scheme = scheme.New()
	}
	if o.Metrics.BindAddress == "" {
		o.Metrics = metricsserver.Options{BindAddress: "0"}
	}
	mgr, err := ctrl.NewManager(env.Config, o)
	if err != nil {
		return nil, fmt.Errorf("making the manager: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := setup(ctx, mgr); err != nil {
		cancel()
		return nil, err
	}
	m := &Manager{Manager: mgr, cancel: cancel, done: make(chan struct{})}
	go func() { _ = mgr.Start(ctx); close(m.done) }()
	return m, nil
}

// Stop stops the manager and waits until it has.
func (m *Manager) Stop() {
	m.cancel()
	<-m.done
}

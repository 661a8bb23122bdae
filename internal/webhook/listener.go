package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
)

// ListenerServer serves the webhooks registered with a controller-runtime webhook server on a
// listener bound beforehand: that server binds its own port, and takes 0 for 9443.
type ListenerServer struct {
	*ctrlwebhook.DefaultServer
	ln      net.Listener
	started atomic.Bool
}

// NewListenerServer serves what srv (controller-runtime's server, from NewServer) is given on ln.
func NewListenerServer(srv ctrlwebhook.Server, ln net.Listener) (*ListenerServer, error) {
	def, ok := srv.(*ctrlwebhook.DefaultServer)
	if !ok {
		return nil, fmt.Errorf("webhook server is a %T, not controller-runtime's", srv)
	}
	if def.Options.ClientCAName != "" {
		return nil, errors.New("webhook client certificates are not supported")
	}
	return &ListenerServer{DefaultServer: def, ln: ln}, nil
}

// Start serves TLS as controller-runtime's server does: its TLS options, the certificate from
// the certificate directory, reloaded when it changes.
func (s *ListenerServer) Start(ctx context.Context) error {
	cfg := &tls.Config{NextProtos: []string{"h2"}}
	for _, op := range s.Options.TLSOpts {
		op(cfg)
	}
	if cfg.GetCertificate == nil {
		certName, keyName := s.Options.CertName, s.Options.KeyName
		if certName == "" {
			certName = "tls.crt"
		}
		if keyName == "" {
			keyName = "tls.key"
		}
		w, err := certwatcher.New(filepath.Join(s.Options.CertDir, certName), filepath.Join(s.Options.CertDir, keyName))
		if err != nil {
			return fmt.Errorf("webhook server: loading its certificate: %w", err)
		}
		cfg.GetCertificate = w.GetCertificate
		go func() {
			if err := w.Start(ctx); err != nil {
				ctrl.Log.WithName("webhook").Error(err, "certificate watcher stopped")
			}
		}()
	}
	shutdown := time.Minute
	srv := &ctrlmanager.Server{Name: "webhook", Listener: tls.NewListener(s.ln, cfg), Server: &http.Server{
		Handler: s.WebhookMux(), MaxHeaderBytes: 1 << 20, IdleTimeout: 90 * time.Second, ReadHeaderTimeout: 32 * time.Second,
	}}
	srv.ShutdownTimeout = &shutdown
	s.started.Store(true)
	return srv.Start(ctx)
}

// StartedChecker passes once the server completes a TLS handshake.
func (s *ListenerServer) StartedChecker() healthz.Checker {
	return func(*http.Request) error {
		if !s.started.Load() {
			return errors.New("webhook server has not been started yet")
		}
		d := &net.Dialer{Timeout: 10 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", s.ln.Addr().String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only whether it answers
		if err != nil {
			return fmt.Errorf("webhook server is not reachable: %w", err)
		}
		if err := conn.Close(); err != nil {
			return fmt.Errorf("webhook server is not reachable: closing connection: %w", err)
		}
		return nil
	}
}

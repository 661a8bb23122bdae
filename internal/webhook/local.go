package webhook

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	webhookconfig "github.com/metalhub/metalhub/config/webhook"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/scheme"
)

// LocalConfigurationName names the ValidatingWebhookConfiguration InstallLocal writes;
// LocalMutatingConfigurationName the MutatingWebhookConfiguration.
const (
	LocalConfigurationName         = "metalhub-local-validating-webhook-configuration"
	LocalMutatingConfigurationName = "metalhub-local-mutating-webhook-configuration"
)

// LocalConfiguration is the generated webhook configuration (config/webhook) pointed at a
// server the API server reaches directly at baseURL (https://host:port) and trusts with caPEM,
// instead of at the in-cluster Service.
func LocalConfiguration(baseURL string, caPEM []byte) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	cfg, err := webhookconfig.ValidatingWebhookConfiguration()
	if err != nil {
		return nil, err
	}
	cfg.Name = LocalConfigurationName
	for i := range cfg.Webhooks {
		if err := localClient(&cfg.Webhooks[i].ClientConfig, cfg.Webhooks[i].Name, baseURL, caPEM); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// LocalMutatingConfiguration is LocalConfiguration's mutating counterpart.
func LocalMutatingConfiguration(baseURL string, caPEM []byte) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	cfg, err := webhookconfig.MutatingWebhookConfiguration()
	if err != nil {
		return nil, err
	}
	cfg.Name = LocalMutatingConfigurationName
	for i := range cfg.Webhooks {
		if err := localClient(&cfg.Webhooks[i].ClientConfig, cfg.Webhooks[i].Name, baseURL, caPEM); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// localClient points a webhook's client configuration at baseURL instead of the Service.
func localClient(cc *admissionregistrationv1.WebhookClientConfig, name, baseURL string, caPEM []byte) error {
	if len(caPEM) == 0 {
		return fmt.Errorf("no CA certificate for the local webhook server")
	}
	if cc.Service == nil || cc.Service.Path == nil {
		return fmt.Errorf("webhook %s has no service path", name)
	}
	url := strings.TrimSuffix(baseURL, "/") + *cc.Service.Path
	*cc = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
	return nil
}

// InstallLocal creates or updates LocalConfiguration and LocalMutatingConfiguration on the API
// server of c: for `metalhub dev` and tests, whose API server runs beside the operator. In a
// cluster config/webhook or the chart install the configurations, and cert-manager injects the
// CA. The mutating one goes first: the validating webhooks refuse what it has not labelled.
func InstallLocal(ctx context.Context, c client.Client, baseURL string, caPEM []byte) error {
	mut, err := LocalMutatingConfiguration(baseURL, caPEM)
	if err != nil {
		return err
	}
	if err := createOrUpdate(ctx, c, mut, &admissionregistrationv1.MutatingWebhookConfiguration{},
		func(got *admissionregistrationv1.MutatingWebhookConfiguration) { got.Webhooks = mut.Webhooks }); err != nil {
		return err
	}
	val, err := LocalConfiguration(baseURL, caPEM)
	if err != nil {
		return err
	}
	return createOrUpdate(ctx, c, val, &admissionregistrationv1.ValidatingWebhookConfiguration{},
		func(got *admissionregistrationv1.ValidatingWebhookConfiguration) { got.Webhooks = val.Webhooks })
}

func createOrUpdate[T client.Object](ctx context.Context, c client.Client, want, got T, set func(T)) error {
	switch err := c.Get(ctx, client.ObjectKeyFromObject(want), got); {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, want); err != nil {
			return fmt.Errorf("creating the webhook configuration %s: %w", want.GetName(), err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading the webhook configuration %s: %w", want.GetName(), err)
	}
	set(got)
	if err := c.Update(ctx, got); err != nil {
		return fmt.Errorf("updating the webhook configuration %s: %w", want.GetName(), err)
	}
	return nil
}

// UninstallLocal deletes LocalConfiguration and LocalMutatingConfiguration, if there are: until
// the webhook server answers again, the API server would refuse every write the webhooks check
// (they fail closed).
func UninstallLocal(ctx context.Context, c client.Client) error {
	for _, obj := range []client.Object{
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: LocalConfigurationName}},
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: LocalMutatingConfigurationName}},
	} {
		if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the webhook configuration %s: %w", obj.GetName(), err)
		}
	}
	return nil
}

// WaitActive waits until the API server of c calls the webhooks and they answer: the API server
// picks up a new webhook configuration a moment after it is written, and until then admits
// everything. It sends a dry-run ServerClaim with a selector only the webhook refuses.
func WaitActive(ctx context.Context, c client.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	probe := &metalv1alpha1.ServerClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, GenerateName: "metalhub-webhook-probe-"},
		Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOff, Image: "probe", ServerSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "probe", Operator: metav1.LabelSelectorOpIn}}}},
	}
	var last error
	for {
		err := c.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		if apierrors.IsInvalid(err) && strings.Contains(err.Error(), "spec.serverSelector.matchExpressions[0].values") {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("a claim with an invalid selector was admitted")
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("the admission webhooks did not become active: %w", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// LocalURL is the base URL under which an API server on this machine reaches a server run with o.
func LocalURL(o Options) string {
	host := o.Host
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "https://" + net.JoinHostPort(host, strconv.Itoa(o.Port))
}

// StartLocal serves only the webhooks (no controllers) for the API server of cfg, which must
// run on this machine, until ctx is done: it prepares o's certificate directory (a self-signed
// CA when it is empty), starts the server, waits until it answers and installs
// LocalConfiguration. For tests and tools that need admission without the operator; the
// operator serves the webhooks from its own manager (internal/manager). Port 0 takes a free
// port. The returned channel yields the server's result once ctx is done.
func StartLocal(ctx context.Context, cfg *rest.Config, o Options, log logr.Logger) (<-chan error, error) {
	// Our own listener: port 0 gets a free port, and nothing can take it before we serve.
	ln, err := net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
	if err != nil {
		return nil, fmt.Errorf("listening for the webhooks: %w", err)
	}
	o.Port = ln.Addr().(*net.TCPAddr).Port
	def, ca, err := NewServer(o, log)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	srv, err := NewListenerServer(def, ln)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme.New(), Logger: log, WebhookServer: srv,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		// The writer quota counts VidraResources from the cache: without their manifests.
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: manifests.CacheByObject()},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the webhook manager: %w", err)
	}
	if err := Setup(mgr, o); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	started := srv.StartedChecker()
	for {
		if err := started(&http.Request{}); err == nil {
			break
		}
		select {
		case err := <-done:
			return nil, fmt.Errorf("webhook server stopped before it served: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, err
	}
	if err := InstallLocal(ctx, c, LocalURL(o), ca); err != nil {
		return nil, err
	}
	if err := WaitActive(ctx, c, 30*time.Second); err != nil {
		return nil, err
	}
	return done, nil
}

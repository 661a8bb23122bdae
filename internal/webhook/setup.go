// Package webhook is metalhub's admission for what the CRD schema cannot say:
// unique Endpoint MAC addresses (needs a look at the other Endpoints), ServerClaim label
// selectors (metav1.LabelSelector's fields cannot carry schema rules), InfrahubSync target
// dates (the sync controller's own parser), for InfrahubSyncs and VidraResources the writer's
// own rights (SubjectAccessReviews: rights.Admission) after binding a sync that names no
// credentials Secret to the one labelled for its host (the one mutating webhook,
// InfrahubSyncCredentialsBinder), and for the firmware and settings kinds
// that the writer may read the Secrets they name (FirmwareSecretsValidator). Everything the
// schema can say — BMCSecret immutability, URL shapes, names — is in the CRDs as patterns and
// CEL rules, which need no webhook at runtime. One validator per file; the +kubebuilder:webhook markers beside them
// generate config/webhook/manifests.yaml.
//
// The server runs in every replica (admission needs no leadership). Its certificate comes from
// a directory: in a cluster a mounted Secret that cert-manager keeps renewed (the server reloads
// it), locally a self-signed CA and certificate generated at start when the directory is empty.
package webhook

import (
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery"
	"github.com/metalhub/metalhub/internal/webhook/rights"
)

// DefaultCertDir is where the server looks for tls.crt and tls.key (controller-runtime's
// default; config/default mounts the cert-manager Secret there).
const DefaultCertDir = "/tmp/k8s-webhook-server/serving-certs"

// DefaultPort is the port the server listens on.
const DefaultPort = 9443

// Options configure the webhook server.
type Options struct {
	// Enabled serves the validating webhooks. The API server calls them only once a
	// ValidatingWebhookConfiguration points at this server (config/webhook, the chart, or
	// InstallLocal).
	Enabled bool
	// Host is the address to listen on; empty means every interface.
	Host string
	// Port to listen on.
	Port int
	// CertDir holds tls.crt and tls.key; when it holds neither, a self-signed CA (ca.crt) and a
	// serving certificate for CertHosts are generated into it.
	CertDir string
	// CertHosts are the DNS names and IPs a generated certificate is valid for; localhost,
	// 127.0.0.1, ::1 and Host are always included.
	CertHosts []string
	// Delivery are the delivery family's options, whose default ServiceAccount, operator
	// identity and Secret namespaces the admission of InfrahubSyncs and VidraResources follows
	// (the manager copies its own).
	Delivery delivery.Options
}

// DefaultOptions leave the webhooks off (the cluster configuration turns them on).
func DefaultOptions() Options {
	return Options{Port: DefaultPort, CertDir: DefaultCertDir}
}

// BindFlags registers the webhook flags on fs.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.Enabled, "enable-webhooks", o.Enabled, "Serve the admission webhooks (unique Endpoint MACs, ServerClaim selectors, InfrahubSync target dates, "+
		"an InfrahubSync naming no credentials Secret bound to the one labelled infrahub-api-url for its host, "+
		"what a writer had the rights for sealed (infrahub.operators.com/seal, which delivery requires before it honours a writer-named ServiceAccount or admitted Secret), "+
		"and that whoever creates, updates or deletes an InfrahubSync or VidraResource may do what it makes the operator do). "+
		"Without them delivery acts only as the admin's identity (--delivery-default-service-account): a ServiceAccount a writer "+
		"names is refused (AdmissionRequired). config/default and the chart turn this on.")
	fs.IntVar(&o.Port, "webhook-port", o.Port, "Port the admission webhook server listens on.")
	fs.StringVar(&o.CertDir, "webhook-cert-dir", o.CertDir, "Directory with the webhook server's tls.crt and tls.key (a mounted Secret); when it has neither, a self-signed CA and certificate for localhost are generated into it (local runs).")
}

// NewServer prepares the certificate directory (see EnsureCerts) and returns the webhook server,
// with the CA certificate clients must trust when one is in the directory.
func NewServer(o Options, log logr.Logger) (ctrlwebhook.Server, []byte, error) {
	hosts := append([]string{"localhost", "127.0.0.1", "::1"}, o.CertHosts...)
	if ip := net.ParseIP(o.Host); o.Host != "" && (ip == nil || !ip.IsUnspecified()) {
		hosts = append(hosts, o.Host)
	}
	ca, generated, err := EnsureCerts(o.CertDir, hosts, time.Now())
	if err != nil {
		return nil, nil, fmt.Errorf("preparing the webhook certificate: %w", err)
	}
	if generated {
		log.Info("generated a self-signed webhook certificate; the API server must trust its CA", "dir", o.CertDir, "ca", CAFile, "hosts", hosts)
	}
	srv := ctrlwebhook.NewServer(ctrlwebhook.Options{
		Host:    o.Host,
		Port:    o.Port,
		CertDir: o.CertDir,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) {
			// HTTP/1.1 only: HTTP/2 stream resets (CVE-2023-44487) cannot exhaust the server.
			c.NextProtos = []string{"http/1.1"}
			c.MinVersion = tls.VersionTLS12
		}},
	})
	return srv, ca, nil
}

// Setup registers every validator with mgr's webhook server. All are registered whatever the
// controller families, because the webhook configuration names them all.
func Setup(mgr ctrl.Manager, o Options) error {
	if err := ctrl.NewWebhookManagedBy(mgr, &metalv1alpha1.Endpoint{}).
		WithValidator(&EndpointValidator{Reader: mgr.GetAPIReader()}).Complete(); err != nil {
		return fmt.Errorf("registering the Endpoint webhook: %w", err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &metalv1alpha1.ServerClaim{}).
		WithValidator(ServerClaimValidator{}).Complete(); err != nil {
		return fmt.Errorf("registering the ServerClaim webhook: %w", err)
	}
	access := &rights.Admission{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Options: o.Delivery}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrahubv1alpha1.InfrahubSync{}).
		WithDefaulter(InfrahubSyncDefaulter{Access: access}).
		WithValidator(InfrahubSyncValidator{Access: access, Reader: mgr.GetAPIReader()}).Complete(); err != nil {
		return fmt.Errorf("registering the InfrahubSync webhook: %w", err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrahubv1alpha1.VidraResource{}).
		WithDefaulter(VidraResourceDefaulter{Access: access}).
		WithValidator(VidraResourceValidator{Access: access}).Complete(); err != nil {
		return fmt.Errorf("registering the VidraResource webhook: %w", err)
	}
	return setupFirmware(mgr)
}

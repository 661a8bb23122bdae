package delivery

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/apply"
	"github.com/metalhub/metalhub/internal/controller/delivery/policy"
	"github.com/metalhub/metalhub/internal/controller/delivery/receiver"
	"github.com/metalhub/metalhub/internal/eventsink"
	"github.com/metalhub/metalhub/internal/infrahub"
)

// Options configure the delivery family. Flags set them (BindFlags); the reference's settings
// ConfigMap (labelled app=vidra) overrides the four settings it knows — requeueSyncAfter,
// requeueResourcesAfter, queryName, eventBasedReconcile — while it exists, and is re-read
// whenever it changes.
type Options struct {
	// Settings are the defaults the ConfigMap may override.
	Settings policy.Settings
	// SettingsNamespace is where the settings ConfigMap is looked for; "" means the operator's
	// namespace (default outside a cluster). Never every namespace: whoever may create a
	// ConfigMap there sets how every sync runs.
	SettingsNamespace string
	// OperatorNamespace is the operator's own namespace, when it runs in one (the manager sets
	// it): its Secrets are read there by default, and nothing is ever applied there.
	OperatorNamespace string
	// SecretsNamespace is where Infrahub credentials and cluster kubeconfig Secrets are looked
	// for: "" means the operator's namespace, AnyNamespace every namespace (the operator's
	// first).
	SecretsNamespace string
	// DefaultServiceAccount is the ServiceAccount ("name" in each destination namespace, or
	// "namespace/name") VidraResources that name none act as.
	DefaultServiceAccount string
	// AllowOperatorIdentity lets a VidraResource with no ServiceAccount (and no default) apply
	// as the operator itself; off, such a VidraResource is refused (NoServiceAccount), and the
	// admission webhook admits one only from a writer who may impersonate the operator.
	AllowOperatorIdentity bool
	// AdmissionWebhook says this operator serves the admission webhooks (--enable-webhooks; the
	// manager sets it). A ServiceAccount a writer names in spec.destination, other than the
	// default, is acted as only while it is set and a ValidatingWebhookConfiguration sends every
	// create, update and delete of both kinds to this operator (checked at the first such use
	// and each minute after); otherwise such objects fail with AdmissionRequired.
	AdmissionWebhook bool
	// admission replaces that check (tests).
	admission func(context.Context) error
	// assumeSealed, for tests that run no webhook, treats every object as sealed by admission.
	assumeSealed bool
	// inventoryChunkBytes replaces DefaultInventoryChunkBytes (tests, to see chunks with
	// few objects).
	inventoryChunkBytes int
	// InsecureKubeconfig accepts kubeconfigs that run plugins or read files in the operator's pod.
	InsecureKubeconfig bool
	// AllowPlainHTTPCredentials sends Infrahub credentials to any http:// URL; by default only
	// to loopback and in-cluster Service hosts (plainHTTPByDefault), and a sync with another
	// http:// URL and credentials fails (PlainHTTPCredentials) and sends nothing.
	AllowPlainHTTPCredentials bool
	// TrustAdmittedCredentials honours the admitted-credentials annotation on InfrahubSyncs (and
	// admitted-kubeconfig on VidraResources): a Secret named there serves the object although it
	// does not name it. Only where the admission webhook runs, which admits such an annotation
	// only from a writer allowed to read that Secret; otherwise whoever edits a sync could name
	// any Secret. The manager turns it on with --enable-webhooks.
	TrustAdmittedCredentials bool
	// Limits bound each sync's artifacts, manifest bytes and pass time.
	Limits policy.Limits
	// InfrahubTimeout bounds every request to Infrahub.
	InfrahubTimeout time.Duration
	// ClusterTimeout bounds every request to a destination cluster, and how long a pass waits
	// for a new watch on it to fill.
	ClusterTimeout time.Duration
	// Policy says what an artifact may create.
	Policy policy.Policy
	// SyncConcurrency is how many InfrahubSyncs are reconciled at once.
	SyncConcurrency int
	// SyncConcurrencyPerHost is how many of those may query one Infrahub host at once (0: half
	// of SyncConcurrency, rounded up), so a slow host leaves workers for the others.
	SyncConcurrencyPerHost int
	// ResourceConcurrency is how many VidraResources are reconciled at once.
	ResourceConcurrency int
	// DownloadConcurrency is how many artifacts one sync pass downloads at once.
	DownloadConcurrency int
	// HealthPoll is how often a VidraResource whose objects are still progressing is looked at.
	HealthPoll time.Duration
	// PruneMaxFraction is the largest fraction of a sync's VidraResources one pass may delete
	// on its own; a pass that would delete more holds until confirmed or agreed by a second
	// answer (1 disables the guard). An InfrahubSync may lower it for itself.
	PruneMaxFraction float64
	// PruneAutoRelease lets a held prune proceed when a query a sync interval later returns the
	// same answer. Off, only the confirm-prune annotation releases it: a compromised or
	// misconfigured Infrahub answers the same twice.
	PruneAutoRelease bool
	// Events, if set, records the family's events; setup otherwise starts a provider of its own.
	Events *eventsink.Provider
	// ReceiverBindAddress is where the Infrahub webhook receiver listens; "" or "0" is off. The
	// manager binds it and sets Receiver.Listener.
	ReceiverBindAddress string
	// ReceiverSecret names the Secret of the receiver's shared keys, "name" in the operator's
	// namespace or "namespace/name".
	ReceiverSecret string
	// Receiver configures the receiver; its Listener set turns it on.
	Receiver receiver.Options
	// PreviewInterval is how often the open proposed changes of a sync with spec.preview are
	// looked at.
	PreviewInterval time.Duration
}

// DefaultOptions are the reference's defaults, with timeouts it lacked (defect 8) and a policy
// that refuses RBAC and cluster-scoped kinds (defect 11).
func DefaultOptions() Options {
	return Options{
		Settings:            policy.DefaultSettings(),
		InfrahubTimeout:     infrahub.DefaultTimeout,
		ClusterTimeout:      30 * time.Second,
		SyncConcurrency:     4,
		ResourceConcurrency: 8,
		DownloadConcurrency: 4,
		HealthPoll:          apply.DefaultHealthPoll,
		PruneMaxFraction:    apply.DefaultPruneMaxFraction,
	}
}

// withDefaults fills zero fields from DefaultOptions, so a zero Options (as the manager has
// when no flag was bound) works.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.Settings.RequeueSyncAfter <= 0 {
		o.Settings.RequeueSyncAfter = d.Settings.RequeueSyncAfter
	}
	if o.Settings.RequeueResourcesAfter <= 0 {
		o.Settings.RequeueResourcesAfter = d.Settings.RequeueResourcesAfter
	}
	if o.Settings.QueryName == "" {
		o.Settings.QueryName = d.Settings.QueryName
	}
	if o.InfrahubTimeout <= 0 {
		o.InfrahubTimeout = d.InfrahubTimeout
	}
	if o.ClusterTimeout <= 0 {
		o.ClusterTimeout = d.ClusterTimeout
	}
	if o.SyncConcurrency <= 0 {
		o.SyncConcurrency = d.SyncConcurrency
	}
	if o.SyncConcurrencyPerHost <= 0 || o.SyncConcurrencyPerHost > o.SyncConcurrency {
		o.SyncConcurrencyPerHost = policy.PerHostDefault(o.SyncConcurrency)
	}
	if o.ResourceConcurrency <= 0 {
		o.ResourceConcurrency = d.ResourceConcurrency
	}
	if o.DownloadConcurrency <= 0 {
		o.DownloadConcurrency = d.DownloadConcurrency
	}
	if o.HealthPoll <= 0 {
		o.HealthPoll = d.HealthPoll
	}
	if o.PreviewInterval <= 0 {
		o.PreviewInterval = DefaultPreviewInterval
	}
	o.Limits = o.Limits.WithDefaults()
	if o.PruneMaxFraction <= 0 {
		o.PruneMaxFraction = d.PruneMaxFraction
	}
	o.Policy.OperatorNamespace = o.OperatorNamespace
	if o.ReceiverSecret != "" && o.Receiver.Secret.Name == "" {
		ns, name, found := strings.Cut(o.ReceiverSecret, "/")
		if !found {
			ns, name = InventoryNamespace(o), ns
		}
		o.Receiver.Secret = types.NamespacedName{Namespace: ns, Name: name}
	}
	return o
}

// BindFlags registers the delivery flags on fs, with o's values (or the defaults) as defaults.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	*o = o.withDefaults()
	if o.Limits.MaxObjectsPerWriter == 0 {
		o.Limits.MaxObjectsPerWriter = policy.DefaultMaxObjectsPerWriter
	}
	fs.DurationVar(&o.Settings.RequeueSyncAfter, "delivery-requeue-sync-after", o.Settings.RequeueSyncAfter,
		"How often an InfrahubSync queries Infrahub (ConfigMap key requeueSyncAfter overrides).")
	fs.DurationVar(&o.Settings.RequeueResourcesAfter, "delivery-requeue-resources-after", o.Settings.RequeueResourcesAfter,
		"How often a VidraResource checks its objects without an event (ConfigMap key requeueResourcesAfter overrides).")
	fs.StringVar(&o.Settings.QueryName, "delivery-query-name", o.Settings.QueryName,
		"Name of the stored Infrahub query that lists artifacts (ConfigMap key queryName overrides).")
	fs.BoolVar(&o.Settings.EventBasedReconcile, "delivery-event-based-reconcile", o.Settings.EventBasedReconcile,
		"Restore managed objects as soon as they are changed or deleted, for every VidraResource (ConfigMap key eventBasedReconcile overrides).")
	fs.StringVar(&o.SettingsNamespace, "delivery-settings-namespace", o.SettingsNamespace,
		"Namespace of the settings ConfigMap labelled app=vidra; empty means the operator's namespace (default outside a cluster). "+
			"Only there: a ConfigMap anywhere else is ignored, and two there are a conflict (Warning events) under which the flags apply.")
	fs.StringVar(&o.SecretsNamespace, "delivery-secrets-namespace", o.SecretsNamespace,
		"Namespace of the Infrahub credentials and cluster kubeconfig Secrets; empty means the operator's namespace, "+
			"'*' any namespace (the operator's first): then anyone who can create a Secret anywhere can redirect a sync.")
	fs.StringVar(&o.DefaultServiceAccount, "delivery-default-service-account", o.DefaultServiceAccount,
		"ServiceAccount that VidraResources naming none in spec.destination.serviceAccountName act as (impersonated): "+
			"'name' in each destination namespace, or 'namespace/name'; empty: none (see --delivery-allow-operator-identity; "+
			"config/default and the chart set metalhub-system/metalhub-delivery, which they create with the delivery-apply rights). "+
			"Any other ServiceAccount a writer names is acted as only with --enable-webhooks and the webhook configuration installed "+
			"(admission checks the writer may impersonate it); without, such objects fail (AdmissionRequired) and nothing is applied.")
	fs.BoolVar(&o.AllowOperatorIdentity, "delivery-allow-operator-identity", o.AllowOperatorIdentity,
		"Let VidraResources that name no ServiceAccount, with no default, apply as the operator itself (bounded by its "+
			"delivery-apply role). Off: they are refused (NoServiceAccount), and admission requires the writer to be allowed "+
			"to impersonate the operator.")
	fs.BoolVar(&o.InsecureKubeconfig, "delivery-insecure-kubeconfig", o.InsecureKubeconfig,
		"Accept cluster kubeconfigs with exec or auth-provider plugins, tokenFile or certificate and key file paths "+
			"(they run programs or read files in the operator's pod).")
	fs.BoolVar(&o.AllowPlainHTTPCredentials, "delivery-allow-plain-http-credentials", o.AllowPlainHTTPCredentials,
		"Send Infrahub credentials (API token, login) to any plain http:// URL. Off: only to loopback (127.0.0.0/8, ::1, localhost) "+
			"and in-cluster Services (*.svc, *.svc.cluster.local); a sync with another http:// URL and a credentials Secret fails "+
			"(PlainHTTPCredentials) and sends nothing.")
	fs.BoolVar(&o.TrustAdmittedCredentials, "delivery-trust-admitted-credentials", o.TrustAdmittedCredentials,
		"Honour the annotations infrahub.operators.com/admitted-credentials (InfrahubSync) and admitted-kubeconfig "+
			"(VidraResource): the Secret they name serves the object although it does not name it. Only with the "+
			"admission webhook, which admits them only from a writer allowed to read that Secret; --enable-webhooks turns this on.")
	fs.DurationVar(&o.InfrahubTimeout, "delivery-infrahub-timeout", o.InfrahubTimeout, "Timeout of each request to Infrahub.")
	fs.IntVar(&o.Limits.MaxArtifacts, "delivery-max-artifacts-per-sync", o.Limits.MaxArtifacts,
		"Most artifacts one sync's query may name; a larger answer fails the sync (TooManyArtifacts) and changes nothing. "+
			"Annotation infrahub.operators.com/max-artifacts lowers it per sync.")
	fs.Int64Var(&o.Limits.MaxManifestBytes, "delivery-max-manifest-bytes", o.Limits.MaxManifestBytes,
		"Largest artifact downloaded, in bytes; a larger one fails its VidraResource's delivery.")
	fs.Int64Var(&o.Limits.MaxSyncBytes, "delivery-max-sync-bytes", o.Limits.MaxSyncBytes,
		"Most manifest bytes one sync's VidraResources may hold together (SyncTooLarge past it). "+
			"Annotation infrahub.operators.com/max-sync-bytes lowers it per sync.")
	fs.IntVar(&o.Limits.ApplyWindow, "delivery-sync-apply-window", o.Limits.ApplyWindow,
		"Most VidraResources of one InfrahubSync written and not yet applied; a sync with more to deliver writes the rest as those apply, "+
			"so one huge sync never queues its thousand applies ahead of every other tenant's.")
	fs.IntVar(&o.Limits.MaxObjectsPerWriter, "delivery-max-objects-per-writer", o.Limits.MaxObjectsPerWriter,
		"Most InfrahubSyncs, and apart the most VidraResources, one writer (the user creating them) may have; "+
			"a create past it is refused by the admission webhook (--enable-webhooks). The operator's own VidraResources "+
			"are bounded per sync instead. 0: no bound.")
	fs.DurationVar(&o.Limits.PassTimeout, "delivery-sync-pass-timeout", o.Limits.PassTimeout,
		"Longest sync pass (query and downloads); one cut short reads PassDeadline, keeps what it delivered and goes on at the next pass.")
	fs.DurationVar(&o.ClusterTimeout, "delivery-cluster-timeout", o.ClusterTimeout, "Timeout of each request to a destination cluster.")
	fs.Var(&listFlag{&o.Policy.AllowedKinds}, "delivery-allowed-kinds",
		"Comma-separated kinds artifacts may create, as Kind.group (Deployment.apps) or Kind for the core group; "+
			"'*' allows every namespaced kind but RBAC and Secret. Empty: every namespaced kind except RBAC and Secret. "+
			"RBAC, Secret and cluster-scoped kinds are only allowed when named here explicitly (e.g. Secret, "+
			"ClusterRoleBinding.rbac.authorization.k8s.io): a rendered manifest is readable wherever VidraResources are.")
	fs.Var(&listFlag{&o.Policy.AllowedNamespaces}, "delivery-allowed-namespaces",
		"Comma-separated namespaces artifacts may create objects in; empty: only each VidraResource's "+
			"spec.destination.namespace; '*': any. Never the operator's own namespace.")
	fs.IntVar(&o.SyncConcurrency, "delivery-sync-concurrency", o.SyncConcurrency, "InfrahubSyncs reconciled at once.")
	fs.IntVar(&o.SyncConcurrencyPerHost, "delivery-sync-concurrency-per-host", o.SyncConcurrencyPerHost,
		"Sync passes that may query one Infrahub host at once; a pass finding its host full is queued again behind the others. "+
			"0: half of --delivery-sync-concurrency, rounded up.")
	fs.IntVar(&o.ResourceConcurrency, "delivery-resource-concurrency", o.ResourceConcurrency, "VidraResources reconciled at once.")
	fs.IntVar(&o.DownloadConcurrency, "delivery-download-concurrency", o.DownloadConcurrency, "Artifacts one sync downloads at once.")
	fs.BoolVar(&o.PruneAutoRelease, "delivery-prune-auto-release", o.PruneAutoRelease,
		"Let a prune the guard held proceed when a query at least nine tenths of a sync interval later returns the same answer. "+
			"Off: only the annotation "+infrahubv1alpha1.ConfirmPruneAnnotation+" with the token PruneHeld names releases it "+
			"(an Infrahub that is compromised or misconfigured gives the same answer twice).")
	fs.Float64Var(&o.PruneMaxFraction, "delivery-prune-max-fraction", o.PruneMaxFraction,
		"Largest fraction (0-1] of an InfrahubSync's VidraResources, and of the objects they applied (counted from their "+
			"inventories, re-issued artifacts that drop objects included), one pass may delete; a pass that would delete more "+
			"deletes nothing and holds (PruneHeld) until the sync is annotated "+infrahubv1alpha1.ConfirmPruneAnnotation+"=<token> "+
			"or a query a sync interval later returns the same answer. 1 disables the guard; annotation "+
			infrahubv1alpha1.PruneMaxFractionAnnotation+" lowers it per sync.")
	fs.StringVar(&o.ReceiverBindAddress, "delivery-receiver-bind-address", o.ReceiverBindAddress,
		"Address (host:port) of the Infrahub webhook receiver ("+receiver.Path+"): a signed artifact event wakes the "+
			"InfrahubSyncs delivering that artifact at once. Empty or 0: off; polling alone.")
	fs.StringVar(&o.ReceiverSecret, "delivery-receiver-secret", o.ReceiverSecret,
		"Secret holding the shared key of Infrahub's standard webhook ('name' in the operator's namespace, or 'namespace/name'); "+
			"every data entry is a key (two while one is rotated). Required with --delivery-receiver-bind-address.")
	fs.DurationVar(&o.Receiver.Interval, "delivery-receiver-interval", receiver.DefaultInterval,
		"Least time between two wakes of one InfrahubSync by webhook deliveries: a burst of events costs one pass per sync per interval.")
	fs.DurationVar(&o.Receiver.Tolerance, "delivery-receiver-tolerance", receiver.DefaultTolerance,
		"How far a delivery's webhook-timestamp may be from now; older or later deliveries are refused (401), and message ids are "+
			"remembered this long to refuse replays.")
	fs.DurationVar(&o.PreviewInterval, "delivery-preview-interval", DefaultPreviewInterval,
		"How often the open Infrahub proposed changes of an InfrahubSync with spec.preview.proposedChanges are previewed; "+
			"a comment is written only when its text changes.")
	fs.DurationVar(&o.HealthPoll, "delivery-health-poll", o.HealthPoll, "How often a VidraResource whose applied objects are still progressing (kstatus InProgress) is looked at again.")
}

// listFlag is a comma-separated list flag.
type listFlag struct{ list *[]string }

func (f *listFlag) String() string {
	if f.list == nil {
		return ""
	}
	return strings.Join(*f.list, ",")
}

func (f *listFlag) Set(v string) error {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	*f.list = out
	return nil
}

// validate rejects options that cannot work, at start-up rather than on the first pass.
func (o Options) validate() error {
	if err := o.Policy.Validate(); err != nil {
		return fmt.Errorf("delivery policy: %w", err)
	}
	if sa := o.DefaultServiceAccount; sa != "" {
		ns, name, found := strings.Cut(sa, "/")
		if !found {
			ns, name = "", ns
		}
		if (ns != "" && len(validation.IsDNS1123Label(ns)) > 0) || len(validation.IsDNS1123Subdomain(name)) > 0 {
			return fmt.Errorf("--delivery-default-service-account %q: want name or namespace/name", sa)
		}
	}
	if o.PruneMaxFraction < 0 || o.PruneMaxFraction > 1 {
		return fmt.Errorf("--delivery-prune-max-fraction %g: want a fraction in (0, 1]", o.PruneMaxFraction)
	}
	if o.Receiver.Listener != nil || o.ReceiverBindAddress != "" && o.ReceiverBindAddress != "0" {
		sec := o.Receiver.Secret
		if sec.Name == "" || len(validation.IsDNS1123Label(sec.Namespace)) > 0 || len(validation.IsDNS1123Subdomain(sec.Name)) > 0 {
			return fmt.Errorf("--delivery-receiver-secret %q: the receiver needs its shared key's Secret, as name or namespace/name", o.ReceiverSecret)
		}
	}
	if o.Settings.RequeueSyncAfter < policy.MinInterval || o.Settings.RequeueResourcesAfter < policy.MinInterval {
		return fmt.Errorf("delivery requeue intervals must be at least %s", policy.MinInterval)
	}
	return nil
}

// InventoryNamespace is where the VidraResources' inventories are kept: the operator's own
// namespace, which tenants cannot write (the identity recorded there is acted as); "default"
// only outside a cluster.
func InventoryNamespace(o Options) string {
	if o.OperatorNamespace != "" {
		return o.OperatorNamespace
	}
	return metav1.NamespaceDefault
}

// settingsNamespace is the one namespace the settings ConfigMap is read from.
func settingsNamespace(o Options) string {
	switch {
	case o.SettingsNamespace != "":
		return o.SettingsNamespace
	case o.OperatorNamespace != "":
		return o.OperatorNamespace
	}
	return metav1.NamespaceDefault
}

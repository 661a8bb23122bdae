package target

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// kubeconfigKey is the key of a cluster Secret holding the kubeconfig.
const kubeconfigKey = "kubeconfig"

// localHosts are the destination.server hosts that mean "this cluster".
var localHosts = map[string]bool{
	"kubernetes.default.svc":               true,
	"kubernetes.default.svc.cluster.local": true,
	"kubernetes.default":                   true,
	"kubernetes":                           true,
}

// IsLocal reports whether a destination.server names the cluster the operator runs in.
func IsLocal(server string) bool {
	if strings.TrimSpace(server) == "" {
		return true
	}
	u, err := url.Parse(server)
	return err == nil && localHosts[strings.ToLower(u.Hostname())]
}

// ClusterRegistry hands out one target per destination cluster. A remote cluster's target is
// built from the kubeconfig in its Secret, with its own RESTMapper (the local one knows nothing
// of a remote cluster's kinds, defect 9), and rebuilt when the Secret's content changes, so a
// rotated credential is used on the next pass.
type ClusterRegistry struct {
	scheme      *runtime.Scheme
	localCfg    *rest.Config
	localHTTP   *http.Client
	localMapper meta.RESTMapper
	secrets     client.Reader // cache of Secrets labelled cluster-kubeconfig
	scope       SecretScope
	// insecure lets kubeconfigs run plugins and read files (--delivery-insecure-kubeconfig).
	insecure bool
	timeout  time.Duration
	onEvent  func(ObjectEvent)
	log      logr.Logger

	started chan struct{}
	ctx     context.Context // the manager's, once started

	// Idle is how long a remote cluster's clients and watches live unused.
	Idle time.Duration

	mu       sync.Mutex
	now      func() time.Time
	local    *Target
	remotes  map[string]*Target   // by host[:port]
	lastUsed map[string]time.Time // by host[:port]
	// impersonated targets by base id and user; rebuilt with their base
	impersonated map[string]*Target
}

// remoteIdle is how long a remote cluster's clients and watches are kept when no VidraResource
// reaches it: long beyond the periodic passes, so that a cluster in use is never torn down.
const remoteIdle = 30 * time.Minute

func NewClusterRegistry(scheme *runtime.Scheme, cfg *rest.Config, hc *http.Client, mapper meta.RESTMapper,
	secrets client.Reader, scope SecretScope, insecure bool, timeout time.Duration, onEvent func(ObjectEvent), log logr.Logger) *ClusterRegistry {
	return &ClusterRegistry{
		scheme: scheme, localCfg: cfg, localHTTP: hc, localMapper: mapper,
		secrets: secrets, scope: scope, insecure: insecure, timeout: timeout, onEvent: onEvent, log: log,
		started: make(chan struct{}), remotes: map[string]*Target{}, lastUsed: map[string]time.Time{}, impersonated: map[string]*Target{},
		Idle: remoteIdle, now: time.Now,
	}
}

// Start implements manager.Runnable: targets live as long as the manager.
func (r *ClusterRegistry) Start(ctx context.Context) error {
	r.ctx = ctx
	close(r.started)
	tick := time.NewTicker(max(r.Idle/10, time.Second))
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			r.EvictIdle()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.local != nil {
		r.local.Stop()
	}
	for _, t := range r.remotes {
		t.Stop()
	}
	return nil
}

// SetClock replaces the clock that idle eviction reads (a test moves it past Idle).
func (r *ClusterRegistry) SetClock(now func() time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = now
}

// NeedLeaderElection: targets serve the controllers, which only run as leader.
func (r *ClusterRegistry) NeedLeaderElection() bool { return true }

// get returns the target for a destination.server, for who: a remote cluster's kubeconfig
// Secret must serve who (name it or its sync, or be admitted for it).
func (r *ClusterRegistry) get(ctx context.Context, who Claimant, server string) (*Target, error) {
	select {
	case <-r.started:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if IsLocal(server) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.local == nil {
			t, err := r.NewTarget(r.ctx, "local", "", r.localCfg, r.localHTTP, r.localMapper)
			if err != nil {
				return nil, lifecycle.WithReason(infrahubv1alpha1.ReasonInternal, err)
			}
			r.local = t
		}
		return r.local, nil
	}
	key := HostKey(server)
	s, err := FindLabelledSecret(ctx, r.secrets, r.scope, SecretQuery{Key: infrahubv1alpha1.ClusterKubeconfigLabel, RawURL: server, Who: who,
		NotFound: infrahubv1alpha1.ReasonKubeconfigNotFound, NotBound: infrahubv1alpha1.ReasonKubeconfigNotBound})
	if err != nil {
		if reason, _ := lifecycle.ReasonOf(err); reason == infrahubv1alpha1.ReasonKubeconfigNotFound {
			r.drop(key, "its kubeconfig Secret is gone")
		}
		return nil, err
	}
	data := s.Data[kubeconfigKey]
	if len(data) == 0 {
		return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonKubeconfigInvalid, "Secret %s/%s has no key %q", s.Namespace, s.Name, kubeconfigKey)
	}
	sum := sha256.Sum256(data)
	fp := hex.EncodeToString(sum[:])
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastUsed[key] = r.now()
	if t := r.remotes[key]; t != nil && t.fingerprint == fp {
		return t, nil
	}
	cfg, err := RestConfigFromKubeconfig(data, r.insecure)
	if err != nil {
		return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonKubeconfigInvalid, "Secret %s/%s: %v", s.Namespace, s.Name, err)
	}
	cfg.Timeout = r.timeout
	if cfg.QPS == 0 { // as controller-runtime does: rely on the server's priority and fairness
		cfg.QPS = -1
	}
	t, err := r.NewTarget(r.ctx, key, fp, cfg, nil, nil)
	if err != nil {
		return nil, lifecycle.WithReason(infrahubv1alpha1.ReasonKubeconfigInvalid, err)
	}
	if old := r.remotes[key]; old != nil {
		r.log.Info("cluster credentials changed; reconnecting", "cluster", key, "secret", s.Namespace+"/"+s.Name)
		old.Stop()
	}
	r.remotes[key] = t
	return t, nil
}

// drop stops and forgets a remote cluster's clients and watches.
func (r *ClusterRegistry) drop(key, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropLocked(key, why)
}

func (r *ClusterRegistry) dropLocked(key, why string) {
	if t := r.remotes[key]; t != nil {
		t.Stop()
		delete(r.remotes, key)
		for k, it := range r.impersonated {
			if it.Base == t {
				delete(r.impersonated, k)
			}
		}
		r.log.Info("dropped remote cluster clients", "cluster", key, "why", why)
	}
	delete(r.lastUsed, key)
}

// EvictIdle drops the remote clusters no pass has reached for idle.
func (r *ClusterRegistry) EvictIdle() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key := range r.remotes {
		if r.now().Sub(r.lastUsed[key]) > r.Idle {
			r.dropLocked(key, "unused for "+r.Idle.String())
		}
	}
	// Impersonating clients of the local cluster too: one per ServiceAccount ever used, gone
	// with the VidraResources that named it.
	for k := range r.impersonated {
		if r.now().Sub(r.lastUsed[k]) > r.Idle {
			delete(r.impersonated, k)
			delete(r.lastUsed, k)
		}
	}
}

// RemoteClusters lists the remote clusters whose clients are kept.
func (r *ClusterRegistry) RemoteClusters() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.remotes))
}

// NewTarget builds the clients of one cluster, whose watches live as long as ctx (the
// manager's for the registry's own targets); nothing is contacted yet.
func (r *ClusterRegistry) NewTarget(ctx context.Context, key, fp string, cfg *rest.Config, hc *http.Client, mapper meta.RESTMapper) (*Target, error) {
	var err error
	if hc == nil {
		if hc, err = rest.HTTPClientFor(cfg); err != nil {
			return nil, fmt.Errorf("HTTP client for %s: %w", key, err)
		}
	}
	if mapper == nil {
		if mapper, err = apiutil.NewDynamicRESTMapper(cfg, hc); err != nil {
			return nil, fmt.Errorf("REST mapper for %s: %w", key, err)
		}
	}
	c, err := client.New(cfg, client.Options{HTTPClient: hc, Scheme: r.scheme, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", key, err)
	}
	ca, err := cache.New(cfg, cache.Options{
		HTTPClient: hc, Scheme: r.scheme, Mapper: mapper,
		// Only objects we applied; metadata only (PartialObjectMetadata), and of the managed
		// fields only our apply's (drift is judged by it).
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{manifests.ManagedByLabel: manifests.ManagedByValue}),
		DefaultTransform:     keepOwnManagedFields,
	})
	if err != nil {
		return nil, fmt.Errorf("cache for %s: %w", key, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	t := &Target{
		Key: key, fingerprint: fp, Cfg: cfg, Client: c, Mapper: mapper, cache: ca, cancel: cancel,
		Timeout: r.timeout, onEvent: r.onEvent, log: r.log.WithValues("cluster", key),
		watches: map[watchKey]*watchEntry{},
	}
	go func() {
		if err := ca.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.log.Error(err, "watch cache stopped")
		}
	}()
	return t, nil
}

// id identifies a target and the credentials it was built with: applied-object memory of one
// id is void for another.
func (t *Target) ID() string {
	if t.Base != nil {
		return t.Base.ID() + "|as=" + t.As
	}
	return t.Key + "@" + t.fingerprint
}

// ClusterID is the id of the cluster's own target, whose watches report events.
func (t *Target) ClusterID() string {
	if t.Base != nil {
		return t.Base.ID()
	}
	return t.ID()
}

// GetAs returns the target for a destination.server, for who, acting as user as ("": the operator).
func (r *ClusterRegistry) GetAs(ctx context.Context, who Claimant, server, as string) (*Target, error) {
	base, err := r.get(ctx, who, server)
	if err != nil || as == "" {
		return base, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	key := base.ID() + "|as=" + as
	r.lastUsed[key] = r.now()
	if t := r.impersonated[key]; t != nil {
		return t, nil
	}
	cfg := rest.CopyConfig(base.Cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: as}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, lifecycle.WithReason(infrahubv1alpha1.ReasonInternal, fmt.Errorf("HTTP client for %s as %s: %w", base.Key, as, err))
	}
	c, err := client.New(cfg, client.Options{HTTPClient: hc, Scheme: r.scheme, Mapper: base.Mapper})
	if err != nil {
		return nil, lifecycle.WithReason(infrahubv1alpha1.ReasonInternal, fmt.Errorf("client for %s as %s: %w", base.Key, as, err))
	}
	for k, t := range r.impersonated { // those of a replaced base (rotated credentials)
		if t.Base.Key == base.Key && t.Base != base {
			delete(r.impersonated, k)
		}
	}
	t := &Target{Key: base.Key, fingerprint: base.fingerprint, Cfg: cfg, Client: c, Mapper: base.Mapper,
		Timeout: base.Timeout, log: base.log.WithValues("as", as), Base: base, As: as}
	r.impersonated[key] = t
	return t, nil
}

// RestConfigFromKubeconfig builds the client configuration of a destination cluster. Unless
// insecure, a kubeconfig that would run a program in the operator's pod (exec, auth-provider
// plugins) or read its files (tokenFile, certificate and key paths) is refused: whoever can
// write the Secret could otherwise run commands as the operator or read its credentials.
func RestConfigFromKubeconfig(data []byte, insecure bool) (*rest.Config, error) {
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, err
	}
	if !insecure {
		if err := kubeconfigProblem(kc); err != nil {
			return nil, err
		}
	}
	return clientcmd.NewDefaultClientConfig(*kc, &clientcmd.ConfigOverrides{}).ClientConfig()
}

// kubeconfigProblem names the first thing in kc that reaches outside the kubeconfig itself.
func kubeconfigProblem(kc *clientcmdapi.Config) error {
	refuse := func(entry, name, what string) error {
		return fmt.Errorf("%s %q uses %s, refused (embed the data instead, or start the operator with --delivery-insecure-kubeconfig)", entry, name, what)
	}
	for _, name := range slices.Sorted(maps.Keys(kc.AuthInfos)) {
		a := kc.AuthInfos[name]
		switch {
		case a.Exec != nil:
			return refuse("user", name, "an exec plugin")
		case a.AuthProvider != nil:
			return refuse("user", name, "an auth-provider plugin")
		case a.TokenFile != "":
			return refuse("user", name, "tokenFile")
		case a.ClientCertificate != "":
			return refuse("user", name, "a client-certificate file")
		case a.ClientKey != "":
			return refuse("user", name, "a client-key file")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(kc.Clusters)) {
		if kc.Clusters[name].CertificateAuthority != "" {
			return refuse("cluster", name, "a certificate-authority file")
		}
	}
	return nil
}

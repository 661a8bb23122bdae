// Package netboot plays the network-boot side of discovery for the Redfish emulator: what a
// boot provider (the IronCore boot-operator with its PXE server) and the booted discovery OS
// would do. When an emulated system PXE-boots, it looks up the Server with the system's UUID,
// that Server's discovery ServerBootConfiguration and ignition Secret, reads the registry URL,
// UUID and token out of the ignition, writes a hardware tree for the machine and runs the real
// agent (internal/probe) against it, posting to the registry over HTTP.
//
// Attach it with em.SetBootHook(nb.OnBoot) (or redfish.Options.OnBoot = nb.OnBoot).
//
// It only reads the cluster (its Client is a client.Reader): what it learns reaches the cluster
// only through the registry's HTTP endpoint, as a real agent's report would. It imports no
// controller package.
package netboot

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/discovery"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/probe"
	"github.com/metalhub/metalhub/internal/probe/clean"
)

// Options configure a Netboot.
type Options struct {
	// Client reads Servers, ServerBootConfigurations and Secrets (required).
	Client client.Reader
	// Indexed says Client reads ServerBootConfigurations from a cache with IndexByUUID
	// registered, as a boot server keeps its own index: a boot finds its configuration by the
	// index and never scans the Servers. Off, it lists by label from the API server and, when
	// that finds nothing, scans the Servers (at ten thousand servers the lookups of a wave of
	// boots were a good part of the API server's work). The index knows discovery boots only,
	// so it does not go with MetadataURL.
	Indexed bool
	// Namespace holds the discovery ServerBootConfigurations and Secrets (required).
	Namespace string
	// WorkDir holds the generated hardware trees while their probes run (default: a new
	// directory under /dev/shm when it is there, else under os.TempDir(); removed by Close).
	WorkDir string
	// MaxConcurrent bounds the probes running at once (default 8); more boots wait their turn.
	MaxConcurrent int
	// LookupTimeout is how long a boot waits for its boot configuration to exist (default 30s).
	LookupTimeout time.Duration
	// BootTimeout bounds one boot's probe run (default 10m), like a discovery timeout, from the
	// moment it runs: the wait for MaxConcurrent is the emulator's, not the machine's.
	BootTimeout time.Duration
	// ProbeInterval is the agent's pause between reports while not done (default 2s).
	ProbeInterval time.Duration
	// ReportBackoff and ReportMaxBackoff are the agent's first and longest wait between the
	// tries of one report the registry refused for now (default 200ms and 2s, quicker than
	// metalprobe's 1s and 30s so that tests do not wait; a benchmark of a fleet wants
	// metalprobe's, or its probes ask the API server far more often than real ones would).
	ReportBackoff, ReportMaxBackoff time.Duration
	// HTTPClient is the agent's (default: metalprobe's 30s timeout, which a report the registry
	// holds for its round, registry.Options.RoundWait, fits in).
	HTTPClient *http.Client
	// MetadataURL, when set, makes a claimed server's boot an OS boot: the booted OS reads its
	// metadata and user data from the metadata service at this base URL (the registry's), with
	// the metadata token its boot configuration hands it (spec.metadataTokenSecretRef), as a
	// boot provider and an OS image that fetch their ignition would. Empty: only discovery
	// boots do anything.
	MetadataURL string
	// TenantData makes a claimed server's OS boot (MetadataURL) write its tenant's data onto the
	// machine's disks, sparse files under WorkDir, so that a cleaning boot has data to erase
	// and a test can look (TenantData). Off, disks exist only once a cleaning boot needs them.
	TenantData bool
	// OnResult, if set, is told how each boot ended (tests, dev mode).
	OnResult func(Result)
	Logger   logr.Logger
}

// Result is how one emulated boot ended.
type Result struct {
	UUID   string
	Server string
	// Err is nil when the registry confirmed the report, or, for an OS boot, the metadata
	// service answered both documents.
	Err error
	// OS is true for the boot of a claim's boot configuration (Options.MetadataURL); Metadata
	// and UserData are then what the metadata service answered.
	OS bool
	// Cleaning is true for the boot of a cleaning round: Err is nil when the registry holds
	// the agent's report.
	Cleaning bool
	Metadata []byte
	UserData []byte
}

// ErrNoBootConfiguration means no Server, ServerBootConfiguration or ignition Secret existed
// for the booting system: a real machine would find nothing to boot.
var ErrNoBootConfiguration = errors.New("no discovery boot configuration")

// Netboot answers emulated PXE boots. Each boot runs in its own goroutine, never on the
// emulator's request path; a second boot of the same system ends the first one's probe, as a
// reboot would.
type Netboot struct {
	opts    Options
	log     logr.Logger
	ownDir  bool
	sem     chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	running map[string]*boot  // by normalized UUID
	pulled  map[string]Pulled // by normalized UUID
}

type boot struct{ cancel context.CancelFunc }

// New builds a Netboot.
func New(o Options) (*Netboot, error) {
	if o.Client == nil || o.Namespace == "" {
		return nil, errors.New("netboot: a client and a namespace are required")
	}
	if o.Indexed && o.MetadataURL != "" {
		return nil, errors.New("netboot: an indexed lookup finds discovery boots only, not a claim's OS boot (MetadataURL)")
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = 8
	}
	if o.LookupTimeout <= 0 {
		o.LookupTimeout = 30 * time.Second
	}
	if o.BootTimeout <= 0 {
		o.BootTimeout = 10 * time.Minute
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = 2 * time.Second
	}
	if o.ReportBackoff <= 0 {
		o.ReportBackoff = 200 * time.Millisecond
	}
	if o.ReportMaxBackoff <= 0 {
		o.ReportMaxBackoff = 2 * time.Second
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	n := &Netboot{opts: o, log: o.Logger, sem: make(chan struct{}, o.MaxConcurrent), running: map[string]*boot{}}
	if n.opts.WorkDir == "" {
		dir, err := os.MkdirTemp(scratchDir(), "metalhub-netboot-")
		if err != nil {
			return nil, fmt.Errorf("netboot: creating work directory: %w", err)
		}
		n.opts.WorkDir, n.ownDir = dir, true
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	return n, nil
}

// OnBoot is the emulator's boot hook. It returns at once.
func (n *Netboot) OnBoot(ev redfish.BootEvent) {
	key := strings.ToLower(ev.UUID)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ctx.Err() != nil {
		return
	}
	if prev := n.running[key]; prev != nil {
		prev.cancel() // the machine rebooted: its previous OS, and probe, are gone
	}
	// BootTimeout starts once the probe runs (boot): a boot waiting for MaxConcurrent has not
	// started yet, and a real machine runs its own probe at once.
	ctx, cancel := context.WithCancel(n.ctx)
	b := &boot{cancel: cancel}
	n.running[key] = b
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() {
			cancel()
			n.mu.Lock()
			if n.running[key] == b {
				delete(n.running, key)
			}
			n.mu.Unlock()
		}()
		res := n.boot(ctx, ev)
		log := n.log.WithValues("uuid", ev.UUID, "server", res.Server, "bmc", ev.BMC, "system", ev.SystemID, "os", res.OS)
		if res.Err != nil {
			log.Info("emulated boot ended without its documents", "error", res.Err.Error())
		} else {
			log.Info("emulated boot done")
		}
		if n.opts.OnResult != nil {
			n.opts.OnResult(res)
		}
	}()
}

// Close stops running probes, waits for them and removes the work directory if it made it.
func (n *Netboot) Close() {
	n.cancel()
	n.wg.Wait()
	if n.ownDir {
		_ = os.RemoveAll(n.opts.WorkDir)
	}
}

// boot does what the boot provider and the booted OS would: a claimed server's boot reads its
// metadata (Options.MetadataURL); any other finds the discovery boot configuration, boots it and
// lets metalprobe report.
func (n *Netboot) boot(ctx context.Context, ev redfish.BootEvent) Result {
	select {
	case n.sem <- struct{}{}:
		defer func() { <-n.sem }()
	case <-ctx.Done():
		return Result{UUID: ev.UUID, Err: ctx.Err()}
	}
	ctx, cancel := context.WithTimeout(ctx, n.opts.BootTimeout)
	defer cancel()
	if n.opts.MetadataURL != "" {
		if res, ok := n.osBoot(ctx, ev); ok {
			return res
		}
	}
	server, cleaning, err := n.discoveryBoot(ctx, ev)
	return Result{UUID: ev.UUID, Server: server, Cleaning: cleaning, Err: err}
}

func (n *Netboot) discoveryBoot(ctx context.Context, ev redfish.BootEvent) (string, bool, error) {
	server, params, err := n.waitForConfiguration(ctx, ev.UUID)
	if err != nil {
		return server, false, err
	}
	hw := n.hardware(ev.UUID, ev.SerialNumber, ev.MACs)
	root, err := os.MkdirTemp(n.opts.WorkDir, strings.ToLower(ev.UUID)+"-")
	if err != nil {
		return server, false, fmt.Errorf("creating hardware tree: %w", err)
	}
	defer os.RemoveAll(root)
	if err := hw.WriteTree(root); err != nil {
		return server, false, err
	}
	log := n.log.WithValues("uuid", ev.UUID, "server", server)
	if params.CleaningPolicy != "" {
		return server, true, n.cleaningBoot(ctx, hw, root, params, log)
	}
	agent := &probe.Agent{
		Client: &probe.Client{RegistryURL: params.RegistryURL, Token: params.Token, HTTPClient: n.opts.HTTPClient,
			Backoff: n.opts.ReportBackoff, MaxBackoff: n.opts.ReportMaxBackoff, Logger: log},
		Collect: func(ctx context.Context) (*probe.Report, error) {
			r, err := probe.Collect(ctx, probe.Options{Root: root, Logger: log})
			if err != nil {
				return nil, err
			}
			r.SystemUUID = params.ServerUUID
			return r, nil
		},
		Interval: n.opts.ProbeInterval,
		Logger:   log,
	}
	if err := agent.Run(ctx); err != nil {
		return server, false, fmt.Errorf("metalprobe: %w", err)
	}
	return server, false, nil
}

// cleaningBoot runs the cleaning agent (metalprobe --clean) against the machine's disk files
// and delivers its report.
func (n *Netboot) cleaningBoot(ctx context.Context, hw Hardware, root string, params discovery.Params, log logr.Logger) error {
	dev, err := n.ensureDisks(hw)
	if err != nil {
		return err
	}
	rep, err := clean.Run(ctx, clean.Options{Root: root, DevDir: dev, Policy: params.CleaningPolicy, ServerUUID: params.ServerUUID, Logger: log})
	if err != nil {
		return fmt.Errorf("metalprobe --clean: %w", err)
	}
	c := &probe.Client{RegistryURL: params.RegistryURL, Token: params.Token, HTTPClient: n.opts.HTTPClient,
		Backoff: n.opts.ReportBackoff, MaxBackoff: n.opts.ReportMaxBackoff, Logger: log}
	if err := clean.Deliver(ctx, c, rep, n.opts.ProbeInterval, log); err != nil {
		return fmt.Errorf("metalprobe --clean: %w", err)
	}
	return nil
}

// waitForConfiguration polls for the boot configuration until LookupTimeout: the controller
// may still be creating it when the machine powers on.
func (n *Netboot) waitForConfiguration(ctx context.Context, uuid string) (string, discovery.Params, error) {
	ctx, cancel := context.WithTimeout(ctx, n.opts.LookupTimeout)
	defer cancel()
	for {
		server, params, err := n.configuration(ctx, uuid)
		if err == nil || !errors.Is(err, ErrNoBootConfiguration) {
			return server, params, err
		}
		select {
		case <-ctx.Done():
			return server, params, err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// configuration finds the Server with the UUID, its discovery ServerBootConfiguration and the
// ignition Secret that configuration names, and reads the agent's parameters from the ignition.
func (n *Netboot) configuration(ctx context.Context, uuid string) (string, discovery.Params, error) {
	var p discovery.Params
	srv, err := n.serverFor(ctx, uuid)
	if err != nil {
		return "", p, err
	}
	if srv == nil {
		return "", p, fmt.Errorf("%w: no server with UUID %s", ErrNoBootConfiguration, uuid)
	}
	var sbc metalv1alpha1.ServerBootConfiguration
	key := client.ObjectKey{Namespace: n.opts.Namespace, Name: discovery.ObjectName(srv.Name)}
	if err := n.opts.Client.Get(ctx, key, &sbc); err != nil {
		if apierrors.IsNotFound(err) {
			return srv.Name, p, fmt.Errorf("%w: no ServerBootConfiguration %s", ErrNoBootConfiguration, key)
		}
		return srv.Name, p, fmt.Errorf("reading ServerBootConfiguration %s: %w", key, err)
	}
	if sbc.Spec.ServerRef.Name != srv.Name {
		return srv.Name, p, fmt.Errorf("ServerBootConfiguration %s is for server %q", key, sbc.Spec.ServerRef.Name)
	}
	if sbc.Spec.IgnitionSecretRef == nil || sbc.Spec.IgnitionSecretRef.Name == "" {
		return srv.Name, p, fmt.Errorf("%w: ServerBootConfiguration %s names no ignition Secret", ErrNoBootConfiguration, key)
	}
	var secret corev1.Secret
	skey := client.ObjectKey{Namespace: n.opts.Namespace, Name: sbc.Spec.IgnitionSecretRef.Name}
	if err := n.opts.Client.Get(ctx, skey, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return srv.Name, p, fmt.Errorf("%w: no ignition Secret %s", ErrNoBootConfiguration, skey)
		}
		return srv.Name, p, fmt.Errorf("reading ignition Secret %s: %w", skey, err)
	}
	ign := secret.Data[discovery.IgnitionKey]
	if len(ign) == 0 {
		return srv.Name, p, fmt.Errorf("%w: ignition Secret %s has no %q", ErrNoBootConfiguration, skey, discovery.IgnitionKey)
	}
	p, err = ParseIgnition(ign)
	if err != nil {
		return srv.Name, p, fmt.Errorf("ignition of %s: %w", skey, err)
	}
	if p.Token == "" {
		// A custom template may leave the token to another mechanism; the Secret has it.
		p.Token = string(secret.Data[discovery.TokenKey])
	}
	if p.ServerUUID == "" {
		p.ServerUUID = uuid
	}
	if !strings.EqualFold(p.ServerUUID, uuid) {
		return srv.Name, p, fmt.Errorf("ignition of %s is for UUID %s, the booting system is %s", skey, p.ServerUUID, uuid)
	}
	return srv.Name, p, nil
}

// serverFor finds the Server of a booting system: through the UUID label of its discovery boot
// configuration (one small list, as a boot server keeps an index), else by scanning the Servers.
func (n *Netboot) serverFor(ctx context.Context, uuid string) (*metalv1alpha1.Server, error) {
	var sbcs metalv1alpha1.ServerBootConfigurationList
	if n.opts.Indexed {
		// The configuration names its Server; a cache that has not seen it yet is asked again
		// on the next poll.
		if err := n.opts.Client.List(ctx, &sbcs, client.InNamespace(n.opts.Namespace),
			client.MatchingFields{UUIDField: strings.ToLower(uuid)}); err != nil {
			return nil, fmt.Errorf("looking up the boot configuration of %s: %w", uuid, err)
		}
		if len(sbcs.Items) != 1 || sbcs.Items[0].Spec.ServerRef.Name == "" {
			return nil, fmt.Errorf("%w: %d boot configurations for UUID %s", ErrNoBootConfiguration, len(sbcs.Items), uuid)
		}
		srv := &metalv1alpha1.Server{}
		if err := n.opts.Client.Get(ctx, client.ObjectKey{Name: sbcs.Items[0].Spec.ServerRef.Name}, srv); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("%w: no server %s", ErrNoBootConfiguration, sbcs.Items[0].Spec.ServerRef.Name)
			}
			return nil, fmt.Errorf("reading server %s: %w", sbcs.Items[0].Spec.ServerRef.Name, err)
		}
		return srv, nil
	}
	if err := n.opts.Client.List(ctx, &sbcs, client.InNamespace(n.opts.Namespace),
		client.MatchingLabels{discovery.SystemUUIDLabel: strings.ToLower(uuid)}); err == nil && len(sbcs.Items) == 1 {
		srv := &metalv1alpha1.Server{}
		if err := n.opts.Client.Get(ctx, client.ObjectKey{Name: sbcs.Items[0].Spec.ServerRef.Name}, srv); err == nil {
			return srv, nil
		}
	}
	var servers metalv1alpha1.ServerList
	if err := n.opts.Client.List(ctx, &servers); err != nil {
		return nil, fmt.Errorf("listing servers: %w", err)
	}
	for i := range servers.Items {
		if strings.EqualFold(servers.Items[i].Spec.SystemUUID, uuid) {
			return &servers.Items[i], nil
		}
	}
	return nil, fmt.Errorf("%w: no server with UUID %s", ErrNoBootConfiguration, uuid)
}

// scratchDir prefers a memory file system for the hardware trees: a fleet's thousand boots write
// and remove tens of thousands of small files, which on a disk costs the emulator more CPU than
// the operator it tests uses.
func scratchDir() string {
	const shm = "/dev/shm"
	if fi, err := os.Stat(shm); err == nil && fi.IsDir() {
		if f, err := os.CreateTemp(shm, ".metalhub-probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return shm
		}
	}
	return os.TempDir()
}

package dev

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/crypto/ssh/knownhosts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	emuinfrahub "github.com/metalhub/metalhub/internal/emulator/infrahub"
	"github.com/metalhub/metalhub/internal/emulator/netboot"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
)

// DevLabel marks the objects `metalhub dev` creates, so samples can select its servers.
const DevLabel = "metalhub.io/dev"

// emulators are the stand-ins `metalhub dev` runs beside the operator.
type emulators struct {
	fleet       *redfish.Emulator
	netboot     *netboot.Netboot
	infrahub    *emuinfrahub.Emulator
	receiverURL string // the operator's Infrahub webhook receiver, "" when off
	control     *http.Server
	controlAddr string
	state       string // file keeping the fleet's power states between runs
}

// fleetState is what survives a dev run: each system's power, so that a second run finds the
// boxes as the first left them (real machines keep their state too).
type fleetState map[string]string

func startEmulators(o Options, c client.Client, out io.Writer, log logr.Logger) (*emulators, error) {
	e := &emulators{}
	var err error
	if e.netboot, err = netboot.New(netboot.Options{Client: c, Namespace: o.Manager.Metal.DiscoveryNamespace,
		// A claimed machine's OS reads its metadata and user data from the registry's listener.
		MetadataURL: o.Manager.Metal.RegistryURL, TenantData: true, Logger: log.WithName("netboot")}); err != nil {
		return nil, err
	}
	latency, err := redfish.Preset(o.BMCLatency)
	if err != nil {
		e.close()
		return nil, fmt.Errorf("--bmc-latency: %w", err)
	}
	if e.fleet, err = redfish.Start(redfish.Options{
		BMCs: o.Servers, SystemsPerBMC: 1, Latency: latency, BasePort: o.BMCBasePort, Seed: 1, PowerDelay: o.PowerDelay,
		OnBoot: e.netboot.OnBoot, Logger: log.WithName("redfish"), SSHConsole: true,
	}); err != nil {
		e.close()
		return nil, fmt.Errorf("starting the emulated BMC fleet: %w", err)
	}
	if o.DataDir != "" {
		e.state = filepath.Join(o.DataDir, "fleet.json")
		e.restore()
	}
	ln, err := net.Listen("tcp", o.EmulatorControlAddress)
	if err != nil {
		e.close()
		return nil, fmt.Errorf("emulator control endpoint: %w", err)
	}
	e.controlAddr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("/emulator/machines/", e.netboot.ControlHandler())
	mux.Handle("/", e.fleet.ControlHandler())
	e.control = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = e.control.Serve(ln) }()

	e.infrahub = emuinfrahub.New(emuinfrahub.Options{Users: map[string]string{"admin": "infrahub"}})
	if err := e.infrahub.LoadSample(); err != nil {
		e.close()
		return nil, err
	}
	if _, err := e.infrahub.Start(o.InfrahubAddress); err != nil {
		e.close()
		return nil, fmt.Errorf("starting the Infrahub emulator: %w", err)
	}
	fmt.Fprintf(out, "emulated BMCs: %d at %s ... (user/password %s/%s)\n", o.Servers, e.fleet.BMC(0).URL(), "admin", "password")
	fmt.Fprintf(out, "BMC power and boot recorder: http://%s/emulator/records\n", ln.Addr())
	fmt.Fprintf(out, "Infrahub emulator: %s (admin/infrahub), artifacts named Webserver_Manifest\n", e.infrahub.URL())
	return e, nil
}

// writeKnownHosts records the BMCs' SSH host key (one per emulator run) for metalhub console.
func (e *emulators) writeKnownHosts(path string) error {
	var b strings.Builder
	for _, bmc := range e.fleet.BMCs() {
		if addr := bmc.SSHAddress(); addr != "" {
			b.WriteString(knownhosts.Line([]string{knownhosts.Normalize(addr)}, e.fleet.SSHHostKey()) + "\n")
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("writing the BMCs' host keys: %w", err)
	}
	return nil
}

// addresses are where the control endpoint, the Infrahub emulator and each BMC listen.
func (e *emulators) addresses() (control, infrahub string, bmcs []string) {
	for _, b := range e.fleet.BMCs() {
		bmcs = append(bmcs, strings.TrimPrefix(b.URL(), "http://"))
	}
	return e.controlAddr, strings.TrimPrefix(e.infrahub.URL(), "http://"), bmcs
}

func (e *emulators) restore() {
	b, err := os.ReadFile(e.state)
	if err != nil {
		return
	}
	st := fleetState{}
	if json.Unmarshal(b, &st) != nil {
		return
	}
	for _, bmc := range e.fleet.BMCs() {
		for _, sys := range bmc.Systems() {
			if p, ok := st[sys.UUID()]; ok {
				sys.SetPowerState(p)
			}
		}
	}
}

func (e *emulators) save() {
	if e.state == "" || e.fleet == nil {
		return
	}
	st := fleetState{}
	for _, bmc := range e.fleet.BMCs() {
		for _, sys := range bmc.Systems() {
			st[sys.UUID()] = sys.PowerState()
		}
	}
	if b, err := json.Marshal(st); err == nil {
		_ = os.WriteFile(e.state, b, 0o600)
	}
}

func (e *emulators) close() {
	if e.netboot != nil {
		e.netboot.Close()
	}
	e.save()
	if e.control != nil {
		_ = e.control.Close()
	}
	if e.fleet != nil {
		_ = e.fleet.Close()
	}
	if e.infrahub != nil {
		_ = e.infrahub.Close()
	}
}

// register creates (or finds, on a resumed run) the BMCSecrets and BMCs of the fleet, and the
// Infrahub credentials and a sample InfrahubSync. Found BMCs and the sync are pointed at where
// the emulators listen now: with port 0 (or another base port) that changes between runs.
func (e *emulators) register(ctx context.Context, c client.Client) error {
	for i, b := range e.fleet.BMCs() {
		user, pass := b.Credentials()
		name := "bmc-" + strconv.Itoa(i)
		u, err := url.Parse(b.URL())
		if err != nil {
			return fmt.Errorf("emulated BMC address %q: %w", b.URL(), err)
		}
		p, err := strconv.Atoi(u.Port())
		if err != nil {
			return fmt.Errorf("emulated BMC address %q: %w", b.URL(), err)
		}
		port := int32(p)
		if err := createAll(ctx, c, &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{DevLabel: "true"}},
			StringData: map[string]string{metalv1alpha1.BMCSecretUsernameKey: user, metalv1alpha1.BMCSecretPasswordKey: pass}}); err != nil {
			return err
		}
		// Placed in racks of four, as the dashboard draws them; the BMC's labels go to its Servers.
		labels := map[string]string{DevLabel: "true",
			metalv1alpha1.MetadataKeyPrefix + "location": "DEV",
			metalv1alpha1.MetadataKeyPrefix + "rack":     fmt.Sprintf("%d-%d", i/16+1, i/4%4+1),
			metalv1alpha1.MetadataKeyPrefix + "shelf":    strconv.Itoa(i%4*3 + 1),
			metalv1alpha1.MetadataKeyPrefix + "height":   "2"}
		if err := createOrRepoint(ctx, c, &metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: metalv1alpha1.BMCSpec{
				Access:       &metalv1alpha1.InlineEndpoint{IP: "127.0.0.1"},
				BMCSecretRef: corev1.LocalObjectReference{Name: name},
				Protocol:     metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: port, Scheme: metalv1alpha1.HTTPScheme},
			}}, func(b *metalv1alpha1.BMC) bool {
			changed := b.Spec.Protocol.Port != port
			b.Spec.Protocol.Port = port
			return changed
		}); err != nil {
			return err
		}
	}
	infrahubURL := e.infrahub.URL()
	// The Secret serves the sample sync only, for the emulator's exact (plain HTTP) URL; the dev
	// operator allows plain HTTP credentials (DefaultOptions).
	credAnnotations := map[string]string{infrahubv1alpha1.URLAnnotation: infrahubURL, infrahubv1alpha1.SyncsAnnotation: "sample"}
	if err := createOrRepoint(ctx, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "infrahub-credentials",
		Labels: map[string]string{infrahubv1alpha1.InfrahubAPIURLLabel: "127.0.0.1"}, Annotations: credAnnotations},
		StringData: map[string]string{"username": "admin", "password": "infrahub"}}, func(s *corev1.Secret) bool {
		changed := false
		for k, v := range credAnnotations {
			if s.Annotations[k] != v {
				if s.Annotations == nil {
					s.Annotations = map[string]string{}
				}
				s.Annotations[k], changed = v, true
			}
		}
		return changed
	}); err != nil {
		return err
	}
	if err := e.registerWebhook(ctx, c); err != nil {
		return err
	}
	return createOrRepoint(ctx, c, &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: "sample"},
		Spec: infrahubv1alpha1.InfrahubSyncSpec{
			Source:      infrahubv1alpha1.Source{InfrahubAPIURL: infrahubURL, TargetBranch: "main", ArtefactName: "Webserver_Manifest"},
			Destination: infrahubv1alpha1.Destination{Namespace: "default", ReconcileOnEvents: true},
		}}, func(s *infrahubv1alpha1.InfrahubSync) bool {
		changed := s.Spec.Source.InfrahubAPIURL != infrahubURL
		s.Spec.Source.InfrahubAPIURL = infrahubURL
		return changed
	})
}

// createOrRepoint creates obj or, when it exists, lets repoint change the stored object and
// patches what it changed (nothing when it returns false).
func createOrRepoint[T client.Object](ctx context.Context, c client.Client, obj T, repoint func(T) bool) error {
	err := c.Create(ctx, obj)
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
	}
	got, ok := obj.DeepCopyObject().(T)
	if !ok {
		return fmt.Errorf("copying %T", obj)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
		return fmt.Errorf("reading %T %s: %w", obj, obj.GetName(), err)
	}
	base, ok := got.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("copying %T", obj)
	}
	if !repoint(got) {
		return nil
	}
	if err := c.Patch(ctx, got, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("pointing %T %s at the emulator: %w", obj, obj.GetName(), err)
	}
	return nil
}

func createAll(ctx context.Context, c client.Client, objs ...client.Object) error {
	var errs []error
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			errs = append(errs, fmt.Errorf("creating %T %s: %w", o, o.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// webhookKeySecret holds the key the Infrahub emulator signs its webhooks with.
const webhookKeySecret = "infrahub-webhook-key"

// registerWebhook points the Infrahub emulator's standard webhook at the operator's receiver,
// keyed with the Secret's key (made once, kept on a resumed run): a changed artifact is
// delivered at once, as with a real Infrahub so configured.
func (e *emulators) registerWebhook(ctx context.Context, c client.Client) error {
	if e.receiverURL == "" {
		return nil
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return err
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: webhookKeySecret},
		StringData: map[string]string{"key": hex.EncodeToString(raw)}}
	if err := createOrRepoint(ctx, c, sec, func(*corev1.Secret) bool { return false }); err != nil {
		return err
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(sec), sec); err != nil {
		return fmt.Errorf("reading the webhook key: %w", err)
	}
	e.infrahub.AddWebhook(emuinfrahub.Webhook{URL: e.receiverURL, SharedKey: string(sec.Data["key"]), EventType: emuinfrahub.EventArtifactUpdated})
	return nil
}

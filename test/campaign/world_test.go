package campaign

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccontroller"
	"github.com/metalhub/metalhub/internal/discovery"
	"github.com/metalhub/metalhub/internal/emulator/netboot"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/shard"
	"github.com/metalhub/metalhub/internal/testenv"
)

const (
	ns        = "default"
	rackLabel = "campaign.metalhub.io/rack"
	taintKey  = "campaign.metalhub.io/taint"
)

// world is one schedule's fleet, managers, model and journal.
type world struct {
	t     *testing.T
	sch   *schedule
	ctx   context.Context
	c     client.Client
	fleet *redfish.Emulator
	nb    *netboot.Netboot
	// front is the registry as the tenants' OS reach it (nil when the build cleans nothing).
	front *httptest.Server
	slots []*slot
	m     *model
	dir   string
	num   map[int]int
	// resolved is the server/BMC index each step ran on, by step ID (for its follow-ups).
	resolved map[int]int

	mu      sync.Mutex
	faults  []redfish.Faults // per BMC, as the harness set them
	slow    []bool           // per BMC: power transitions slowed
	user    []string         // per BMC: the original credentials
	pass    []string
	board   [][2]string  // per BMC: its system's original UUID and serial
	astray  []bool       // per BMC: its address answered by another, or its board swapped
	twinned map[int]bool // BMCs whose machine is registered a second time right now
	// credsChanged are the BMCs whose password changed and is not in their BMCSecret yet.
	credsChanged map[int]bool
	// shared maps a BMC that names another's BMCSecret (a kShare) to that other BMC.
	shared map[int]int
	moving *moveRun // the move in flight or not given up yet
	// cut is the shard owner cut off from the API server right now; partitions all there were.
	cut        *partitionRun
	partitions []*partitionRun
	backup     *backup
	journal    []string
	probes     []*probe
	probeWG    sync.WaitGroup
	steps      int
	injected   int
	notes      []string
}

// client returns a client on the control plane without client-side throttling: the harness polls
// four lists every 150 ms and must not queue behind its own rate limit.
func fastClient() (client.Client, error) {
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		return nil, fmt.Errorf("creating a client: %w", err)
	}
	return c, nil
}

func (w *world) bmcName(i int) string { return fmt.Sprintf("bmc-%d", i) }

func (w *world) serverName(i int) string {
	return bmccontroller.ServerName(w.bmcName(i), w.fleet.BMC(i).SystemIDs()[0])
}

func (w *world) uuid(i int) string { return strings.ToLower(w.fleet.BMC(i).Systems()[0].UUID()) }

func (w *world) logf(format string, args ...any) {
	w.t.Helper()
	w.t.Logf(format, args...)
}

// note adds a line to the journal (printed with the schedule on a breach).
func (w *world) note(format string, args ...any) {
	line := fmt.Sprintf("        %+7.2fs ", w.m.since(time.Now()).Seconds()) + fmt.Sprintf(format, args...)
	w.mu.Lock()
	w.journal = append(w.journal, line)
	w.mu.Unlock()
}

// newWorld starts the emulated fleet, netboot and two manager replicas, and registers the fleet.
func newWorld(t *testing.T, sch *schedule) (*world, error) {
	bin, err := managerBinary()
	if err != nil {
		return nil, err
	}
	c, err := fastClient()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("metalhub-campaign-%d-", sch.Seed))
	if err != nil {
		return nil, fmt.Errorf("creating the log directory: %w", err)
	}
	w := &world{t: t, sch: sch, ctx: context.Background(), c: c, dir: dir, num: sch.numbers(), resolved: map[int]int{}, twinned: map[int]bool{}, credsChanged: map[int]bool{}, shared: map[int]int{}}
	if err := purge(w.ctx, c); err != nil {
		return w, err
	}
	if err := purgeCleaningRecords(w.ctx, c); err != nil {
		return w, err
	}
	nbOpts := netboot.Options{Client: c, Namespace: ns, ProbeInterval: 200 * time.Millisecond,
		LookupTimeout: 10 * time.Second, BootTimeout: 30 * time.Second, Logger: logr.Discard()}
	if featuresOf(bin).cleaning {
		// A claimed server's boot is its tenant's OS, which reads its metadata from the registry
		// of whichever replica answers and writes the tenant's data onto the machine's disks:
		// what a release's cleaning must erase (no-claim-without-clean).
		w.front = registryFront(func() []*slot { return w.slots })
		nbOpts.MetadataURL, nbOpts.TenantData = w.front.URL, true
	}
	w.nb, err = netboot.New(nbOpts)
	if err != nil {
		return w, fmt.Errorf("starting netboot: %w", err)
	}
	w.fleet, err = redfish.Start(redfish.Options{BMCs: sch.BMCs, Seed: sch.Seed, PowerDelay: sch.PowerDelay, OnBoot: w.nb.OnBoot})
	if err != nil {
		return w, fmt.Errorf("starting the emulated fleet: %w", err)
	}
	w.m = newModel(c, w.fleet, func(f string, a ...any) { t.Logf(f, a...) })
	if featuresOf(bin).cleaning {
		w.m.watchCleaning(w.nb)
	}
	w.faults, w.slow, w.astray = make([]redfish.Faults, sch.BMCs), make([]bool, sch.BMCs), make([]bool, sch.BMCs)
	for i, b := range w.fleet.BMCs() {
		u, p := b.Credentials()
		w.user, w.pass = append(w.user, u), append(w.pass, p)
		sys := b.Systems()[0]
		w.board = append(w.board, [2]string{sys.UUID(), sys.SerialNumber()})
		w.faults[i] = w.baseFaults(i)
		b.SetFaults(w.faults[i])
	}
	for _, st := range sch.Steps {
		if st.Fault == fMove {
			// Up before the chaos starts: a move step must not stall the schedule behind it.
			if _, err := moveTarget(); err != nil {
				return w, fmt.Errorf("starting the move target: %w", err)
			}
			break
		}
	}
	sharded := sch.Shards && featuresOf(bin).shards
	for i := range 2 {
		s := &slot{idx: i, bin: bin, dir: dir, logf: func(f string, a ...any) { w.note(f, a...) }}
		if sharded {
			// Each replica reaches the API server through a link of its own, which a partition
			// cuts while the process runs on.
			api, err := url.Parse(env.Config.Host)
			if err != nil {
				return w, fmt.Errorf("reading the API server's address: %w", err)
			}
			if s.link, err = testenv.NewAPILink(api.Host); err != nil {
				return w, err
			}
			if s.kubeconfig, err = testenv.KubeconfigVia(env.Kubeconfig, dir, s.link); err != nil {
				return w, err
			}
		}
		s.onCrash = func(msg string) {
			w.m.mu.Lock()
			w.m.breach(invPassBound, fmt.Sprintf("manager-%d crash", s.idx), "%s", msg)
			w.m.mu.Unlock()
		}
		w.slots = append(w.slots, s)
		s.start()
	}
	for i := range sch.BMCs {
		if _, err := w.ensureBMC(i); err != nil {
			return w, err
		}
	}
	return w, nil
}

// baseFaults are the faults a BMC has when healthy: none, or the schedule's permanent quirk.
func (w *world) baseFaults(i int) redfish.Faults {
	var f redfish.Faults
	if w.sch.Quirk != "" && i == w.sch.QuirkBMC {
		f.BrokenCollections = map[string]int{w.sch.Quirk: 500}
	}
	if i == w.sch.SlowBMC {
		f.Latency = redfish.Duration(w.sch.SlowLatency)
	}
	return f
}

// ensureBMC creates whatever of BMC i's BMCSecret, Endpoint and BMC is missing, as a user
// re-applying the fleet's manifests would.
func (w *world) ensureBMC(i int) (string, error) {
	name := w.bmcName(i)
	b := w.fleet.BMC(i)
	user, pass := b.Credentials()
	port, err := strconv.Atoi(b.URL()[strings.LastIndex(b.URL(), ":")+1:])
	if err != nil {
		return "", fmt.Errorf("BMC %d URL %s: %w", i, b.URL(), err)
	}
	objs := []client.Object{&metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: name},
		StringData: map[string]string{metalv1alpha1.BMCSecretUsernameKey: user, metalv1alpha1.BMCSecretPasswordKey: pass}}}
	spec := metalv1alpha1.BMCSpec{BMCSecretRef: corev1.LocalObjectReference{Name: name},
		Protocol: metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: int32(port), Scheme: metalv1alpha1.HTTPScheme}}
	if w.sch.Endpoint[i] {
		objs = append(objs, &metalv1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: metalv1alpha1.EndpointSpec{IP: "127.0.0.1", MACAddress: fmt.Sprintf("02:00:5e:00:01:%02x", i)}})
		spec.EndpointRef = &corev1.LocalObjectReference{Name: name}
	} else {
		spec.Access = &metalv1alpha1.InlineEndpoint{IP: "127.0.0.1"}
	}
	objs = append(objs, &metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{rackLabel: fmt.Sprintf("r%d", i%2)}}, Spec: spec})
	var made []string
	for _, o := range objs {
		err := w.c.Create(w.ctx, o)
		switch {
		case err == nil:
			made = append(made, fmt.Sprintf("%T", o)[len("*v1alpha1."):])
		case apierrors.IsAlreadyExists(err):
		default:
			return strings.Join(made, ","), fmt.Errorf("creating %T %s: %w", o, name, err)
		}
	}
	w.m.poke()
	if len(made) == 0 {
		return "all present", nil
	}
	return "created " + strings.Join(made, ", "), nil
}

// waitAvailable waits for every server of the fleet to be Available and off.
func (w *world) waitAvailable(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var missing []string
		s, err := w.m.take(w.ctx)
		if err != nil {
			return err
		}
		for i := range w.sch.BMCs {
			v := s.Servers[w.serverName(i)]
			if v == nil || v.State != string(metalv1alpha1.ServerStateAvailable) || v.Mirror != v.State || v.Power != string(metalv1alpha1.PowerStateOff) {
				missing = append(missing, fmt.Sprintf("%s=%+v", w.serverName(i), v))
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fleet not Available after %s: %s", timeout, strings.Join(missing, "; "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// leader returns the replica that runs the controllers (nil while none does).
func (w *world) leader() *slot {
	for _, s := range w.slots {
		if s.leads() {
			return s
		}
	}
	return nil
}

// close stops everything the world started and removes every metal object it left.
func (w *world) close() {
	w.probeWG.Wait()
	w.abandonMove()
	for _, s := range w.slots {
		s.stop(syscall.SIGKILL)
		if s.link != nil {
			s.link.Close()
		}
	}
	if w.fleet != nil {
		_ = w.fleet.Close()
	}
	if w.nb != nil {
		w.nb.Close()
	}
	if w.front != nil {
		w.front.Close()
	}
	if err := purge(w.ctx, w.c); err != nil {
		w.t.Errorf("purging after seed %d: %v", w.sch.Seed, err)
	}
	if err := purgeCleaningRecords(w.ctx, w.c); err != nil {
		w.t.Errorf("purging the cleaning records after seed %d: %v", w.sch.Seed, err)
	}
	if !w.t.Failed() && os.Getenv("METALHUB_CAMPAIGN_KEEP_LOGS") == "" {
		_ = os.RemoveAll(w.dir)
	}
}

// purgeLists are the kinds a purge and a backup cover, owners before what they own.
func purgeLists() []client.ObjectList {
	return []client.ObjectList{&metalv1alpha1.BMCSecretList{}, &metalv1alpha1.EndpointList{}, &metalv1alpha1.BMCList{},
		&metalv1alpha1.ServerList{}, &metalv1alpha1.ServerClaimList{}, &metalv1alpha1.ServerMaintenanceList{},
		&metalv1alpha1.ServerBootConfigurationList{}, &corev1.SecretList{},
		&systemv1alpha1.BIOSVersionSetList{}, &systemv1alpha1.BIOSVersionList{}, &maintenancev1alpha1.ServerMaintenanceList{}}
}

// listOpts selects what a list of purgeLists covers: discovery Secrets only, among Secrets.
func listOpts(l client.ObjectList) []client.ListOption {
	if _, ok := l.(*corev1.SecretList); ok {
		return []client.ListOption{client.InNamespace(ns), client.HasLabels{discovery.ServerLabel}}
	}
	return nil
}

// purge removes every metal object and discovery Secret, finalizers and all, and the lease,
// and waits until they are gone: schedules share one control plane.
func purge(ctx context.Context, c client.Client) error {
	for _, list := range purgeLists() {
		if err := c.List(ctx, list, listOpts(list)...); err != nil {
			return fmt.Errorf("listing %T: %w", list, err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return fmt.Errorf("reading %T: %w", list, err)
		}
		for _, item := range items {
			obj := item.(client.Object)
			if len(obj.GetFinalizers()) > 0 {
				err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
					if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
						return err
					}
					obj.SetFinalizers(nil)
					return c.Update(ctx, obj)
				})
				if err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("removing finalizers of %T %s: %w", obj, obj.GetName(), err)
				}
			}
			if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting %T %s: %w", obj, obj.GetName(), err)
			}
		}
	}
	if err := c.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: leaseID}}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the lease: %w", err)
	}
	// A sharded seed's shard and member Leases: the next seed's replicas need not wait them out.
	if err := c.DeleteAllOf(ctx, &coordinationv1.Lease{}, client.InNamespace(ns), client.MatchingLabels{shard.SetLabel: shardSet}); err != nil {
		return fmt.Errorf("deleting the shard leases: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := 0
		for _, list := range purgeLists() {
			if err := c.List(ctx, list, listOpts(list)...); err != nil {
				return fmt.Errorf("listing %T: %w", list, err)
			}
			left += meta.LenList(list)
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d objects still there 30s after the purge", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// purgeCleaningRecords removes the Servers' cleaning records (ConfigMaps in the discovery
// namespace) before and after a seed: the next seed's Servers have the same names. They are on no
// purge list, so a restore leaves them where they are (the registry starts a record afresh at
// the first report of a Server that does not own it).
func purgeCleaningRecords(ctx context.Context, c client.Client) error {
	if err := c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.HasLabels{cleaning.ServerLabel}); err != nil {
		return fmt.Errorf("deleting the cleaning records: %w", err)
	}
	return nil
}

// registryFront is one address for the registries of every replica, as a Service in front of
// them: a request goes to a replica that runs (each serves the registry, leader or not); with
// none up it is answered 502 and the client retries.
func registryFront(slots func() []*slot) *httptest.Server {
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			for _, s := range slots() {
				if a := s.registry(); a != "" {
					r.SetURL(&url.URL{Scheme: "http", Host: a})
					return
				}
			}
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	return httptest.NewServer(proxy)
}

// backup is what a cluster backup tool saves: every object's metadata and spec (status is not
// restored by such tools, and resourceVersion/UID cannot be).
type backup struct {
	at   time.Time
	objs []client.Object
}

func (w *world) takeBackup() (*backup, error) {
	b := &backup{at: time.Now()}
	// Servers are listed before claims and maintenances, so a ref names an object in the backup.
	for _, list := range purgeLists() {
		if err := w.c.List(w.ctx, list, listOpts(list)...); err != nil {
			return nil, fmt.Errorf("backing up %T: %w", list, err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, fmt.Errorf("reading %T: %w", list, err)
		}
		for _, item := range items {
			b.objs = append(b.objs, item.(client.Object).DeepCopyObject().(client.Object))
		}
	}
	return b, nil
}

// restore replays a backup onto an empty cluster with the operator stopped, as restoring a lost
// control plane does: every object is re-created with its labels, annotations, finalizers and
// spec, without status; owner references are re-pointed at the restored owners' new UIDs.
func (w *world) restore(b *backup) (string, error) {
	for _, s := range w.slots {
		s.stop(syscall.SIGKILL)
	}
	w.m.beginRestore()
	defer func() {
		w.m.endRestore()
		w.m.disturbOps("", "restored from a backup")
		for _, s := range w.slots {
			s.start()
		}
		w.m.poke()
	}()
	if err := purge(w.ctx, w.c); err != nil {
		return "", err
	}
	uids := map[types.UID]types.UID{}
	made := 0
	for _, saved := range b.objs {
		o := saved.DeepCopyObject().(client.Object)
		old := o.GetUID()
		o.SetUID("")
		o.SetResourceVersion("")
		o.SetCreationTimestamp(metav1.Time{})
		o.SetDeletionTimestamp(nil)
		o.SetDeletionGracePeriodSeconds(nil)
		o.SetManagedFields(nil)
		o.SetGeneration(0)
		var refs []metav1.OwnerReference
		for _, r := range o.GetOwnerReferences() {
			if uid, ok := uids[r.UID]; ok {
				r.UID = uid
				refs = append(refs, r)
			}
		}
		o.SetOwnerReferences(refs)
		clearStatus(o)
		if err := w.c.Create(w.ctx, o); err != nil {
			return "", fmt.Errorf("restoring %T %s: %w", o, o.GetName(), err)
		}
		uids[old] = o.GetUID()
		made++
		if b, ok := o.(*metalv1alpha1.BMC); ok {
			if i := slices.IndexFunc(w.fleet.BMCs(), func(x *redfish.BMC) bool { return w.bmcName(x.Index()) == b.Name }); i >= 0 {
				w.m.registerBMCOp(b.Name, string(b.UID), i, b.Annotations[metalv1alpha1.OperationAnnotation], time.Now())
			}
		}
		if s, ok := o.(*metalv1alpha1.Server); ok {
			if op := s.Annotations[metalv1alpha1.OperationAnnotation]; op != "" {
				// The restored annotation asks again: a new request as far as the model goes.
				w.m.registerOp(s.Name, string(s.UID), strings.ToLower(s.Spec.SystemUUID), op, time.Now())
			}
		}
	}
	return fmt.Sprintf("restored %d objects from the backup of +%s", made, w.m.since(b.at)), nil
}

func clearStatus(o client.Object) {
	switch v := o.(type) {
	case *metalv1alpha1.Server:
		v.Status = metalv1alpha1.ServerStatus{}
	case *metalv1alpha1.ServerClaim:
		v.Status = metalv1alpha1.ServerClaimStatus{}
	case *metalv1alpha1.ServerMaintenance:
		v.Status = metalv1alpha1.ServerMaintenanceStatus{}
	case *metalv1alpha1.BMC:
		v.Status = metalv1alpha1.BMCStatus{}
	case *metalv1alpha1.ServerBootConfiguration:
		v.Status = metalv1alpha1.ServerBootConfigurationStatus{}
	}
}

// patch reads obj by key, applies mutate and writes the difference with an optimistic lock,
// retrying on conflicts: a user's kubectl edit.
func (w *world) patch(key client.ObjectKey, obj client.Object, mutate func(client.Object) error) error {
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if err := w.c.Get(w.ctx, key, obj); err != nil {
			return err
		}
		base := obj.DeepCopyObject().(client.Object)
		if err := mutate(obj); err != nil {
			return err
		}
		return w.c.Patch(w.ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	})
	w.m.poke()
	return err
}

// errSkip ends a step without a write: the object is not in a state the step applies to.
type errSkip string

func (e errSkip) Error() string { return string(e) }

func isSkip(err error) bool { var s errSkip; return errors.As(err, &s) }

// dumpState prints what the API holds right now, for reading a breach: every metal object's
// refs, the operator's annotations, finalizers and conditions.
func (w *world) dumpState() string {
	var b strings.Builder
	conds := func(cs []metav1.Condition) string {
		var out []string
		for _, c := range cs {
			out = append(out, fmt.Sprintf("%s=%s/%s %q", c.Type, c.Status, c.Reason, c.Message))
		}
		return strings.Join(out, "; ")
	}
	meta := func(o client.Object) string {
		var ann []string
		for k, v := range o.GetAnnotations() {
			if strings.Contains(k, "metalhub.io/") || strings.HasPrefix(k, "metal.ironcore.dev/") {
				ann = append(ann, k+"="+v)
			}
		}
		slices.Sort(ann)
		del := ""
		if o.GetDeletionTimestamp() != nil {
			del = " DELETING"
		}
		return fmt.Sprintf("%s%s finalizers=%v annotations=%v", o.GetName(), del, o.GetFinalizers(), ann)
	}
	var servers metalv1alpha1.ServerList
	var claims metalv1alpha1.ServerClaimList
	var maints metalv1alpha1.ServerMaintenanceList
	var bmcs metalv1alpha1.BMCList
	for _, l := range []client.ObjectList{&servers, &claims, &maints, &bmcs} {
		if err := w.c.List(w.ctx, l); err != nil {
			return err.Error()
		}
	}
	for _, o := range servers.Items {
		fmt.Fprintf(&b, "  Server %s uuid=%s claimRef=%v maintRef=%v status=%s/%s [%s]\n", meta(&o), o.Spec.SystemUUID,
			o.Spec.ServerClaimRef, o.Spec.ServerMaintenanceRef, o.Status.State, o.Status.PowerState, conds(o.Status.Conditions))
	}
	for _, o := range claims.Items {
		fmt.Fprintf(&b, "  ServerClaim %s power=%s serverRef=%v phase=%s [%s]\n", meta(&o), o.Spec.Power, o.Spec.ServerRef, o.Status.Phase, conds(o.Status.Conditions))
	}
	for _, o := range maints.Items {
		fmt.Fprintf(&b, "  ServerMaintenance %s server=%v state=%s [%s]\n", meta(&o), o.Spec.ServerRef, o.Status.State, conds(o.Status.Conditions))
	}
	for _, o := range bmcs.Items {
		fmt.Fprintf(&b, "  BMC %s state=%s [%s]\n", meta(&o), o.Status.State, conds(o.Status.Conditions))
	}
	var sbcs metalv1alpha1.ServerBootConfigurationList
	if err := w.c.List(w.ctx, &sbcs); err == nil {
		for _, o := range sbcs.Items {
			fmt.Fprintf(&b, "  ServerBootConfiguration %s/%s owners=%d server=%s image=%q state=%s [%s]\n", o.Namespace, meta(&o), len(o.OwnerReferences),
				o.Spec.ServerRef.Name, o.Spec.Image, o.Status.State, conds(o.Status.Conditions))
		}
	}
	for i, bm := range w.fleet.BMCs() {
		fmt.Fprintf(&b, "  emulator bmc-%d: power %s, boot %+v\n", i, bm.Systems()[0].PowerState(), bm.Systems()[0].Boot())
	}
	// What each BMC was asked to do, and how the model judged it (the last few per BMC).
	if w.m != nil {
		w.m.mu.Lock()
		perBMC := map[int][]string{}
		for _, j := range w.m.judged {
			perBMC[j.r.BMC] = append(perBMC[j.r.BMC], fmt.Sprintf("%s %s %s%s (%s)", j.r.Time.Format("15:04:05.000"), j.r.Action, j.r.ResetType, j.r.Image, j.why))
		}
		w.m.mu.Unlock()
		for i := range w.fleet.BMCs() {
			rs := perBMC[i]
			fmt.Fprintf(&b, "  recorded bmc-%d: %s\n", i, strings.Join(rs[max(0, len(rs)-12):], "; "))
		}
	}
	// The operator's events say what it decided (an operation refused, uncertain, settled),
	// which its info-level log does not.
	var events eventsv1.EventList
	if err := w.c.List(w.ctx, &events); err == nil {
		at := func(e eventsv1.Event) time.Time {
			if !e.EventTime.IsZero() {
				return e.EventTime.Time
			}
			return e.CreationTimestamp.Time
		}
		slices.SortFunc(events.Items, func(x, y eventsv1.Event) int { return at(x).Compare(at(y)) })
		for _, e := range events.Items {
			if e.Regarding.Kind != "Server" && e.Regarding.Kind != "BMC" {
				continue
			}
			fmt.Fprintf(&b, "  event %s %s %s/%s: %s\n", at(e).Format("15:04:05.000"), e.Regarding.Name, e.Type, e.Reason, e.Note)
		}
	}
	return b.String()
}

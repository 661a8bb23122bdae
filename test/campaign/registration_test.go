package campaign

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/migrate"
	"github.com/metalhub/metalhub/internal/syncbuf"
	"github.com/metalhub/metalhub/internal/testenv"
)

// A second registration of a machine and a move while the source runs (issue 23): the first must
// never make a second Server or an action through either registration, the second must leave
// every paused box alone from the source's acknowledgement on.

func (w *world) twinName(i int) string { return fmt.Sprintf("twin-%d", i) }

// twin registers BMC i's machine a second time in form: a BMC object through the other of
// Endpoint and inline access (inline by host name), or a Server with inline BMC access by host
// name and the system's UUID in capitals, as a hand-written manifest has it.
func (w *world) twin(st step, i int) (string, error) {
	name := w.twinName(i)
	b := w.fleet.BMC(i)
	user, pass := b.Credentials()
	port, err := strconv.Atoi(b.URL()[strings.LastIndex(b.URL(), ":")+1:])
	if err != nil {
		return "", fmt.Errorf("BMC %d URL %s: %w", i, b.URL(), err)
	}
	proto := metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: int32(port), Scheme: metalv1alpha1.HTTPScheme}
	objs := []client.Object{&metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: name},
		StringData: map[string]string{metalv1alpha1.BMCSecretUsernameKey: user, metalv1alpha1.BMCSecretPasswordKey: pass}}}
	form := st.Object
	switch form {
	case twinBMC:
		spec := metalv1alpha1.BMCSpec{BMCSecretRef: corev1.LocalObjectReference{Name: name}, Protocol: proto}
		if w.sch.Endpoint[i] {
			spec.Access = &metalv1alpha1.InlineEndpoint{IP: "localhost"}
			form += " (inline, localhost)"
		} else {
			objs = append(objs, &metalv1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: metalv1alpha1.EndpointSpec{IP: "127.0.0.1", MACAddress: fmt.Sprintf("02:00:5e:00:02:%02x", i)}})
			spec.EndpointRef = &corev1.LocalObjectReference{Name: name}
			form += " (Endpoint)"
		}
		objs = append(objs, &metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec})
	case twinServer:
		sys := b.Systems()[0]
		objs = append(objs, &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: metalv1alpha1.ServerSpec{SystemUUID: strings.ToUpper(w.board[i][0]), SystemURI: "/redfish/v1/Systems/" + sys.ID(),
				BMC: &metalv1alpha1.BMCAccess{Protocol: proto, Address: "localhost", BMCSecretRef: corev1.LocalObjectReference{Name: name}}}})
		w.m.registerTwin(name, strings.ToLower(w.board[i][0]), time.Now())
	default:
		return "", fmt.Errorf("unknown form %q", st.Object)
	}
	var made []string
	for _, o := range objs {
		if err := w.c.Create(w.ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return strings.Join(made, ", "), fmt.Errorf("creating %T %s: %w", o, name, err)
		}
		made = append(made, fmt.Sprintf("%T", o)[len("*v1alpha1."):])
	}
	return fmt.Sprintf("%s registered again as %s: %s", w.bmcName(i), form, strings.Join(made, ", ")), nil
}

// untwin deletes the second registration of BMC i's machine, if there is one.
func (w *world) untwin(i int) string {
	name := w.twinName(i)
	var gone []string
	for _, o := range []client.Object{&metalv1alpha1.Server{}, &metalv1alpha1.BMC{}, &metalv1alpha1.Endpoint{}, &metalv1alpha1.BMCSecret{}} {
		o.SetName(name)
		if err := w.c.Delete(w.ctx, o); err == nil {
			gone = append(gone, fmt.Sprintf("%T", o)[len("*v1alpha1."):])
		} else if !apierrors.IsNotFound(err) {
			gone = append(gone, fmt.Sprintf("%T: %v", o, err))
		}
	}
	w.m.unregisterTwin(name, time.Now())
	if len(gone) == 0 {
		return name + ": nothing to delete"
	}
	return "deleted " + name + " " + strings.Join(gone, ", ")
}

// target is the second control plane moves go to: started once, on the first move, for the
// whole package; nothing runs on it (a cluster whose manager is not started yet).
var targetEnv atomic.Pointer[testenv.Env]

var moveTarget = sync.OnceValues(func() (*testenv.Env, error) {
	e, err := testenv.Start()
	if err == nil {
		targetEnv.Store(e)
	}
	return e, err
})

// moveRun is one move in flight or done: its output and result.
type moveRun struct {
	rack string
	out  *syncbuf.Buffer
	done chan struct{}
	err  error
}

// move starts "metalhub move --selector rack=<BMC i's rack>" to the target while the manager
// runs and the schedule goes on; the step does not wait for it.
func (w *world) move(i int) (string, error) {
	te, err := moveTarget()
	if err != nil {
		return "", fmt.Errorf("starting the move target: %w", err)
	}
	w.mu.Lock()
	busy := w.moving != nil
	w.mu.Unlock()
	if busy {
		return "", errSkip("a move is in progress")
	}
	if err := purgeTarget(w.ctx, te.Client); err != nil {
		return "", err
	}
	rack := fmt.Sprintf("r%d", i%2)
	for j := i % 2; j < w.sch.BMCs; j += 2 {
		w.disturbProbes(j, kFault) // every server of the rack is paused: no claim binds it meanwhile
	}
	mv := &moveRun{rack: rack, out: &syncbuf.Buffer{}, done: make(chan struct{})}
	w.mu.Lock()
	w.moving = mv
	w.mu.Unlock()
	go func() {
		defer close(mv.done)
		mv.err = migrate.Move(w.ctx, w.c, te.Client, migrate.MoveOptions{Out: mv.out,
			Selector: labels.SelectorFromSet(labels.Set{rackLabel: rack}), PauseTimeout: 20 * time.Second})
		if mv.err != nil {
			w.note("move of rack %s: %v", rack, mv.err)
		} else {
			w.note("move of rack %s finished: %s", rack, strings.ReplaceAll(strings.TrimSpace(mv.out.String()), "\n", "; "))
		}
	}()
	return "moving rack " + rack + " to the target cluster, the source's manager running", nil
}

// abandonMove waits for the move in flight (if any) and gives it up, as a user who keeps the
// source does (docs/migration.md): with no manager on the target, the source's objects lose the
// move's pause, acknowledgement and mark (the copies go before the next move).
func (w *world) abandonMove() string {
	w.mu.Lock()
	mv := w.moving
	w.mu.Unlock()
	if mv == nil {
		return "no move"
	}
	select {
	case <-mv.done:
	case <-time.After(45 * time.Second):
		return "the move of rack " + mv.rack + " has not ended after 45s"
	}
	w.mu.Lock()
	w.moving = nil
	w.mu.Unlock()
	// The target runs no manager, so its copies act on nothing: the source resumes at once, and
	// the next move empties the target before it starts.
	n, err := unpauseSource(w.ctx, w.c)
	res := fmt.Sprintf("move of rack %s given up (%s): %d source objects resumed", mv.rack, cmpErr(mv.err), n)
	if err != nil {
		res += ", " + err.Error()
	}
	w.m.poke()
	return res
}

func cmpErr(err error) string {
	if err == nil {
		return "it had finished"
	}
	return "it had failed: " + err.Error()
}

// moveKinds are the kinds a move pauses and marks.
var moveKinds = []client.ObjectList{&metalv1alpha1.EndpointList{}, &metalv1alpha1.BMCSecretList{}, &metalv1alpha1.BMCList{},
	&metalv1alpha1.ServerList{}, &metalv1alpha1.ServerClaimList{}, &maintenancev1alpha1.ServerMaintenanceList{},
	&metalv1alpha1.ServerMaintenanceList{}, &metalv1alpha1.ServerBootConfigurationList{}, &corev1.SecretList{}}

// unpauseSource removes a move's pause, acknowledgement and mark from every object of the
// source that carries them (merge patches: no race with the controllers' writes).
func unpauseSource(ctx context.Context, c client.Client) (int, error) {
	n := 0
	var errs []error
	for _, l := range moveKinds {
		list := l.DeepCopyObject().(client.ObjectList)
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			errs = append(errs, err)
			continue
		}
		items, _ := metaItems(list)
		for _, o := range items {
			a := o.GetAnnotations()
			if !strings.HasPrefix(a[lifecycle.PausedAnnotation], "move-") && a[migrate.MovedAnnotation] == "" {
				continue
			}
			patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null,%q:null,%q:null}}}`,
				lifecycle.PausedAnnotation, lifecycle.PauseAckAnnotation, migrate.MovedAnnotation))
			if err := c.Patch(ctx, o, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
}

// purgeTarget empties the move target: the fleet's kinds, the other maintenance group and every
// Secret of the namespace.
func purgeTarget(ctx context.Context, c client.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	for _, l := range []client.ObjectList{&maintenancev1alpha1.ServerMaintenanceList{}, &corev1.SecretList{}} {
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("listing %T on the target: %w", l, err)
		}
		items, _ := metaItems(l)
		for _, o := range items {
			if len(o.GetFinalizers()) > 0 {
				_ = c.Patch(ctx, o, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
			}
			if err := c.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting %T %s on the target: %w", o, o.GetName(), err)
			}
		}
	}
	return purge(ctx, c)
}

// metaItems returns a list's items as objects.
func metaItems(l client.ObjectList) ([]client.Object, error) {
	items, err := meta.ExtractList(l)
	if err != nil {
		return nil, err
	}
	out := make([]client.Object, 0, len(items))
	for _, it := range items {
		out = append(out, it.(client.Object))
	}
	return out, nil
}

// registerTwin tells the model that the harness made Server name by hand for a system that has
// its Server already: the two are one system's, and nothing may act on it through either while
// both exist.
func (m *model) registerTwin(name, uuid string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.twins[name] = &twinSpan{uuid: uuid, from: at}
}

func (m *model) unregisterTwin(name string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.twins[name]; t != nil && t.to.IsZero() {
		t.to = at
	}
}

// twinSpan is when a hand-made second Server of a system existed.
type twinSpan struct {
	uuid     string
	from, to time.Time
}

// judgeHandsOff breaches for an action on a system that was off limits from before the action's
// pass could have started until after it: registered twice (a hand-made twin Server alive, so
// invIdentity), or paused by a move whose pause the source had acknowledged (invPaused: after the
// acknowledgement no pass is in flight). It reports whether it breached.
func (m *model) judgeHandsOff(r redfish.Record, uuid string) bool {
	for name, t := range m.twins {
		if t.uuid != uuid || r.Time.Sub(t.from) < passBoundValue+time.Second || (!t.to.IsZero() && r.Time.After(t.to)) {
			continue
		}
		if m.twinAlive(name, r.Time) {
			m.breach(invIdentity, "twin "+name, "%s %s on system %s at +%s while it was registered twice (Server %s since +%s)",
				r.Action, r.ResetType, uuid, m.since(r.Time), name, m.since(t.from))
			m.judged = append(m.judged, judgedRecord{r, "registered twice"})
			return true
		}
	}
	m.checks[invPaused]++
	// acked is the poll, taken wholly before the action, from which on the server showed the
	// pause acknowledged; only a poll started after the action says it was still paused then.
	var acked *snapshot
	server, token := "", ""
	for _, s := range m.snaps {
		if s.Restoring {
			continue
		}
		found := ""
		for _, name := range s.serversOf(uuid) {
			if v := s.Servers[name]; strings.HasPrefix(v.Paused, "move-") && v.PauseAck == v.Paused {
				found = name
			}
		}
		switch {
		case !s.Start.Before(r.Time):
			if acked != nil && found == server && s.Servers[found].Paused == token {
				m.breach(invPaused, server, "%s %s on system %s at +%s, though the move's pause %s was acknowledged by +%s",
					r.Action, r.ResetType, uuid, m.since(r.Time), token, m.since(acked.End))
				m.judged = append(m.judged, judgedRecord{r, "paused"})
				return true
			}
			return false
		case s.End.Before(r.Time) && found != "":
			if acked == nil || found != server || s.Servers[found].Paused != token {
				acked, server, token = s, found, s.Servers[found].Paused
			}
		case found == "" || found != server || s.Servers[found].Paused != token:
			// Not paused (or paused anew) in a poll before the action, or in one that overlaps
			// it: the pause may have ended before the action.
			acked, server, token = nil, "", ""
		}
	}
	return false
}

// twinAlive reports whether the twin Server name showed in a poll around t (the harness may have
// failed to create it).
func (m *model) twinAlive(name string, t time.Time) bool {
	for _, s := range m.evidence(t) {
		if v := s.Servers[name]; v != nil && !v.Deleting {
			return true
		}
	}
	return false
}

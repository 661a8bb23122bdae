package campaign

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
)

func claimKey(slot int) client.ObjectKey {
	return client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("claim-%d", slot)}
}

func maintKey(slot int) client.ObjectKey {
	return client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("maint-%d", slot)}
}

// target resolves a step's server/BMC index: with Claimed, the Index-th of the servers claimed
// right now (if any), so that faults and operations land on what is worth protecting.
func (w *world) target(st step) int {
	n := w.sch.BMCs
	if st.Claimed {
		if s := w.m.last(); s != nil {
			var claimed []int
			for i := range n {
				if v := s.Servers[w.serverName(i)]; v != nil && v.ClaimRef != "" {
					claimed = append(claimed, i)
				}
			}
			if len(claimed) > 0 {
				return claimed[st.Index%len(claimed)]
			}
		}
	}
	return st.Index % n
}

// run executes one step and says what happened. A follow-up (heal, unpark, fixed secret, ...)
// acts on the target its origin resolved to.
func (w *world) run(st step) string {
	i, ok := w.resolved[st.Origin]
	if !ok || st.Origin < 0 {
		i = w.target(st)
	}
	if st.Kind == kBMCOperation && st.Origin >= 0 {
		i = (i + st.Slot) % w.sch.BMCs // a rotation asked of one BMC of a shared Secret
	}
	w.resolved[st.ID] = i
	w.disturbCut(st, i)
	switch st.Kind {
	case kClaimByName:
		w.disturbProbes(i, st.Kind) // another claim for the probe's server competes with it
	case kClaimBySelector:
		for j := range w.sch.BMCs {
			if st.Rack == "" || st.Rack == fmt.Sprintf("r%d", j%2) {
				w.disturbProbes(j, st.Kind)
			}
		}
	case kClaimDelete, kClaimPower, kMaintApprove, kMaintDelete, kBackup, kProbe, kFixSecret, kRecreate, kUnshare, kFirmwareDelete, kReconnect:
	case kShare:
		w.disturbProbes((i+st.Slot)%w.sch.BMCs, st.Kind)
	default:
		w.disturbProbes(i, st.Kind)
	}
	out, err := w.exec(st, i)
	w.m.poke()
	switch {
	case isSkip(err):
		return "skipped: " + err.Error()
	case err != nil:
		return "refused: " + err.Error()
	}
	return out
}

func (w *world) exec(st step, i int) (string, error) {
	server := w.serverName(i)
	switch st.Kind {
	case kClaimByName, kClaimBySelector:
		c := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claimKey(st.Slot).Name},
			Spec: metalv1alpha1.ServerClaimSpec{Power: st.Power, Image: "campaign-image"}}
		if st.Kind == kClaimByName {
			c.Spec.ServerRef = &corev1.LocalObjectReference{Name: server}
		} else if st.Rack != "" {
			c.Spec.ServerSelector = &metav1.LabelSelector{MatchLabels: map[string]string{rackLabel: st.Rack}}
		}
		if st.Tolerate {
			c.Spec.Tolerations = []metalv1alpha1.Toleration{{Key: taintKey, Operator: metalv1alpha1.TolerationOpExists}}
		}
		if err := w.c.Create(w.ctx, c); apierrors.IsAlreadyExists(err) {
			return "", errSkip(c.Name + " exists")
		} else if err != nil {
			return "", err
		}
		if st.Kind == kClaimByName {
			return "created " + c.Name + " for " + server, nil
		}
		return "created " + c.Name, nil
	case kClaimDelete:
		return w.delete(&metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claimKey(st.Slot).Name}})
	case kClaimPower:
		var to metalv1alpha1.Power
		err := w.patch(claimKey(st.Slot), &metalv1alpha1.ServerClaim{}, func(o client.Object) error {
			c := o.(*metalv1alpha1.ServerClaim)
			if !c.DeletionTimestamp.IsZero() {
				return errSkip("claim being deleted")
			}
			to = metalv1alpha1.PowerOff
			if c.Spec.Power == metalv1alpha1.PowerOff {
				to = metalv1alpha1.PowerOn
			}
			c.Spec.Power = to
			return nil
		})
		return "power " + string(to), notFoundSkip(err)
	case kCordon:
		return server + fmt.Sprintf(" unclaimable=%v", st.On), notFoundSkip(w.patch(client.ObjectKey{Name: server}, &metalv1alpha1.Server{}, func(o client.Object) error {
			o.(*metalv1alpha1.Server).Spec.Unclaimable = st.On
			return nil
		}))
	case kTaint:
		return server + fmt.Sprintf(" taint %q", st.Effect), notFoundSkip(w.patch(client.ObjectKey{Name: server}, &metalv1alpha1.Server{}, func(o client.Object) error {
			s := o.(*metalv1alpha1.Server)
			s.Spec.Taints = slices.DeleteFunc(s.Spec.Taints, func(t metalv1alpha1.Taint) bool { return t.Key == taintKey })
			if st.Effect != "" {
				s.Spec.Taints = append(s.Spec.Taints, metalv1alpha1.Taint{Key: taintKey, Value: "campaign", Effect: st.Effect})
			}
			return nil
		}))
	case kOperation:
		return w.operation(st, i)
	case kBMCOperation:
		setAt := time.Now()
		var uid string
		err := w.patch(client.ObjectKey{Name: w.bmcName(i)}, &metalv1alpha1.BMC{}, func(o client.Object) error {
			if op := o.GetAnnotations()[metalv1alpha1.OperationAnnotation]; op != "" {
				return errSkip("operation " + op + " pending")
			}
			if o.GetDeletionTimestamp() != nil {
				return errSkip("BMC being deleted")
			}
			uid, setAt = string(o.GetUID()), time.Now()
			setAnnotation(o, metalv1alpha1.OperationAnnotation, st.Op)
			return nil
		})
		if err != nil {
			return "", notFoundSkip(err)
		}
		w.m.registerBMCOp(w.bmcName(i), uid, i, st.Op, setAt)
		return w.bmcName(i) + " " + st.Op, nil
	case kMaintCreate:
		m := &metalv1alpha1.ServerMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: maintKey(st.Slot).Name,
			Annotations: map[string]string{metalv1alpha1.MaintenanceReasonAnnotation: "campaign"}},
			Spec: metalv1alpha1.ServerMaintenanceSpec{ServerRef: &corev1.LocalObjectReference{Name: server}, Policy: st.Policy,
				Priority: int32(st.Slot), ServerPower: st.Power}}
		if st.Template {
			m.Spec.ServerBootConfigurationTemplate = &metalv1alpha1.ServerBootConfigurationTemplate{Name: m.Name + "-boot",
				Spec: metalv1alpha1.ServerBootConfigurationSpec{ServerRef: corev1.LocalObjectReference{Name: server}, Image: "maintenance-image"}}
		}
		if err := w.c.Create(w.ctx, m); apierrors.IsAlreadyExists(err) {
			return "", errSkip(m.Name + " exists")
		} else if err != nil {
			return "", err
		}
		return "created " + m.Name + " for " + server, nil
	case kMaintApprove:
		return w.approve(st)
	case kMaintDelete:
		return w.delete(&metalv1alpha1.ServerMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: maintKey(st.Slot).Name}})
	case kDeleteServer:
		return w.delete(&metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: server}})
	case kDeleteBMC:
		// With its BMCSecret: one `kubectl delete -f` of the BMC's manifest, or a GitOps prune.
		out, err := w.delete(&metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: w.bmcName(i)}})
		if err != nil || !st.WithSecret {
			return out, err
		}
		out2, err := w.delete(&metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: w.bmcName(i)}})
		return out + ", " + out2, notFoundSkip(err)
	case kDeleteSecret:
		return w.delete(&metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: w.bmcName(i)}})
	case kDeleteEndpoint:
		if !w.sch.Endpoint[i] {
			return "", errSkip(w.bmcName(i) + " has inline access")
		}
		return w.delete(&metalv1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Name: w.bmcName(i)}})
	case kRecreate:
		return w.ensureBMC(i)
	case kFixSecret:
		return w.fixSecret(i)
	case kWipeStatus:
		return w.wipe(st, i)
	case kStrip:
		return w.strip(st, i)
	case kKill:
		s := w.leader()
		if h := w.holderOf(i); h != nil {
			s = h
		}
		if s == nil {
			s = w.slots[st.Index%len(w.slots)]
		}
		s.stop(syscall.SIGKILL)
		s.start()
		return fmt.Sprintf("SIGKILLed and restarted manager-%d", s.idx), nil
	case kHandover:
		s := w.leader()
		if h := w.holderOf(i); h != nil {
			s = h
		}
		if s == nil {
			return "", errSkip("no leader right now")
		}
		s.stop(syscall.SIGTERM)
		s.start()
		return fmt.Sprintf("manager-%d stopped (SIGTERM, lease released) and restarted as standby", s.idx), nil
	case kBackup:
		b, err := w.takeBackup()
		if err != nil {
			return "", err
		}
		w.mu.Lock()
		w.backup = b
		w.mu.Unlock()
		return fmt.Sprintf("saved %d objects", len(b.objs)), nil
	case kRestore:
		w.mu.Lock()
		b := w.backup
		w.mu.Unlock()
		if b == nil {
			return "", errSkip("no backup")
		}
		return w.restore(b)
	case kFault:
		return w.fault(st, i, true)
	case kHeal:
		return w.fault(st, i, false)
	case kCredentials:
		b := w.fleet.BMC(i)
		user, _ := b.Credentials()
		w.mu.Lock()
		w.credsChanged[i] = true
		w.mu.Unlock()
		b.SetCredentials(user, fmt.Sprintf("changed-%d-%d", w.sch.Seed, st.ID))
		n := b.ExpireSessions()
		return fmt.Sprintf("%s password changed on the BMC, %d sessions expired", w.bmcName(i), n), nil
	case kProbe:
		return w.startProbe(st)
	case kShare:
		return w.share(i, (i+st.Slot)%w.sch.BMCs)
	case kUnshare:
		return w.unshare((i + st.Slot) % w.sch.BMCs)
	case kFirmware:
		return w.upgrade(st, i)
	case kPartition:
		return w.partition(st, i)
	case kReconnect:
		return w.reconnect()
	case kFirmwareDelete:
		if st.Set {
			return w.delete(&systemv1alpha1.BIOSVersionSet{ObjectMeta: metav1.ObjectMeta{Name: biosName(st.Origin)}})
		}
		return w.delete(&systemv1alpha1.BIOSVersion{ObjectMeta: metav1.ObjectMeta{Name: biosName(st.Origin)}})
	}
	return "", fmt.Errorf("unknown step kind %q", st.Kind)
}

func notFoundSkip(err error) error {
	if apierrors.IsNotFound(err) {
		return errSkip("not found")
	}
	return err
}

func (w *world) delete(o client.Object) (string, error) {
	err := w.c.Delete(w.ctx, o)
	if err != nil {
		return "", notFoundSkip(err)
	}
	return fmt.Sprintf("deleted %T %s", o, o.GetName())[len("deleted *v1alpha1."):], nil
}

func setAnnotation(o client.Object, k, v string) {
	a := o.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	o.SetAnnotations(a)
}

// operation sets an operation annotation on a server that has none pending (a careful user waits
// for the previous one), or removes an ignore.
func (w *world) operation(st step, i int) (string, error) {
	server := w.serverName(i)
	var uid, uuid string
	setAt := time.Now()
	err := w.patch(client.ObjectKey{Name: server}, &metalv1alpha1.Server{}, func(o client.Object) error {
		s := o.(*metalv1alpha1.Server)
		cur := s.Annotations[metalv1alpha1.OperationAnnotation]
		if st.Op == "" {
			if cur != metalv1alpha1.OperationIgnore {
				return errSkip("not ignored")
			}
			delete(s.Annotations, metalv1alpha1.OperationAnnotation)
			return nil
		}
		if cur != "" {
			return errSkip("operation " + cur + " pending")
		}
		if !s.DeletionTimestamp.IsZero() {
			return errSkip("server being deleted")
		}
		uid, uuid = string(s.UID), strings.ToLower(s.Spec.SystemUUID)
		setAt = time.Now()
		setAnnotation(s, metalv1alpha1.OperationAnnotation, st.Op)
		return nil
	})
	if err != nil {
		return "", notFoundSkip(err)
	}
	if st.Op == "" {
		return server + ": ignore removed", nil
	}
	w.m.registerOp(server, uid, uuid, st.Op, setAt)
	if st.Touch {
		err := w.patch(client.ObjectKey{Name: server}, &metalv1alpha1.Server{}, func(o client.Object) error {
			l := o.GetLabels()
			if l == nil {
				l = map[string]string{}
			}
			l["campaign.metalhub.io/edited"] = fmt.Sprint(st.ID)
			o.SetLabels(l)
			return nil
		})
		if err != nil {
			return server + ": " + st.Op + ", label edit refused: " + err.Error(), nil
		}
		return server + ": " + st.Op + ", then a label edit", nil
	}
	return server + ": " + st.Op, nil
}

// approve is the claim owner's approval of a maintenance: the label on the claim that holds the
// maintenance's server.
func (w *world) approve(st step) (string, error) {
	m := &metalv1alpha1.ServerMaintenance{}
	if err := w.c.Get(w.ctx, maintKey(st.Slot), m); err != nil {
		return "", notFoundSkip(err)
	}
	s := &metalv1alpha1.Server{}
	if m.Spec.ServerRef == nil {
		return "", errSkip("no server")
	}
	if err := w.c.Get(w.ctx, client.ObjectKey{Name: m.Spec.ServerRef.Name}, s); err != nil {
		return "", notFoundSkip(err)
	}
	if s.Spec.ServerClaimRef == nil {
		return "", errSkip(s.Name + " not claimed")
	}
	key := client.ObjectKey{Namespace: s.Spec.ServerClaimRef.Namespace, Name: s.Spec.ServerClaimRef.Name}
	return "approved on " + key.Name, notFoundSkip(w.patch(key, &metalv1alpha1.ServerClaim{}, func(o client.Object) error {
		l := o.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		l[metalv1alpha1.MaintenanceApprovedLabel] = "true"
		o.SetLabels(l)
		return nil
	}))
}

// fixSecret is the user catching up with a changed BMC password.
func (w *world) fixSecret(i int) (string, error) {
	w.mu.Lock()
	delete(w.credsChanged, i)
	w.mu.Unlock()
	user, pass := w.fleet.BMC(i).Credentials()
	return w.bmcName(i) + " BMCSecret updated", notFoundSkip(w.patch(client.ObjectKey{Name: w.bmcName(i)}, &metalv1alpha1.BMCSecret{}, func(o client.Object) error {
		s := o.(*metalv1alpha1.BMCSecret)
		s.Data = nil
		s.StringData = map[string]string{metalv1alpha1.BMCSecretUsernameKey: user, metalv1alpha1.BMCSecretPasswordKey: pass}
		return nil
	}))
}

// object returns the object a wipe or strip hits, with its key.
func (w *world) object(st step, i int) (client.Object, client.ObjectKey, error) {
	switch st.Object {
	case oServer:
		return &metalv1alpha1.Server{}, client.ObjectKey{Name: w.serverName(i)}, nil
	case oClaim:
		return &metalv1alpha1.ServerClaim{}, claimKey(st.Slot), nil
	case oMaintenance:
		return &metalv1alpha1.ServerMaintenance{}, maintKey(st.Slot % maintenanceSlots), nil
	case oBMC:
		return &metalv1alpha1.BMC{}, client.ObjectKey{Name: w.bmcName(i)}, nil
	case oBootConfig:
		var list metalv1alpha1.ServerBootConfigurationList
		if err := w.c.List(w.ctx, &list); err != nil {
			return nil, client.ObjectKey{}, err
		}
		if len(list.Items) == 0 {
			return nil, client.ObjectKey{}, errSkip("no boot configuration")
		}
		slices.SortFunc(list.Items, func(a, b metalv1alpha1.ServerBootConfiguration) int {
			return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
		})
		o := &list.Items[(st.Index+st.Slot)%len(list.Items)]
		return &metalv1alpha1.ServerBootConfiguration{}, client.ObjectKeyFromObject(o), nil
	}
	return nil, client.ObjectKey{}, fmt.Errorf("unknown object kind %q", st.Object)
}

// wipe empties an object's status, as a restore without status or a careless tool would.
func (w *world) wipe(st step, i int) (string, error) {
	o, key, err := w.object(st, i)
	if err != nil {
		return "", err
	}
	err = retryConflict(func() error {
		if err := w.c.Get(w.ctx, key, o); err != nil {
			return err
		}
		clearStatus(o)
		return w.c.Status().Update(w.ctx, o)
	})
	return fmt.Sprintf("%s %s status wiped", st.Object, key.Name), notFoundSkip(err)
}

// strip removes the controllers' own annotations (lifecycle.metalhub.io/*, discovery.metalhub.io/*)
// from an object, as a restore from a backup made before they existed would.
func (w *world) strip(st step, i int) (string, error) {
	o, key, err := w.object(st, i)
	if err != nil {
		return "", err
	}
	var removed []string
	err = w.patch(key, o, func(o client.Object) error {
		removed = removed[:0]
		a := o.GetAnnotations()
		for k := range a {
			if strings.HasPrefix(k, "lifecycle.metalhub.io/") || strings.HasPrefix(k, "discovery.metalhub.io/") {
				removed = append(removed, k)
				delete(a, k)
			}
		}
		if len(removed) == 0 {
			return errSkip("none to strip")
		}
		o.SetAnnotations(a)
		return nil
	})
	if err != nil {
		return "", notFoundSkip(err)
	}
	if st.Object == oServer {
		w.m.disturbOps(key.Name, "its bookkeeping annotations were stripped")
	}
	slices.Sort(removed)
	return fmt.Sprintf("%s %s: removed %v", st.Object, key.Name, removed), nil
}

func retryConflict(f func() error) error {
	var err error
	for range 5 {
		if err = f(); !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

// fault sets (or, for a heal, clears) one BMC fault.
func (w *world) fault(st step, i int, set bool) (string, error) {
	switch {
	case st.Fault == fTwin && set:
		w.mu.Lock()
		w.twinned[i] = true
		w.mu.Unlock()
		return w.twin(st, i)
	case st.Fault == fTwin:
		w.mu.Lock()
		delete(w.twinned, i)
		w.mu.Unlock()
		return w.untwin(i), nil
	case st.Fault == fMove && set:
		return w.move(i)
	case st.Fault == fMove:
		return w.abandonMove(), nil
	}
	b := w.fleet.BMC(i)
	w.mu.Lock()
	f := &w.faults[i]
	switch st.Fault {
	case fStatus500, fStatus503:
		f.Status = 0
		if set {
			f.Status = map[string]int{fStatus500: 500, fStatus503: 503}[st.Fault]
		}
	case fHang, fUnreachable:
		f.Hang = set
	case fDrop:
		f.DropConnection = set
	case fLatency:
		f.Latency = w.baseFaults(i).Latency
		if set {
			f.Latency = redfish.Duration(st.Value)
		}
	case fIgnoreGraceful:
		f.IgnoreGracefulShutdown = set
	case fFailedPower:
		f.FailPowerTransitions = set
	case fUnauthorized:
		f.Unauthorized = set
	case fBrokenInventory:
		f.BrokenCollections = w.baseFaults(i).BrokenCollections
		if set {
			f.BrokenCollections = map[string]int{"Processors": 500, "Memory": 500}
		}
	case fAfterEffect:
		f.ErrorAfterEffect = 0
		if set {
			f.ErrorAfterEffect = 500
		}
	case fFlashLost:
		f.ErrorAfterEffect, f.TasksWithoutPayload = 0, set
		if set {
			f.ErrorAfterEffect = 500
		}
	case fFlashInert:
		f.UpdateChangesNothing = set
	case fAddressReuse:
		w.astray[i] = set
		if set {
			b.AnswerAs(w.fleet.BMC((i + 1) % w.sch.BMCs))
		} else {
			b.AnswerAs(nil)
		}
	case fBoardSwap:
		w.astray[i] = set
		w.swapBoard(i, set)
	case fSlowPower, fStuckPower:
		w.slow[i] = set
		if set {
			b.SetPowerDelay(st.Value)
		} else {
			b.SetPowerDelay(w.sch.PowerDelay)
		}
	}
	b.SetFaults(*f)
	w.mu.Unlock()
	verb := "healed"
	if set {
		verb = "set"
	}
	out := fmt.Sprintf("%s %s %s", w.bmcName(i), st.Fault, verb)
	if set && st.Fault == fBrokenInventory {
		// A wiped status makes the controller walk the inventory again, into the broken collections.
		wiped, err := w.wipe(step{Object: oServer}, i)
		if err != nil {
			return out, notFoundSkip(err)
		}
		out += ", " + wiped
	}
	return out, nil
}

// swapBoard gives BMC i's system a replaced board's identity, or its own back.
func (w *world) swapBoard(i int, swapped bool) {
	uuid, serial := w.board[i][0], w.board[i][1]
	if swapped {
		uuid, serial = "5a5a5a5a"+uuid[8:], "SWAP"+serial
	}
	w.fleet.BMC(i).Systems()[0].ReplaceBoard(uuid, serial)
}

// dead lists the BMCs that answer nothing useful right now.
func (w *world) dead() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for i, f := range w.faults {
		if f.Hang || f.DropConnection || f.Status != 0 || f.Unauthorized || w.astray[i] {
			out = append(out, i)
		}
	}
	return out
}

// heal ends every fault: BMCs answer, power transitions take their normal time, credentials and
// BMCSecrets agree again, ignored servers are handed back, and the fleet's objects all exist.
func (w *world) heal() {
	if out, err := w.reconnect(); err == nil {
		w.note("heal: %s", out)
	}
	for j := range w.sch.BMCs {
		if out, err := w.unshare(j); err != nil && !isSkip(err) {
			w.note("heal: %s: %v", out, err)
		} else if err == nil {
			w.note("heal: %s", out)
		}
	}
	if out := w.abandonMove(); out != "no move" {
		w.note("heal: %s", out)
	}
	// A backup taken during a move restores paused objects: the user who gave the move up
	// unpauses those too.
	if n, err := unpauseSource(w.ctx, w.c); n > 0 || err != nil {
		w.note("heal: %d objects restored paused by a move resumed (%v)", n, err)
	}
	// Every second registration goes, also one a restore brought back after its own heal.
	for i := range w.sch.BMCs {
		w.mu.Lock()
		delete(w.twinned, i)
		w.mu.Unlock()
		if out := w.untwin(i); !strings.HasSuffix(out, "nothing to delete") {
			w.note("heal: %s", out)
		}
	}
	for i, b := range w.fleet.BMCs() {
		w.mu.Lock()
		w.faults[i], w.slow[i] = w.baseFaults(i), false
		b.SetFaults(w.faults[i])
		b.AnswerAs(nil)
		w.swapBoard(i, false)
		w.astray[i] = false
		w.mu.Unlock()
		b.SetPowerDelay(w.sch.PowerDelay)
		if u, p := b.Credentials(); u != w.user[i] || p != w.pass[i] {
			b.SetCredentials(w.user[i], w.pass[i])
		}
		if out, err := w.fixSecret(i); err != nil && !isSkip(err) {
			w.note("heal: %s: %v", out, err)
		}
		if out, err := w.ensureBMC(i); err != nil {
			w.note("heal: %s: %v", out, err)
		}
		_, _ = w.operation(step{Op: ""}, i)
	}
	w.m.poke()
}

// share points BMC j at BMC i's BMCSecret and gives j's emulated BMC the credentials in it, as
// a fleet whose BMCs share one account does; j's own BMCSecret stays for the unshare.
func (w *world) share(i, j int) (string, error) {
	if i == j {
		return "", errSkip("one BMC")
	}
	sec := &metalv1alpha1.BMCSecret{}
	if err := w.c.Get(w.ctx, client.ObjectKey{Name: w.bmcName(i)}, sec); err != nil {
		return "", notFoundSkip(err)
	}
	user, _ := sec.Value(metalv1alpha1.BMCSecretUsernameKey)
	pass, _ := sec.Value(metalv1alpha1.BMCSecretPasswordKey)
	if _, pending := sec.Value(metalv1alpha1.BMCSecretPendingPasswordKey); pending {
		// The password may change under the partner at any moment: not what this step tests.
		return "", errSkip(w.bmcName(i) + " has a rotation under way")
	}
	w.mu.Lock()
	_, busy := w.shared[i]
	_, joined := w.shared[j]
	if !busy && !joined {
		w.shared[j] = i
	}
	w.mu.Unlock()
	if busy || joined {
		return "", errSkip("already sharing")
	}
	w.fleet.BMC(j).SetCredentials(user, pass)
	err := w.patch(client.ObjectKey{Name: w.bmcName(j)}, &metalv1alpha1.BMC{}, func(o client.Object) error {
		if o.GetDeletionTimestamp() != nil {
			return errSkip("BMC being deleted")
		}
		o.(*metalv1alpha1.BMC).Spec.BMCSecretRef.Name = w.bmcName(i)
		return nil
	})
	if err != nil {
		_, _ = w.unshare(j)
		return "", notFoundSkip(err)
	}
	return fmt.Sprintf("%s now names BMCSecret %s", w.bmcName(j), w.bmcName(i)), nil
}

// unshare gives BMC j its own credentials and BMCSecret back (nothing when it shares none).
func (w *world) unshare(j int) (string, error) {
	w.mu.Lock()
	i, ok := w.shared[j]
	delete(w.shared, j)
	w.mu.Unlock()
	if !ok {
		return "", errSkip("not sharing")
	}
	b := w.fleet.BMC(j)
	b.SetCredentials(w.user[j], w.pass[j])
	if out, err := w.fixSecret(j); err != nil && !isSkip(err) {
		return out, err
	}
	err := w.patch(client.ObjectKey{Name: w.bmcName(j)}, &metalv1alpha1.BMC{}, func(o client.Object) error {
		o.(*metalv1alpha1.BMC).Spec.BMCSecretRef.Name = w.bmcName(j)
		return nil
	})
	return fmt.Sprintf("%s names its own BMCSecret again, not %s's", w.bmcName(j), w.bmcName(i)), notFoundSkip(err)
}

// biosName is the BIOSVersion a kFirmware step (by ID) creates.
func biosName(id int) string { return fmt.Sprintf("bios-%d", id) }

// upgrade sets the step's firmware fault on BMC i and asks for a BIOS upgrade of its server, in
// an Enforced maintenance (a claimed server is taken without its owner's approval).
func (w *world) upgrade(st step, i int) (string, error) {
	if !featuresOf(w.slots[0].bin).firmware {
		return "", errSkip("the manager binary has no firmware controllers")
	}
	out := ""
	if st.Fault != "" {
		var err error
		if out, err = w.fault(st, i, true); err != nil {
			return out, err
		}
		out += ", "
	}
	name := biosName(st.ID)
	if st.Set {
		return w.upgradeSet(st, i, name, out)
	}
	v := &systemv1alpha1.BIOSVersion{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: systemv1alpha1.BIOSVersionSpec{
		ServerRef: &corev1.LocalObjectReference{Name: w.serverName(i)},
		BIOSVersionTemplate: systemv1alpha1.BIOSVersionTemplate{Version: fmt.Sprintf("campaign-%d", st.ID),
			ServerMaintenancePolicy: metalv1alpha1.ServerMaintenancePolicyEnforced,
			Image:                   systemv1alpha1.ImageSpec{URI: fmt.Sprintf("http://fw.example/campaign/%d/%s.bin", w.sch.Seed, name)}}}}
	if err := w.c.Create(w.ctx, v); err != nil {
		return out, err
	}
	w.m.poke()
	return out + fmt.Sprintf("created BIOSVersion %s for %s", name, w.serverName(i)), nil
}

// setLabel marks the servers a campaign BIOSVersionSet selects.
const setLabel = "campaign.metalhub.io/bios-set"

// upgradeSet asks for a BIOS upgrade of server i and the next one as a BIOSVersionSet that works
// on one at a time: the model holds it to one flash per box and to its wave size, and a deletion
// mid-flash to neither.
func (w *world) upgradeSet(st step, i int, name, out string) (string, error) {
	targets := []int{i, (i + 1) % w.sch.BMCs}
	for _, j := range targets {
		err := w.patch(client.ObjectKey{Name: w.serverName(j)}, &metalv1alpha1.Server{}, func(o client.Object) error {
			l := o.GetLabels()
			if l == nil {
				l = map[string]string{}
			}
			l[setLabel] = name
			o.SetLabels(l)
			return nil
		})
		if client.IgnoreNotFound(err) != nil {
			return out, err
		}
	}
	one := intstr.FromInt32(1)
	set := &systemv1alpha1.BIOSVersionSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: systemv1alpha1.BIOSVersionSetSpec{
		ServerSelector: metav1.LabelSelector{MatchLabels: map[string]string{setLabel: name}},
		BIOSVersionTemplate: systemv1alpha1.BIOSVersionTemplate{Version: fmt.Sprintf("campaign-%d", st.ID),
			ServerMaintenancePolicy: metalv1alpha1.ServerMaintenancePolicyEnforced,
			Image:                   systemv1alpha1.ImageSpec{URI: setImage(w.sch.Seed, name)}},
		Rollout: &systemv1alpha1.RolloutSpec{MaxUnavailable: &one}}}
	if err := w.c.Create(w.ctx, set); err != nil {
		return out, err
	}
	w.m.poke()
	return out + fmt.Sprintf("created BIOSVersionSet %s for %s and %s", name, w.serverName(targets[0]), w.serverName(targets[1])), nil
}

// setImage is a campaign BIOSVersionSet's image: every box it selects gets it (the model tells a
// set's images by setImagePart).
func setImage(seed uint64, name string) string {
	return fmt.Sprintf("http://fw.example/campaign/%d/%s%s.bin", seed, setImagePart, name)
}

const setImagePart = "set-"

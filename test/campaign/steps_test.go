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
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
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
	var state string
	err = w.patch(key, o, func(o client.Object) error {
		removed = removed[:0]
		a := o.GetAnnotations()
		state = a[lifecycle.StateAnnotation]
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
		w.m.disturbCleaning(key.Name, state, "its bookkeeping annotations were stripped")
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

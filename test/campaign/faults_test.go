package campaign

import (
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
)

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
		uuid, serial = swappedBoard(uuid, serial)
	}
	w.fleet.BMC(i).Systems()[0].ReplaceBoard(uuid, serial)
}

// swappedBoard is the identity of the board a board-swap puts in.
func swappedBoard(uuid, serial string) (string, string) {
	return "5a5a5a5a" + uuid[8:], "SWAP" + serial
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

package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/probe"
	"github.com/metalhub/metalhub/internal/probe/erase"
)

// A cleaning through the BMC (Options.CleaningBMCErase) erases with the BMC's own actions and
// boots nothing: each drive's Drive.SecureErase, or, for a drive without it, the Slow
// Volume.Initialize of the volume it is in. It is a round like the agent's (its id starts with
// bmcRoundPrefix, in CleaningRoundAnnotation), its tasks bookkeeping in
// CleaningTasksAnnotation, and its outcome an entry of the same cleaning record, judged by the
// same Verdict against every drive the BMC shows. An erase is started at least once: a crash
// between its POST and the write that records its task starts it again, which erases again and
// costs time, never data.

const bmcRoundPrefix = "bmc-"

// eraseStep is one BMC action of a cleaning and the drives it erases.
type eraseStep struct {
	target   string
	method   string // cleaning.MethodBMCSecureErase or MethodBMCVolumeInitialize
	initType string // for an Initialize
	drives   []bmc.StorageDrive
	what     string
}

// planBMCErase lists the BMC actions that erase every drive of the system, in a stable order,
// or says why the BMC cannot (then the agent cleans).
func planBMCErase(layout bmc.StorageLayout) ([]eraseStep, string) {
	var steps []eraseStep
	n := 0
	for _, c := range layout.Controllers {
		byVolume := map[string]*eraseStep{}
		for _, d := range c.Drives {
			n++
			if d.SecureEraseTarget != "" {
				steps = append(steps, eraseStep{target: d.SecureEraseTarget, method: cleaning.MethodBMCSecureErase, drives: []bmc.StorageDrive{d},
					what: "drive " + d.ID})
				continue
			}
			k := slices.IndexFunc(c.Volumes, func(v bmc.StorageVolume) bool { return slices.Contains(v.Drives, d.ODataID) && slowInit(v) })
			if k < 0 {
				return nil, fmt.Sprintf("drive %s of storage controller %s has no SecureErase and is in no volume the BMC initializes by writing it", d.ID, c.ID)
			}
			v := c.Volumes[k]
			if st := byVolume[v.ODataID]; st != nil {
				st.drives = append(st.drives, d)
				continue
			}
			steps = append(steps, eraseStep{target: v.InitializeTarget, method: cleaning.MethodBMCVolumeInitialize, initType: "Slow",
				drives: []bmc.StorageDrive{d}, what: "volume " + v.ID})
			byVolume[v.ODataID] = &steps[len(steps)-1]
		}
	}
	if n == 0 {
		return nil, "the BMC shows no drives (SimpleStorage only, or none)"
	}
	return steps, ""
}

// slowInit reports whether v's Initialize writes every block (Slow); Fast may clear no more
// than metadata.
func slowInit(v bmc.StorageVolume) bool {
	return v.InitializeTarget != "" && (len(v.InitializeTypes) == 0 || slices.Contains(v.InitializeTypes, "Slow"))
}

// startBMCErase begins a cleaning through the BMC where the BMC can erase every drive: the box
// is powered off first, then the round is recorded (no action yet). ok is false when the BMC
// cannot, and the agent cleans.
func (r *Reconciler) startBMCErase(bctx, ctx context.Context, p *serverPass) (res lifecycle.Result, ok bool, err error) {
	layout, err := p.conn.StorageLayout(bctx, p.sysID)
	if err != nil {
		return lifecycle.Result{}, true, fmt.Errorf("reading the storage to erase it through the BMC: %w", err)
	}
	if _, why := planBMCErase(layout); why != "" {
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "BMCEraseUnavailable", "Clean", "%s; the cleaning agent erases instead", why)
		return lifecycle.Result{}, false, nil
	}
	if res, err := r.converge(ctx, p, metalv1alpha1.PowerOff, false); err != nil || !res.IsContinue() {
		return res, true, err
	}
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	round := cleaningRound{id: bmcRoundPrefix + hex.EncodeToString(id), at: r.Now()}
	return lifecycle.Wrote("BMC erase round"), true, r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		lifecycle.SetAnnotation(s, serverstate.CleaningAnnotation, string(metalv1alpha1.CleaningPolicyAllDisks))
		lifecycle.SetAnnotation(s, serverstate.CleaningRoundAnnotation, round.String())
		lifecycle.SetAnnotation(s, serverstate.CleaningTasksAnnotation, "{}")
	})
}

// bmcErase carries a BMC round on, one write per pass: the next erase started and its task
// recorded; a finished task recorded as done; once every step is done, the record's entry
// written; then the verdict, as for the agent's report.
func (r *Reconciler) bmcErase(bctx, ctx context.Context, p *serverPass, policy metalv1alpha1.CleaningPolicy, round cleaningRound) (lifecycle.Result, error) {
	if left := r.Options.CleaningTimeout - r.Now().Sub(round.at); left <= 0 {
		return r.cleaningFailed(bctx, ctx, p, fmt.Sprintf("the BMC's erase of round %s did not finish within %s", round.id, r.Options.CleaningTimeout))
	}
	layout, err := p.conn.StorageLayout(bctx, p.sysID)
	if err != nil {
		return lifecycle.Result{}, fmt.Errorf("reading the storage being erased: %w", err)
	}
	steps, why := planBMCErase(layout)
	if why != "" {
		return r.cleaningFailed(bctx, ctx, p, "the BMC can no longer erase every drive: "+why)
	}
	tasks := map[string]string{}
	if v := p.Obj.Annotations[serverstate.CleaningTasksAnnotation]; v != "" {
		if err := json.Unmarshal([]byte(v), &tasks); err != nil {
			tasks = map[string]string{} // unreadable: every erase is started again
		}
	}
	record := func(target, task string) (lifecycle.Result, error) {
		tasks[target] = task
		b, _ := json.Marshal(tasks)
		return lifecycle.Wrote("BMC erase task"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
			lifecycle.SetAnnotation(s, serverstate.CleaningTasksAnnotation, string(b))
		})
	}
	for _, st := range steps {
		if _, started := tasks[st.target]; started {
			continue
		}
		var task string
		if st.method == cleaning.MethodBMCSecureErase {
			task, err = p.conn.SecureEraseDrive(bctx, p.sysID, st.target)
		} else {
			task, err = p.conn.InitializeVolume(bctx, p.sysID, st.target, st.initType)
		}
		if err != nil {
			if bmc.ReasonOf(err) == bmc.ReasonUnsupported {
				return r.cleaningFailed(bctx, ctx, p, fmt.Sprintf("the BMC refused to erase %s: %v", st.what, err))
			}
			return lifecycle.Result{}, fmt.Errorf("erasing %s through the BMC: %w", st.what, err)
		}
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "BMCEraseStarted", "Clean", "%s of %s started (round %s)", st.method, st.what, round.id)
		return record(st.target, cmpTask(task))
	}
	for _, st := range steps {
		task := tasks[st.target]
		if task == taskDone {
			continue
		}
		t, err := p.conn.Task(bctx, task)
		if err != nil {
			return lifecycle.Result{}, fmt.Errorf("reading the task erasing %s: %w", st.what, err)
		}
		if !t.Done() {
			// An erase takes minutes to hours, and each look reads the system's storage again:
			// slow BMCs are not asked every power poll.
			return lifecycle.RequeueAfter(max(t.RetryAfter, r.Options.PowerPoll, bmcErasePoll), "BMC erase of "+st.what+" running"), nil
		}
		if t.Failed() {
			return r.cleaningFailed(bctx, ctx, p, fmt.Sprintf("the BMC's %s of %s ended %s/%s: %s", st.method, st.what, t.State, t.Status, strings.Join(t.Messages, "; ")))
		}
		return record(st.target, taskDone)
	}
	entry := bmcEntry(round, p.Obj.Spec.SystemUUID, steps, r.Now())
	rec, err := r.cleaningRecord(ctx, p.Obj)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if _, ok := rec.Of(round.id); !ok {
		return r.appendCleaning(ctx, p.Obj, rec, entry)
	}
	entry, _ = rec.Of(round.id)
	var expected []string
	for _, c := range layout.Controllers {
		for _, d := range c.Drives {
			expected = append(expected, d.ID)
		}
	}
	if good, why := cleaning.Verdict(entry, policy, expected); !good {
		return r.cleaningFailed(bctx, ctx, p, why)
	}
	return r.cleaned(bctx, ctx, p, policy, entry)
}

// bmcErasePoll is the least time between two looks at a running BMC erase.
const bmcErasePoll = 10 * time.Second

// taskDone marks a finished erase in CleaningTasksAnnotation.
const taskDone = "done"

// cmpTask is what is recorded for a started erase: its task, or done where the BMC named none
// (it answered when it had finished).
func cmpTask(task string) string {
	if task == "" {
		return taskDone
	}
	return task
}

// bmcEntry is the record's entry of a finished BMC round: each drive by its Redfish Id, erased
// by its step's action, attested by the BMC (no block read back).
func bmcEntry(round cleaningRound, uuid string, steps []eraseStep, now time.Time) cleaning.Entry {
	e := cleaning.Entry{Round: round.id, Policy: string(metalv1alpha1.CleaningPolicyAllDisks), Reported: now.UTC().Truncate(time.Second), DMIUUID: strings.ToLower(uuid)}
	for _, st := range steps {
		for _, d := range st.drives {
			e.Disks = append(e.Disks, probe.DiskCleaning{
				BlockDevice: probe.BlockDevice{Name: d.ID, SizeBytes: d.CapacityBytes, Model: d.Model, Serial: d.SerialNumber, Rotational: d.MediaType == "HDD"},
				Role:        probe.RoleSanitize,
				Proof: &erase.Proof{Device: d.ID, Serial: d.SerialNumber, Model: d.Model, SizeBytes: d.CapacityBytes, Method: erase.Method(st.method),
					Start: round.at.UTC(), End: now.UTC(), Verified: true},
			})
		}
	}
	return e
}

// cleaningRecord reads the server's cleaning record (empty when there is none, or when it is a
// former server's of that name, which appendCleaning replaces).
func (r *Reconciler) cleaningRecord(ctx context.Context, s *metalv1alpha1.Server) (*cleaning.Record, error) {
	cm := &corev1.ConfigMap{}
	err := r.reader().Get(ctx, client.ObjectKey{Namespace: r.Options.DiscoveryNamespace, Name: cleaning.ObjectName(s.Name)}, cm)
	if apierrors.IsNotFound(err) || (err == nil && !ownedBy(cm, s)) {
		return &cleaning.Record{Server: s.Name}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the cleaning record: %w", err)
	}
	rec, err := cleaning.Decode(cm)
	if err != nil {
		return &cleaning.Record{Server: s.Name}, nil //nolint:nilerr // unreadable history starts afresh, as the registry does
	}
	return rec, nil
}

// appendCleaning writes rec with e added, owned by s (a former server's record of that name is
// replaced), and ends the pass.
func (r *Reconciler) appendCleaning(ctx context.Context, s *metalv1alpha1.Server, rec *cleaning.Record, e cleaning.Entry) (lifecycle.Result, error) {
	rec.Server, rec.SystemUUID = s.Name, s.Spec.SystemUUID
	rec.Add(e)
	cm, err := cleaning.ConfigMap(r.Options.DiscoveryNamespace, *rec)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if err := controllerutil.SetOwnerReference(s, cm, r.Client.Scheme()); err != nil {
		return lifecycle.Result{}, fmt.Errorf("owning the cleaning record: %w", err)
	}
	cur := &corev1.ConfigMap{}
	switch err := r.reader().Get(ctx, client.ObjectKeyFromObject(cm), cur); {
	case apierrors.IsNotFound(err):
		err = r.Client.Create(ctx, cm)
		if err != nil {
			return lifecycle.Result{}, fmt.Errorf("writing the cleaning record: %w", err)
		}
	case err != nil:
		return lifecycle.Result{}, fmt.Errorf("reading the cleaning record: %w", err)
	case !ownedBy(cur, s):
		if err := r.Client.Delete(ctx, cur, client.Preconditions{UID: &cur.UID}); err != nil && !apierrors.IsNotFound(err) {
			return lifecycle.Result{}, fmt.Errorf("removing a former server's cleaning record: %w", err)
		}
		return lifecycle.Wrote("former cleaning record removed"), nil
	default:
		cm.ResourceVersion = cur.ResourceVersion
		if err := r.Client.Update(ctx, cm); err != nil {
			return lifecycle.Result{}, fmt.Errorf("writing the cleaning record: %w", err)
		}
	}
	return lifecycle.Wrote("cleaning record"), nil
}

// isBMCRound reports whether a cleaning round is carried out by the BMC.
func isBMCRound(round cleaningRound) bool { return strings.HasPrefix(round.id, bmcRoundPrefix) }

// ownedBy reports whether o names s (this object, by UID) among its owners, as the registry
// sets them.
func ownedBy(o metav1.Object, s *metalv1alpha1.Server) bool {
	return slices.ContainsFunc(o.GetOwnerReferences(), func(ref metav1.OwnerReference) bool { return ref.UID == s.UID })
}

package server

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/discovery"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

const owedUUID = "0f0e0d0c-0000-4000-8000-00000000beef"

func owedRecord(t *testing.T, c client.Client, uuid string) (cleaning.Owed, bool) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx(), client.ObjectKey{Namespace: testOpts.DiscoveryNamespace, Name: cleaning.OwedName(uuid)}, cm)
	if apierrors.IsNotFound(err) {
		return cleaning.Owed{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return cleaning.DecodeOwed(cm), true
}

// A Server let go before its release was cleaned leaves what its machine is owed in a record
// apart from it: its mark (a mark of None owes nothing), or its release policy when it is
// claimed without one; a second deletion only widens the record.
func TestDeletedServerLeavesOwedCleaning(t *testing.T) {
	claimRef := &metalv1alpha1.ImmutableObjectReference{Namespace: "default", Name: "c"}
	for _, tc := range []struct {
		name  string
		mark  string
		claim bool
		state metalv1alpha1.ServerState
		prev  metalv1alpha1.CleaningPolicy // an existing record's
		want  metalv1alpha1.CleaningPolicy // "" for no record
	}{
		{name: "marked", mark: "RootDisk", state: metalv1alpha1.ServerStateCleaning, want: "RootDisk"},
		{name: "widened", mark: "AllDisks", state: metalv1alpha1.ServerStateError, prev: "Metadata", want: "AllDisks"},
		{name: "never-narrowed", mark: "Metadata", state: metalv1alpha1.ServerStateReserved, prev: "AllDisks", want: "AllDisks"},
		{name: "claimed-unmarked", claim: true, state: metalv1alpha1.ServerStateReserved, want: "RootDisk"},
		{name: "mark-none", mark: "None", state: metalv1alpha1.ServerStateReserved},
		{name: "available", state: metalv1alpha1.ServerStateAvailable},
		{name: "unknown-mark", mark: "Shred", state: metalv1alpha1.ServerStateCleaning, want: "AllDisks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{}
			if tc.mark != "" {
				ann[serverstate.CleaningAnnotation] = tc.mark
			}
			s := cleaningServer("owe-"+tc.name, owedUUID, ann)
			if tc.claim {
				s.Spec.ServerClaimRef = claimRef
			}
			var objs []client.Object
			if tc.prev != "" {
				objs = append(objs, cleaning.OwedConfigMap(testOpts.DiscoveryNamespace, cleaning.Owed{SystemUUID: owedUUID, Policy: tc.prev, Server: "earlier"}))
			}
			c := metaltest.FakeClient(objs...)
			r := &Reconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(10), Options: cleaningOpts(metalv1alpha1.CleaningPolicyRootDisk), Now: time.Now}
			p := &serverPass{Pass: &lifecycle.Pass[*metalv1alpha1.Server]{Obj: s}, state: tc.state}
			if err := r.oweCleaning(ctx(), p); err != nil {
				t.Fatal(err)
			}
			if err := r.oweCleaning(ctx(), p); err != nil {
				t.Fatalf("again (a crash before the finalizer went): %v", err)
			}
			got, ok := owedRecord(t, c, owedUUID)
			switch {
			case tc.want == "" && ok:
				t.Fatalf("record %+v, want none", got)
			case tc.want != "" && (!ok || got.Policy != tc.want):
				t.Fatalf("record %+v (found %v), want policy %s", got, ok, tc.want)
			}
		})
	}
}

// A Server of a machine that is owed a cleaning goes from discovery to Cleaning in the write
// that ends discovery, by the wider of what is owed and what the fleet asks of a new server;
// its verified cleaning removes the record before the mark goes.
func TestOwedCleaningIsDoneBeforeAvailable(t *testing.T) {
	b := fleet.Take(t)
	sys := b.Systems()[0]
	sys.SetPowerState(redfish.PowerOn)
	name := "owed-disc"
	owed := cleaning.OwedConfigMap(testOpts.DiscoveryNamespace, cleaning.Owed{SystemUUID: sys.UUID(), Policy: "AllDisks", Server: "gone", Since: time.Now()})
	c := metaltest.FakeClient(owed, cleaningServer(name, sys.UUID(), map[string]string{discovery.RoundAnnotation: "d1", discovery.ReportedAnnotation: "d1",
		lifecycle.StateAnnotation: string(metalv1alpha1.ServerStateDiscovery)}))
	opts := cleaningOpts(metalv1alpha1.CleaningPolicyMetadata)
	s, _ := onePass(t, b, c, opts, name, metalv1alpha1.ServerStateDiscovery, func(r *Reconciler, bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
		return r.discovery(bctx, ctx, p)
	})
	if got := s.Annotations[lifecycle.StateAnnotation]; got != string(metalv1alpha1.ServerStateCleaning) {
		t.Fatalf("state %s, want Cleaning", got)
	}
	if s.Annotations[serverstate.CleaningAnnotation] != "AllDisks" || s.Annotations[serverstate.CleaningOwedAnnotation] != cleaning.NormalizeUUID(sys.UUID()) {
		t.Fatalf("annotations %v", s.Annotations)
	}

	// Cleaned and verified: the record goes, then the mark and the note with it.
	cc := reported(t, "owed-clean", sys.UUID(), sanitized("nvme0n1", true))
	again := owed.DeepCopy()
	again.ResourceVersion = ""
	if err := cc.Create(ctx(), again); err != nil {
		t.Fatal(err)
	}
	srv := &metalv1alpha1.Server{}
	if err := cc.Get(ctx(), client.ObjectKey{Name: "owed-clean"}, srv); err != nil {
		t.Fatal(err)
	}
	srv.Annotations[serverstate.CleaningOwedAnnotation] = cleaning.NormalizeUUID(sys.UUID())
	if err := cc.Update(ctx(), srv); err != nil {
		t.Fatal(err)
	}
	s, _ = onePass(t, b, cc, cleaningOpts(metalv1alpha1.CleaningPolicyNone), "owed-clean", metalv1alpha1.ServerStateCleaning, runCleaning)
	if got := s.Annotations[lifecycle.StateAnnotation]; got != string(metalv1alpha1.ServerStateAvailable) {
		t.Fatalf("state %s, want Available", got)
	}
	if _, ok := owedRecord(t, cc, sys.UUID()); ok {
		t.Fatal("the owed record outlived the cleaning that settled it")
	}
	if _, ok := s.Annotations[serverstate.CleaningOwedAnnotation]; ok {
		t.Fatalf("owed note left: %v", s.Annotations)
	}
}

// A Server made anew while another board answered records that board; when the original comes
// back and is accepted, the cleaning its machine is owed comes with it in the same write: an
// Available server goes to Cleaning, a Reserved one's release is cleaned by the wider policy,
// one in Cleaning starts its round again. A board owed nothing is accepted as before.
func TestAcceptedBoardTakesItsOwedCleaning(t *testing.T) {
	const swapped = "5a5a5a5a-0000-4000-8000-00000000beef"
	for _, tc := range []struct {
		name      string
		state     metalv1alpha1.ServerState
		owed      metalv1alpha1.CleaningPolicy // "" for no record
		mark      string
		wantState metalv1alpha1.ServerState
		wantMark  string
	}{
		{name: "available", state: metalv1alpha1.ServerStateAvailable, owed: "AllDisks", wantState: metalv1alpha1.ServerStateCleaning, wantMark: "AllDisks"},
		{name: "reserved", state: metalv1alpha1.ServerStateReserved, owed: "AllDisks", mark: "Metadata", wantState: metalv1alpha1.ServerStateReserved, wantMark: "AllDisks"},
		{name: "cleaning-wider-mark", state: metalv1alpha1.ServerStateCleaning, owed: "Metadata", mark: "RootDisk", wantState: metalv1alpha1.ServerStateCleaning, wantMark: "RootDisk"},
		{name: "discovery", state: metalv1alpha1.ServerStateDiscovery, owed: "AllDisks", wantState: metalv1alpha1.ServerStateDiscovery},
		{name: "nothing-owed", state: metalv1alpha1.ServerStateAvailable, wantState: metalv1alpha1.ServerStateAvailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fleet.Take(t)
			sys := b.Systems()[0]
			name := "accept-" + tc.name
			ann := map[string]string{lifecycle.StateAnnotation: string(tc.state), metalv1alpha1.AcceptSystemUUIDAnnotation: sys.UUID()}
			if tc.mark != "" {
				ann[serverstate.CleaningAnnotation] = tc.mark
			}
			if tc.state == metalv1alpha1.ServerStateCleaning {
				ann[serverstate.CleaningRoundAnnotation] = "c1@1"
			}
			objs := []client.Object{cleaningServer(name, swapped, ann)}
			if tc.owed != "" {
				objs = append(objs, cleaning.OwedConfigMap(testOpts.DiscoveryNamespace, cleaning.Owed{SystemUUID: sys.UUID(), Policy: tc.owed, Server: "gone", Since: time.Now()}))
			}
			c := metaltest.FakeClient(objs...)
			s, actions := onePass(t, b, c, cleaningOpts(metalv1alpha1.CleaningPolicyNone), name, tc.state, func(r *Reconciler, _, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
				return r.acceptReplacement(ctx, p)
			})
			if len(actions) != 0 {
				t.Errorf("the accepting pass acted on the box: %v", actions)
			}
			if s.Spec.SystemUUID != cleaning.NormalizeUUID(sys.UUID()) {
				t.Fatalf("system UUID %s, want the accepted %s", s.Spec.SystemUUID, sys.UUID())
			}
			if got := s.Annotations[lifecycle.StateAnnotation]; got != string(tc.wantState) {
				t.Fatalf("state %s, want %s", got, tc.wantState)
			}
			if got := s.Annotations[serverstate.CleaningAnnotation]; got != tc.wantMark && !(tc.wantMark == "" && got == tc.mark) {
				t.Fatalf("mark %q, want %q", got, tc.wantMark)
			}
			owedNote := s.Annotations[serverstate.CleaningOwedAnnotation]
			if want := tc.wantMark != ""; (owedNote != "") != want {
				t.Fatalf("owed note %q, want one: %v", owedNote, want)
			}
			if tc.state == metalv1alpha1.ServerStateCleaning && s.Annotations[serverstate.CleaningRoundAnnotation] != "" {
				t.Fatalf("the round booted for the other board was kept: %v", s.Annotations)
			}
			if _, ok := owedRecord(t, c, sys.UUID()); ok != (tc.owed != "") {
				t.Fatalf("owed record present %v, want %v: accepting settles nothing", ok, tc.owed != "")
			}
		})
	}
}

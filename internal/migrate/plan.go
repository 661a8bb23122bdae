// Package migrate implements "metalhub migrate plan": a read-only look at a cluster the IronCore
// metal-operator manages, saying for every BMC and Server what metalhub will adopt, which BMC
// actions it would take on start (none is the goal), and what blocks a clean switch; and "metalhub
// move" (Move): the fleet copied to another cluster, the source left paused.
//
// It never acts on a BMC: Make only reads objects (through a client.Reader), and Move only copies
// and pauses them. The rules a plan reports are the metal family's (internal/controller/metal),
// not restated here.
package migrate

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal"
	"github.com/metalhub/metalhub/internal/controller/metal/server"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/registry"
)

// Row is one object of the plan.
type Row struct {
	Kind, Name string
	BMC        string // a Server's BMC; a BMC's address
	Found      string // status.state as found
	Adopted    string // the state metalhub starts in, and where it comes from
	Actions    []string
	// Requests are the BMC requests of Actions, in order, as the BMC sees them (a Server's;
	// none for a deletion or an operation annotation, which Actions only describe).
	Requests []Request
	Notes    []string // worth knowing, not an action and not blocking
	Blockers []string
}

// Request is one BMC request metalhub's first passes make on a server.
type Request string

// The requests the plan predicts (the Redfish reset type or boot override each is).
const (
	PowerOn     Request = "power On"           // Reset On
	PowerOff    Request = "power Off"          // Reset ForceOff
	GracefulOff Request = "graceful power Off" // Reset GracefulShutdown
	PXEOnce     Request = "one-time PXE boot"  // boot override Pxe, Once
	Restart     Request = "restart"            // Reset ForceRestart
)

// Plan is the whole report.
type Plan struct {
	Rows []Row
}

// Blocked reports whether anything blocks a clean switch.
func (p *Plan) Blocked() bool {
	for _, r := range p.Rows {
		if len(r.Blockers) > 0 {
			return true
		}
	}
	return false
}

// Options narrow the plan.
type Options struct {
	// Selector selects the BMCs and Servers looked at (all when empty).
	Selector labels.Selector
}

// Make reads the cluster through c (nothing is written) and builds the plan.
func Make(ctx context.Context, c client.Reader, o Options) (*Plan, error) {
	sel := o.Selector
	if sel == nil {
		sel = labels.Everything()
	}
	var (
		bmcs    metalv1alpha1.BMCList
		servers metalv1alpha1.ServerList
		claims  metalv1alpha1.ServerClaimList
		maints  metalv1alpha1.ServerMaintenanceList
		newer   maintenancev1alpha1.ServerMaintenanceList
		sbcs    metalv1alpha1.ServerBootConfigurationList
	)
	for _, l := range []client.ObjectList{&bmcs, &servers} {
		if err := c.List(ctx, l, client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return nil, fmt.Errorf("listing %T: %w", l, err)
		}
	}
	for _, l := range []client.ObjectList{&claims, &maints, &newer, &sbcs} {
		if err := c.List(ctx, l); err != nil {
			return nil, fmt.Errorf("listing %T: %w", l, err)
		}
	}
	claimOf := map[string]*metalv1alpha1.ServerClaim{}
	for i := range claims.Items {
		claimOf[claims.Items[i].Namespace+"/"+claims.Items[i].Name] = &claims.Items[i]
	}
	maintOf := map[string]*metalv1alpha1.ServerMaintenance{}
	for i := range maints.Items {
		maintOf[maints.Items[i].Namespace+"/"+maints.Items[i].Name] = &maints.Items[i]
	}
	// A maintenance of the newer group is carried out by a metal.ironcore.dev one of its name,
	// which asks for no power.
	for i := range newer.Items {
		m := &newer.Items[i]
		if _, ok := maintOf[m.Namespace+"/"+m.Name]; !ok {
			maintOf[m.Namespace+"/"+m.Name] = &metalv1alpha1.ServerMaintenance{ObjectMeta: m.ObjectMeta}
		}
	}
	sbcOf := map[string]*metalv1alpha1.ServerBootConfiguration{}
	for i := range sbcs.Items {
		sbcOf[sbcs.Items[i].Namespace+"/"+sbcs.Items[i].Name] = &sbcs.Items[i]
	}
	refs := refs{claims: claimOf, maintenances: maintOf, bootConfigs: sbcOf}
	bmcNames := map[string]bool{}
	p := &Plan{}

	byAddress := map[string][]string{}
	for i := range bmcs.Items {
		b := &bmcs.Items[i]
		bmcNames[b.Name] = true
		row := Row{Kind: "BMC", Name: b.Name, Found: string(b.Status.State), Adopted: "-"}
		addr, err := metal.BMCAddress(ctx, c, b)
		if err != nil {
			row.BMC = "?"
			row.Blockers = append(row.Blockers, "address: "+err.Error())
		} else {
			row.BMC = addr
			byAddress[addr] = append(byAddress[addr], b.Name)
		}
		row.Blockers = append(row.Blockers, finalizerBlockers(b)...)
		if b.DeletionTimestamp != nil {
			row.Actions = append(row.Actions, "finish its deletion: delete its Servers (each powered Off)")
		}
		p.Rows = append(p.Rows, row)
	}
	for i := range p.Rows {
		r := &p.Rows[i]
		if others := byAddress[r.BMC]; len(others) > 1 {
			r.Blockers = append(r.Blockers, fmt.Sprintf("duplicate identity: BMCs %s share address %s", strings.Join(others, ", "), r.BMC))
		}
	}

	byUUID := map[string][]string{}
	for _, s := range servers.Items {
		if u := registry.NormalizeUUID(s.Spec.SystemUUID); u != "" {
			byUUID[u] = append(byUUID[u], s.Name)
		}
	}
	for i := range servers.Items {
		s := &servers.Items[i]
		row := Row{Kind: "Server", Name: s.Name, Found: string(s.Status.State)}
		if s.Spec.BMCRef != nil {
			row.BMC = s.Spec.BMCRef.Name
			if !bmcNames[row.BMC] && o.Selector == nil {
				row.Blockers = append(row.Blockers, fmt.Sprintf("its BMC %s does not exist", row.BMC))
			}
		} else if s.Spec.BMC != nil {
			row.BMC = s.Spec.BMC.Address
		}
		if u := registry.NormalizeUUID(s.Spec.SystemUUID); len(byUUID[u]) > 1 {
			row.Blockers = append(row.Blockers, fmt.Sprintf("duplicate identity: Servers %s have system UUID %s", strings.Join(byUUID[u], ", "), u))
		}
		if s.Status.State != "" && !serverstate.Valid(s.Status.State) {
			row.Blockers = append(row.Blockers, fmt.Sprintf("unknown state %q", s.Status.State))
		}
		state, src := server.StateOnStart(s)
		row.Adopted = fmt.Sprintf("%s (%s)", state, strings.ToLower(string(src)))
		row.Actions, row.Requests = serverActions(server.AsOnStart(s), state, src, refs)
		if ref := s.Spec.ServerMaintenanceRef; ref != nil && state == metalv1alpha1.ServerStateMaintenance && maintOf[ref.Namespace+"/"+ref.Name] == nil {
			row.Notes = append(row.Notes, fmt.Sprintf("stays in Maintenance, untouched, while spec.serverMaintenanceRef names %s/%s, which is no ServerMaintenance of either group", ref.Namespace, ref.Name))
		}
		switch op := s.Annotations[metalv1alpha1.OperationAnnotation]; op {
		case "":
		case metalv1alpha1.OperationIgnore:
			row.Actions, row.Requests = []string{"none: ignored (operation annotation ignore)"}, nil
		default:
			// The reference had not run it yet: metalhub runs it once, as asked.
			row.Actions = append(row.Actions, fmt.Sprintf("operation %s (its annotation asks; remove it to cancel)", op))
		}
		row.Blockers = append(row.Blockers, finalizerBlockers(s)...)
		if s.DeletionTimestamp != nil {
			row.Actions, row.Requests = []string{"finish its deletion: power Off, then let it go (held while a claim holds it)"}, nil
		}
		p.Rows = append(p.Rows, row)
	}
	for i := range claims.Items {
		cl := &claims.Items[i]
		row := Row{Kind: "ServerClaim", Name: cl.Namespace + "/" + cl.Name, Found: string(cl.Status.Phase), Adopted: "-", Blockers: finalizerBlockers(cl)}
		if cl.DeletionTimestamp != nil && cl.Spec.ServerRef != nil {
			// The reference had not finished releasing: metalhub's claim finalizer does.
			row.Actions = []string{fmt.Sprintf("finish its deletion: release Server %s (as its reclaim policy says)", cl.Spec.ServerRef.Name)}
		}
		if len(row.Blockers) > 0 || len(row.Actions) > 0 {
			p.Rows = append(p.Rows, row)
		}
	}
	for i := range newer.Items {
		m := &newer.Items[i]
		if bl := finalizerBlockers(m); len(bl) > 0 {
			p.Rows = append(p.Rows, Row{Kind: "ServerMaintenance", Name: m.Namespace + "/" + m.Name + " (maintenance.metal.ironcore.dev)", Found: string(m.Status.State), Adopted: "-", Blockers: bl})
		}
	}
	for i := range maints.Items {
		m := &maints.Items[i]
		if bl := finalizerBlockers(m); len(bl) > 0 {
			p.Rows = append(p.Rows, Row{Kind: "ServerMaintenance", Name: m.Namespace + "/" + m.Name, Found: string(m.Status.State), Adopted: "-", Blockers: bl})
		}
	}
	sort.SliceStable(p.Rows, func(i, j int) bool {
		if p.Rows[i].Kind != p.Rows[j].Kind {
			return p.Rows[i].Kind < p.Rows[j].Kind
		}
		return p.Rows[i].Name < p.Rows[j].Name
	})
	return p, nil
}

// refs are the objects a Server's first passes read besides the Server.
type refs struct {
	claims       map[string]*metalv1alpha1.ServerClaim
	maintenances map[string]*metalv1alpha1.ServerMaintenance
	bootConfigs  map[string]*metalv1alpha1.ServerBootConfiguration
}

// serverActions predicts what the Server controller does to the box on its first passes, from
// the state it starts in and the power the status last saw (the BMC is not asked: the plan is
// read-only and runs before the switch): in words, and as the BMC requests they are. s is the
// server as its first pass leaves its bookkeeping (server.AsOnStart).
func serverActions(s *metalv1alpha1.Server, state metalv1alpha1.ServerState, src lifecycle.Source, r refs) ([]string, []Request) {
	on := s.Status.PowerState == metalv1alpha1.PowerStateOn
	off := s.Status.PowerState == metalv1alpha1.PowerStateOff
	one := func(text string, req ...Request) ([]string, []Request) { return []string{text}, req }
	switch state {
	case metalv1alpha1.ServerStateInitial:
		text, req := "discover: one-time PXE boot, power On", []Request{PXEOnce, PowerOn}
		if on {
			// A new round starts from a powered-off box.
			text, req = "discover: power Off, one-time PXE boot, power On", []Request{PowerOff, PXEOnce, PowerOn}
		}
		if src == lifecycle.FromInitial && s.Status.State == "" {
			text += " (no state to adopt)"
		}
		return one(text, req...)
	case metalv1alpha1.ServerStateDiscovery:
		if server.DiscoveryOfOurs(s) {
			return nil, nil
		}
		if off && s.Spec.ServerClaimRef == nil {
			return one("discover again: one-time PXE boot, power On", PXEOnce, PowerOn)
		}
		return one("none until it is Off and unclaimed, then discover again")
	case metalv1alpha1.ServerStateAvailable:
		if on {
			return one("power Off (an Available server is kept Off)", PowerOff)
		}
	case metalv1alpha1.ServerStateReserved:
		ref := s.Spec.ServerClaimRef
		if ref == nil {
			return released(on, "release: power Off (no claim reference)")
		}
		cl := r.claims[ref.Namespace+"/"+ref.Name]
		if cl == nil || cl.DeletionTimestamp != nil {
			return released(on, fmt.Sprintf("release: power Off (its claim %s/%s is gone)", ref.Namespace, ref.Name))
		}
		switch {
		case cl.Spec.Power == metalv1alpha1.PowerOn && !on && s.Spec.BootConfigurationRef != nil:
			// Its configuration boots from the network, as the reference does (a migrated
			// server carries no record of a first boot, so FirstPowerOn boots it once more).
			return one("boot its claim's configuration: one-time PXE boot, power On (once the configuration is Ready)", PXEOnce, PowerOn)
		case cl.Spec.Power == metalv1alpha1.PowerOn && !on:
			return one("power On (its claim asks)", PowerOn)
		case cl.Spec.Power == metalv1alpha1.PowerOff && on:
			return one("power Off (its claim asks)", GracefulOff)
		}
	case metalv1alpha1.ServerStateReleased:
		if s.Spec.ServerClaimRef == nil {
			return serverActions(s, metalv1alpha1.ServerStateAvailable, src, r)
		}
		if on {
			return one("power Off (Released is kept Off until its claim reference is removed)", GracefulOff)
		}
	case metalv1alpha1.ServerStateMaintenance:
		return maintenanceActions(s, src, r)
	case metalv1alpha1.ServerStateError:
		to, ok := server.ErrorExit(s, s.Status.PowerState)
		if !ok {
			return one("none: stays in Error, untouched, until it is Off (then Available if discovered before) or retried (operation retry: discovered again)")
		}
		text, req := serverActions(s, to, src, r)
		return append([]string{"leave Error for " + string(to)}, text...), req
	}
	return nil, nil
}

// released is the release of a server whose claim is gone: powered off, gracefully.
func released(on bool, text string) ([]string, []Request) {
	if on {
		return []string{text}, []Request{GracefulOff}
	}
	return []string{strings.Replace(text, "power Off", "already Off", 1)}, nil
}

// maintenanceActions predicts a server in Maintenance: the boot into its maintenance's boot
// configuration unless it runs it already (server.MaintenanceBooted), else the power the
// maintenance asks for.
func maintenanceActions(s *metalv1alpha1.Server, src lifecycle.Source, r refs) ([]string, []Request) {
	on := s.Status.PowerState == metalv1alpha1.PowerStateOn
	ref := s.Spec.ServerMaintenanceRef
	if ref == nil {
		to := server.PreviousState(s)
		if s.Spec.ServerClaimRef != nil && to != metalv1alpha1.ServerStateReleased {
			to = metalv1alpha1.ServerStateReserved
		}
		text, req := serverActions(s, to, src, r)
		return append([]string{"leave Maintenance for " + string(to) + " (no maintenance reference)"}, text...), req
	}
	m := r.maintenances[ref.Namespace+"/"+ref.Name]
	if m == nil {
		return nil, nil // the Server controller waits for the ref to go (see Notes)
	}
	want := m.Spec.ServerPower
	if b := s.Spec.MaintenanceBootConfigurationRef; b != nil && b.Name != "" && want != metalv1alpha1.PowerOff {
		sbc := r.bootConfigs[b.Namespace+"/"+b.Name]
		// An unjudged configuration is judged Ready by the built-in boot provider when its
		// inputs are there; the plan takes it as Ready.
		ready := sbc != nil && sbc.Spec.ServerRef.Name == s.Name &&
			(sbc.Status.State == metalv1alpha1.ServerBootConfigurationStateReady || sbc.Status.State == "")
		switch {
		case server.MaintenanceBooted(s, m, on, ready):
			if !on {
				return []string{"power On (booted into its maintenance's boot configuration)"}, []Request{PowerOn}
			}
			return nil, nil
		case !ready:
			return []string{fmt.Sprintf("none until boot configuration %s/%s is Ready, then boot into it", b.Namespace, b.Name)}, nil
		case on:
			return []string{"boot into its maintenance's boot configuration: one-time PXE boot, restart"}, []Request{PXEOnce, Restart}
		}
		return []string{"boot into its maintenance's boot configuration: one-time PXE boot, power On"}, []Request{PXEOnce, PowerOn}
	}
	switch {
	case want == metalv1alpha1.PowerOn && !on:
		return []string{"power On (its maintenance asks)"}, []Request{PowerOn}
	case want == metalv1alpha1.PowerOff && on:
		return []string{"power Off (its maintenance asks)"}, []Request{GracefulOff}
	}
	return nil, nil
}

// finalizerBlockers names finalizers of the reference's group that no metalhub controller
// removes: after the switch, deleting the object would hang on them.
func finalizerBlockers(o client.Object) []string {
	ours := metal.Finalizers()
	var out []string
	for _, f := range o.GetFinalizers() {
		if strings.HasPrefix(f, "metal.ironcore.dev/") && !slices.Contains(ours, f) {
			out = append(out, fmt.Sprintf("finalizer %s is the reference operator's and nothing removes it after the switch", f))
		}
	}
	return out
}

// Print writes the plan as a table, then what blocks, if anything.
func (p *Plan) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tBMC\tFOUND\tADOPTED\tBMC ACTIONS")
	for _, r := range p.Rows {
		act := "none"
		if len(r.Actions) > 0 {
			act = strings.Join(r.Actions, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Kind, r.Name, dash(r.BMC), dash(r.Found), dash(r.Adopted), act)
	}
	_ = tw.Flush()
	p.printEach(w, "Notes:", func(r Row) []string { return r.Notes })
	if p.printEach(w, "Blocks a clean switch:", func(r Row) []string { return r.Blockers }) == 0 {
		fmt.Fprintln(w, "\nNothing blocks the switch.")
	}
}

// printEach prints, under title, each line of(row) of every row, and returns how many it printed
// (the title only when there is one).
func (p *Plan) printEach(w io.Writer, title string, of func(Row) []string) int {
	n := 0
	for _, r := range p.Rows {
		for _, line := range of(r) {
			if n == 0 {
				fmt.Fprintln(w, "\n"+title)
			}
			n++
			fmt.Fprintf(w, "  %s %s: %s\n", r.Kind, r.Name, line)
		}
	}
	return n
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

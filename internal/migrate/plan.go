// Package migrate implements "metalhub migrate plan": a read-only look at a cluster the IronCore
// metal-operator manages, saying for every BMC and Server what metalhub will adopt, which BMC
// actions it would take on start (none is the goal), and what blocks a clean switch.
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
	Notes      []string // worth knowing, not an action and not blocking
	Blockers   []string
}

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
	)
	for _, l := range []client.ObjectList{&bmcs, &servers} {
		if err := c.List(ctx, l, client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return nil, fmt.Errorf("listing %T: %w", l, err)
		}
	}
	for _, l := range []client.ObjectList{&claims, &maints, &newer} {
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
		if s.Status.State != "" && !metal.ValidServerState(s.Status.State) {
			row.Blockers = append(row.Blockers, fmt.Sprintf("unknown state %q", s.Status.State))
		}
		state, src := metal.StateOnStart(s)
		row.Adopted = fmt.Sprintf("%s (%s)", state, strings.ToLower(string(src)))
		row.Actions = serverActions(s, state, src, claimOf, maintOf)
		if ref := s.Spec.ServerMaintenanceRef; ref != nil && state == metalv1alpha1.ServerStateMaintenance && maintOf[ref.Namespace+"/"+ref.Name] == nil {
			row.Notes = append(row.Notes, fmt.Sprintf("stays in Maintenance, untouched, while spec.serverMaintenanceRef names %s/%s, which is no ServerMaintenance of either group", ref.Namespace, ref.Name))
		}
		switch op := s.Annotations[metalv1alpha1.OperationAnnotation]; op {
		case "":
		case metalv1alpha1.OperationIgnore:
			row.Actions = []string{"none: ignored (operation annotation ignore)"}
		default:
			// The reference had not run it yet: metalhub runs it once, as asked.
			row.Actions = append(row.Actions, fmt.Sprintf("operation %s (its annotation asks; remove it to cancel)", op))
		}
		row.Blockers = append(row.Blockers, finalizerBlockers(s)...)
		if s.DeletionTimestamp != nil {
			row.Actions = []string{"finish its deletion: power Off, then let it go (held while a claim holds it)"}
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

// serverActions predicts what the Server controller does to the box on its first passes, from
// the state it starts in and the power the status last saw (the BMC is not asked: the plan is
// read-only and runs before the switch).
func serverActions(s *metalv1alpha1.Server, state metalv1alpha1.ServerState, src lifecycle.Source,
	claimOf map[string]*metalv1alpha1.ServerClaim, maintOf map[string]*metalv1alpha1.ServerMaintenance) []string {
	on := s.Status.PowerState == metalv1alpha1.PowerStateOn
	switch state {
	case metalv1alpha1.ServerStateInitial:
		if src == lifecycle.FromInitial && s.Status.State == "" {
			return []string{"discover: power Off, one-time PXE boot, power On (no state to adopt)"}
		}
		return []string{"discover: power Off, one-time PXE boot, power On"}
	case metalv1alpha1.ServerStateDiscovery:
		if metal.DiscoveryOfOurs(s) {
			return nil
		}
		if s.Status.PowerState == metalv1alpha1.PowerStateOff && s.Spec.ServerClaimRef == nil {
			return []string{"discover again: one-time PXE boot, power On"}
		}
		return []string{"none until it is Off and unclaimed, then discover again"}
	case metalv1alpha1.ServerStateAvailable:
		if on {
			return []string{"power Off (an Available server is kept Off)"}
		}
	case metalv1alpha1.ServerStateReserved:
		ref := s.Spec.ServerClaimRef
		if ref == nil {
			return []string{"release: power Off (no claim reference)"}
		}
		cl := claimOf[ref.Namespace+"/"+ref.Name]
		if cl == nil {
			return []string{fmt.Sprintf("release: power Off (its claim %s/%s is gone)", ref.Namespace, ref.Name)}
		}
		if want := cl.Spec.Power; want != "" && string(want) != string(s.Status.PowerState) {
			return []string{fmt.Sprintf("power %s (its claim asks)", want)}
		}
	case metalv1alpha1.ServerStateMaintenance:
		ref := s.Spec.ServerMaintenanceRef
		if ref == nil {
			return []string{"leave Maintenance (no maintenance reference)"}
		}
		m := maintOf[ref.Namespace+"/"+ref.Name]
		if m == nil {
			return nil // the Server controller waits for the ref to go (see Notes)
		}
		if want := m.Spec.ServerPower; want != "" && string(want) != string(s.Status.PowerState) {
			return []string{fmt.Sprintf("power %s (its maintenance asks)", want)}
		}
	}
	return nil
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

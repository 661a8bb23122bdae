package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/fleetops"
	"github.com/metalhub/metalhub/internal/scheme"
)

func serversCommand() *cobra.Command {
	var output, selector string
	var watchFlag bool
	c := &cobra.Command{
		Use:     "servers [SERVER...]",
		Aliases: []string{"server", "srv"},
		Short:   "list servers: state, power, claim, BMC, LED, maintenance, cordon",
		Long: `List servers the way the operator sees them: STATE is the lifecycle state the operator keeps
(the annotation, which survives a wiped status), HEALTH a critical hardware event (fault) or less
hardware than the baseline (drift), OPERATION an operation still pending.
--watch prints a line whenever a server changes.`,
		Example: `  metalhub servers
  metalhub servers -o wide -l metadata.metal.ironcore.dev/rack=1-1
  metalhub servers --watch
  metalhub servers my-server -o yaml`,
	}
	k := newKube(c)
	c.ValidArgsFunction = k.completeServers(1 << 20)
	c.Flags().StringVarP(&output, "output", "o", "", "Output format: wide, name, json or yaml (default: the table).")
	c.Flags().StringVarP(&selector, "selector", "l", "", "Label selector, e.g. metadata.metal.ironcore.dev/rack=1-1.")
	c.Flags().BoolVarP(&watchFlag, "watch", "w", false, "After the list, print a line whenever a server changes.")
	_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]cobra.Completion{"wide", "name", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	c.RunE = func(c *cobra.Command, args []string) error {
		switch output {
		case "", "wide", "name", "json", "yaml":
		default:
			return Usage(fmt.Errorf("unknown output format %q: wide, name, json or yaml", output))
		}
		if watchFlag && (output == "json" || output == "yaml") {
			return Usage(fmt.Errorf("--watch prints the table; -o %s is for a list", output))
		}
		sel := labels.Everything()
		if selector != "" {
			var err error
			if sel, err = labels.Parse(selector); err != nil {
				return Usage(fmt.Errorf("bad --selector: %w", err))
			}
		}
		cl, err := k.client()
		if err != nil {
			return err
		}
		ctx := c.Context()
		list := &metalv1alpha1.ServerList{}
		if err := cl.List(ctx, list, client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return fmt.Errorf("listing servers: %w", err)
		}
		items, err := pick(list.Items, args)
		if err != nil {
			return err
		}
		list.Items = items
		out := c.OutOrStdout()
		if output == "json" || output == "yaml" {
			return printObject(out, output, list)
		}
		t := newServerTable(out, output)
		for i := range list.Items {
			t.row(&list.Items[i])
		}
		if err := t.flush(); err != nil || !watchFlag {
			return err
		}
		return watchServers(ctx, cl, sel, args, list.ResourceVersion, t)
	}
	return c
}

// pick keeps the named servers, in the order named; no names keeps all.
func pick(all []metalv1alpha1.Server, names []string) ([]metalv1alpha1.Server, error) {
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	if len(names) == 0 {
		return all, nil
	}
	byName := map[string]metalv1alpha1.Server{}
	for _, s := range all {
		byName[s.Name] = s
	}
	out := make([]metalv1alpha1.Server, 0, len(names))
	for _, n := range names {
		s, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("server %q not found", n)
		}
		out = append(out, s)
	}
	return out, nil
}

// printObject prints obj as JSON or YAML, with its apiVersion and kind as kubectl does.
func printObject(w io.Writer, format string, obj runtime.Object) error {
	var p printers.ResourcePrinter = &printers.JSONPrinter{}
	if format == "yaml" {
		p = &printers.YAMLPrinter{}
	}
	if l, ok := obj.(*metalv1alpha1.ServerList); ok {
		// A list prints as a v1 List of typed items, like kubectl get -o yaml.
		for i := range l.Items {
			l.Items[i].SetGroupVersionKind(metalv1alpha1.GroupVersion.WithKind("Server"))
		}
		l.SetGroupVersionKind(metalv1alpha1.GroupVersion.WithKind("ServerList"))
		return p.PrintObj(l, w)
	}
	return printers.NewTypeSetter(scheme.New()).ToPrinter(p).PrintObj(obj, w)
}

// serverTable prints servers as kubectl prints resources.
type serverTable struct {
	w      *tabwriter.Writer
	format string
	header bool
	now    func() time.Time
}

func newServerTable(out io.Writer, format string) *serverTable {
	return &serverTable{w: tabwriter.NewWriter(out, 0, 4, 3, ' ', 0), format: format, now: time.Now}
}

func (t *serverTable) columns() []string {
	cols := []string{"NAME", "STATE", "POWER", "CLAIM", "BMC", "LED", "MAINTENANCE", "CORDONED", "HEALTH", "OPERATION", "AGE"}
	if t.format == "wide" {
		cols = append(cols, "SYSTEM UUID", "LOCATION", "RACK", "CLEANED")
	}
	return cols
}

func (t *serverTable) row(s *metalv1alpha1.Server) {
	if t.format == "name" {
		fmt.Fprintf(t.w, "server/%s\n", s.Name)
		return
	}
	if !t.header {
		fmt.Fprintln(t.w, strings.Join(t.columns(), "\t"))
		t.header = true
	}
	fmt.Fprintln(t.w, strings.Join(t.cells(s), "\t"))
}

func (t *serverTable) cells(s *metalv1alpha1.Server) []string {
	dash := func(v string) string {
		if v == "" {
			return "<none>"
		}
		return v
	}
	claim, maint, bmcName := "", "", ""
	if r := s.Spec.ServerClaimRef; r != nil {
		claim = r.Namespace + "/" + r.Name
	}
	if r := s.Spec.ServerMaintenanceRef; r != nil {
		maint = r.Namespace + "/" + r.Name
	}
	if r := s.Spec.BMCRef; r != nil {
		bmcName = r.Name
	} else if s.Spec.BMC != nil {
		bmcName = s.Spec.BMC.Address
	}
	led := string(s.Status.IndicatorLED)
	if led == "" {
		led = string(s.Spec.IndicatorLED)
	}
	cordoned := "false"
	if s.Spec.Unclaimable {
		cordoned = "true"
	}
	cells := []string{s.Name, fleetops.State(s), dash(string(s.Status.PowerState)), dash(claim), dash(bmcName), dash(led),
		dash(maint), cordoned, health(s), dash(fleetops.Pending(s)), age(s.CreationTimestamp, t.now())}
	if t.format == "wide" {
		cells = append(cells, dash(s.Spec.SystemUUID), dash(s.Labels[metalv1alpha1.MetadataKeyPrefix+"location"]),
			dash(s.Labels[metalv1alpha1.MetadataKeyPrefix+"rack"]), dash(cleanedReason(s)))
	}
	return cells
}

// health is what the durable records say of the hardware: a critical event logged by the BMC
// (fault), less hardware than the baseline (drift), both, or ok.
func health(s *metalv1alpha1.Server) string {
	var out []string
	if s.Annotations[metalv1alpha1.HardwareFaultAnnotation] != "" {
		out = append(out, "fault")
	}
	if s.Annotations[metalv1alpha1.InventoryDriftAnnotation] != "" {
		out = append(out, "drift")
	}
	if len(out) == 0 {
		return "ok"
	}
	return strings.Join(out, ",")
}

// cleanedReason is the reason of the server's Cleaned condition: Verified, CleaningInProgress,
// CleaningFailed, or nothing for a server never cleaned.
func cleanedReason(s *metalv1alpha1.Server) string {
	if c := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionCleaned); c != nil {
		return c.Reason
	}
	return ""
}

func (t *serverTable) flush() error { return t.w.Flush() }

func age(created metav1.Time, now time.Time) string {
	if created.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(created.Time))
}

// watchServers prints a row whenever a server's row changes, until ctx ends, watching again
// from the last version seen when the API server ends a watch.
func watchServers(ctx context.Context, cl client.WithWatch, sel labels.Selector, names []string, rv string, t *serverTable) error {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	last := map[string]string{}
	for {
		w, err := cl.Watch(ctx, &metalv1alpha1.ServerList{}, client.MatchingLabelsSelector{Selector: sel},
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watching servers: %w", err)
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				rv = "" // expired: start from now
				break
			}
			s, ok := ev.Object.(*metalv1alpha1.Server)
			if !ok {
				continue
			}
			rv = s.ResourceVersion
			if ev.Type == watch.Bookmark || (len(want) > 0 && !want[s.Name]) {
				continue
			}
			cells := strings.Join(t.cells(s), "\t")
			if ev.Type == watch.Deleted {
				cells = strings.Replace(cells, fleetops.State(s), "Deleted", 1)
			}
			if last[s.Name] == cells {
				continue
			}
			last[s.Name] = cells
			t.row(s)
			if err := t.flush(); err != nil {
				w.Stop()
				return err
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return nil
		}
	}
}

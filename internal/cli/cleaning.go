package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/cleaning"
)

// CleaningReport is what `metalhub cleaning report` prints as JSON: the server's cleaning
// record, each cleaning with the verdict its own policy gives it, and where the server stands.
type CleaningReport struct {
	Server     string `json:"server"`
	SystemUUID string `json:"systemUUID,omitempty"`
	State      string `json:"state,omitempty"`
	// Cleaned is the server's Cleaned condition: its reason and message.
	Cleaned   string          `json:"cleaned,omitempty"`
	Cleanings []CleaningEntry `json:"cleanings"`
}

// CleaningEntry is one cleaning of the record and its verdict.
type CleaningEntry struct {
	cleaning.Entry `json:",inline"`
	// Verdict is "verified", or "failed: " and what did not hold.
	Verdict string `json:"verdict"`
}

// cleaningCommand is `metalhub cleaning report SERVER`: the proof that a server's disks were
// erased, for an auditor, read with the user's rights.
func cleaningCommand() *cobra.Command {
	c := &cobra.Command{Use: "cleaning", Short: "the cleaning records of released servers"}
	report := &cobra.Command{
		Use:   "report SERVER",
		Short: "print a server's cleaning record: per cleaning and disk, the method, times, read-back samples and verdict",
		Long: `Prints the server's cleaning record (the ConfigMap cleaning-SERVER in the discovery namespace) as JSON,
or as a table with -o table: every cleaning it keeps, newest last, with each disk's serial, model, size,
erase method, start and end, how many blocks were read back and whether they held.`,
		Args: cobra.ExactArgs(1),
	}
	k := newKube(report)
	report.ValidArgsFunction = k.completeServers(1)
	var format, ns string
	report.Flags().StringVarP(&format, "output", "o", "json", "json or table")
	report.Flags().StringVar(&ns, "discovery-namespace", "", "namespace of the records (the manager's --discovery-namespace); empty: found by label in any namespace")
	report.RunE = func(c *cobra.Command, args []string) error {
		if format != "json" && format != "table" {
			return Usage(fmt.Errorf("-o %q: want json or table", format))
		}
		cl, err := k.client()
		if err != nil {
			return err
		}
		rep, err := cleaningReport(c, cl, args[0], ns)
		if err != nil {
			return err
		}
		if format == "table" {
			return printCleaningTable(c.OutOrStdout(), rep)
		}
		enc := json.NewEncoder(c.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	c.AddCommand(report)
	return c
}

func cleaningReport(c *cobra.Command, cl client.Client, name, ns string) (*CleaningReport, error) {
	ctx := c.Context()
	s := &metalv1alpha1.Server{}
	if err := cl.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
		return nil, fmt.Errorf("server %s: %w", name, err)
	}
	rep := &CleaningReport{Server: name, SystemUUID: s.Spec.SystemUUID, State: string(s.Status.State), Cleanings: []CleaningEntry{}}
	if cond := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionCleaned); cond != nil {
		rep.Cleaned = cond.Reason + ": " + cond.Message
	}
	list := &corev1.ConfigMapList{}
	opts := []client.ListOption{client.MatchingLabels{cleaning.ServerLabel: name}}
	if ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := cl.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("reading the cleaning record of %s: %w", name, err)
	}
	for i := range list.Items {
		cm := &list.Items[i]
		if cm.Name != cleaning.ObjectName(name) || !ownedByServer(cm, s) {
			continue
		}
		rec, err := cleaning.Decode(cm)
		if err != nil {
			return nil, err
		}
		for _, e := range rec.Cleanings {
			verdict := "verified"
			if ok, why := cleaning.Verdict(e, metalv1alpha1.CleaningPolicy(e.Policy), nil); !ok {
				verdict = "failed: " + why
			}
			rep.Cleanings = append(rep.Cleanings, CleaningEntry{Entry: e, Verdict: verdict})
		}
	}
	return rep, nil
}

// ownedByServer reports a record of this server, not of an earlier one of its name.
func ownedByServer(cm *corev1.ConfigMap, s *metalv1alpha1.Server) bool {
	for _, ref := range cm.OwnerReferences {
		if ref.UID == s.UID {
			return true
		}
	}
	return false
}

func printCleaningTable(out io.Writer, rep *CleaningReport) error {
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	fmt.Fprintf(w, "SERVER %s (%s), %s\n", rep.Server, rep.SystemUUID, rep.Cleaned)
	fmt.Fprintln(w, "ROUND\tPOLICY\tDISK\tSERIAL\tSIZE\tROLE\tMETHOD\tSTART\tSECONDS\tSAMPLES\tVERIFIED\tNOTE")
	for _, e := range rep.Cleanings {
		for _, d := range e.Disks {
			method, start, secs, samples, verified, note := "", "", "", "", "", d.Skipped
			if p := d.Proof; p != nil {
				method, start = string(p.Method), p.Start.UTC().Format(time.RFC3339)
				secs = fmt.Sprintf("%.1f", p.End.Sub(p.Start).Seconds())
				samples, verified, note = fmt.Sprint(p.Samples), fmt.Sprint(p.Verified), p.Failure
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d GiB\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Round, e.Policy, d.Name, d.Serial, d.SizeBytes>>30,
				d.Role, method, start, secs, samples, verified, strings.TrimSpace(note))
		}
		fmt.Fprintf(w, "%s\t%s\t\t\t\t\t\t\t\t\t\t%s\n", e.Round, e.Policy, e.Verdict)
	}
	return w.Flush()
}

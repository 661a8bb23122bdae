package dev

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// liveTable shows the servers (state, power, claim) and syncs whenever they change, so a
// newcomer watches the lifecycle happen without a second terminal. On a terminal it redraws in
// place, under intro and cut to the screen's height; otherwise (a pipe, a file) it prints the
// table again each time it changes.
func liveTable(ctx context.Context, c client.Reader, out io.Writer, intro string, every time.Duration) {
	tty := -1
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		tty = int(f.Fd())
	}
	last := ""
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if table, err := render(ctx, c); err == nil && table != last {
			last = table
			stamp := time.Now().Format("15:04:05")
			if tty >= 0 {
				_, height, err := term.GetSize(tty)
				if err != nil {
					height = 0
				}
				fmt.Fprint(out, redraw(intro+"\n\n--- "+stamp+" ---\n"+table, height))
			} else {
				fmt.Fprintf(out, "\n--- %s ---\n%s", stamp, table)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// redraw is the escape sequence that moves the cursor home and clears the screen, then text cut
// to height lines (0: not cut), the last line saying how many were left out.
func redraw(text string, height int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if height > 2 && len(lines) > height-1 {
		cut := len(lines) - (height - 2)
		lines = append(lines[:height-2], fmt.Sprintf("... %d more lines (metalhub servers lists them all)", cut))
	}
	return "\x1b[H\x1b[2J" + strings.Join(lines, "\n") + "\n"
}

func render(ctx context.Context, c client.Reader) (string, error) {
	servers := &metalv1alpha1.ServerList{}
	if err := c.List(ctx, servers); err != nil {
		return "", err
	}
	syncs := &infrahubv1alpha1.InfrahubSyncList{}
	if err := c.List(ctx, syncs); err != nil {
		return "", err
	}
	sort.Slice(servers.Items, func(i, j int) bool { return servers.Items[i].Name < servers.Items[j].Name })
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SERVER\tSTATE\tPOWER\tCLAIM")
	counts := map[string]int{}
	for _, s := range servers.Items {
		state := s.Annotations[lifecycle.StateAnnotation]
		if state == "" {
			state = string(metalv1alpha1.ServerStateInitial)
		}
		counts[state]++
		claim := ""
		if r := s.Spec.ServerClaimRef; r != nil {
			claim = r.Namespace + "/" + r.Name
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.Name, state, s.Status.PowerState, claim)
	}
	fmt.Fprintln(w, "\nSYNC\tSTATE\tLAST SYNC\tERROR")
	for _, s := range syncs.Items {
		last := ""
		if s.Status.LastSyncTime != nil {
			last = s.Status.LastSyncTime.Format("15:04:05")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.Name, s.Status.SyncState, last, s.Status.LastError)
	}
	_ = w.Flush()
	summary := make([]string, 0, len(counts))
	for k, v := range counts {
		summary = append(summary, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(summary)
	fmt.Fprintf(&b, "servers: %s\n", strings.Join(summary, ", "))
	return b.String(), nil
}

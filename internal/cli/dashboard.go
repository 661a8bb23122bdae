package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/metalhub/metalhub/internal/dashboard"
)

// dashboardCommand serves the fleet's live web view locally, with the user's kubeconfig, like
// metalctl's visualizer: what the user may not list shows as "no access".
func dashboardCommand() *cobra.Command {
	o := dashboard.DefaultOptions()
	c := &cobra.Command{
		Use:   "dashboard",
		Short: "serve the fleet's live web view (racks, claims, maintenances, syncs) on localhost",
		Long: `Serve a live web view of the fleet: servers placed in racks from their
metadata.metal.ironcore.dev/location|rack|shelf|height labels (the others on an "unplaced" shelf),
coloured by lifecycle state, with power, claim, LED, BMC health, maintenance and cordon at a
glance; click a server for its conditions and events. Claims, maintenances and InfrahubSyncs with
their VidraResources' health below. Updates arrive from watches as they happen.

It reads with your kubeconfig, so your RBAC decides what it shows. Read-only unless
--allow-actions, which adds buttons that write exactly what metalhub cordon, park and power write.
Off loopback, actions need a bearer token (--token-file, and/or --token-review for the
requester's own Kubernetes token) and only the listen address's host and --allowed-hosts may
name the page.`,
		Example: `  metalhub dashboard
  metalhub dashboard --address 127.0.0.1:0 --allow-actions
  metalhub dashboard --address 0.0.0.0:8090 --allowed-hosts dash.example.com --allow-actions --token-file ~/.metalhub/dashboard-token`,
		Args: cobra.NoArgs,
	}
	k := newKube(c)
	o.BindFlags(c.Flags())
	c.RunE = func(c *cobra.Command, _ []string) error {
		cfg, err := k.flags.ToRESTConfig()
		if err != nil {
			return fmt.Errorf("loading kubeconfig: %w", err)
		}
		log := zap.New(zap.WriteTo(c.ErrOrStderr()))
		ctrl.SetLogger(log)
		s, err := dashboard.New(cfg, o, log.WithName("dashboard"))
		if err != nil {
			return err
		}
		mode := "read-only"
		switch {
		case o.AllowActions && (o.TokenFile != "" || o.TokenReview):
			mode = "with actions for a bearer token"
		case o.AllowActions:
			mode = "with actions"
		}
		fmt.Fprintf(c.OutOrStdout(), "metalhub dashboard (%s): %s\nCtrl-C stops it.\n", mode, s.URL())
		return s.Run(c.Context())
	}
	return c
}

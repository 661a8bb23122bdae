package cli

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/apply"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/policy"
	"github.com/metalhub/metalhub/internal/controller/delivery/preview"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	"github.com/metalhub/metalhub/internal/infrahub"
	"github.com/metalhub/metalhub/internal/scheme"
)

// DeliveryCommands are the commands on Infrahub delivery.
func DeliveryCommands() []*cobra.Command {
	c := &cobra.Command{Use: "delivery", Short: "Infrahub delivery: preview a branch"}
	c.AddCommand(diffCommand())
	return []*cobra.Command{c}
}

func diffCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "diff SYNC --branch BRANCH",
		Short: "print what an Infrahub branch's artifacts would do to the cluster, applying nothing",
		Long: `Queries the sync's artifacts on BRANCH, and for each one whose checksum differs from what the sync
applied, server-side applies its objects as a dry run and compares them with the live ones; objects
the apply would prune are dry-run deleted. The dry runs act as the ServiceAccount the sync's
VidraResources apply as (spec.destination.serviceAccountName, else --as-service-account), through
your kubeconfig, which must be allowed to impersonate it; refusals (RBAC, admission, the delivery
policy given by --allowed-kinds and --allowed-namespaces) show as refused. Secret values are
never printed. Reads the sync's Infrahub credentials Secret as the operator would find it.`,
		Args: cobra.ExactArgs(1),
	}
	k := newKube(c)
	var (
		branch, format, asSA, secretsNS, operatorNS, query string
		allowPlain                                         bool
		kinds, namespaces                                  []string
		timeout                                            time.Duration
	)
	c.Flags().StringVar(&branch, "branch", "", "the Infrahub branch to preview (required)")
	c.Flags().StringVarP(&format, "output", "o", "text", "text, markdown or json")
	c.Flags().StringVar(&asSA, "as-service-account", "", "namespace/name the dry runs act as when the sync names no ServiceAccount (the manager's --delivery-default-service-account); empty: as you")
	c.Flags().StringVar(&operatorNS, "operator-namespace", "metalhub-system", "the operator's namespace, where its credentials Secrets are")
	c.Flags().StringVar(&secretsNS, "secrets-namespace", "", "the manager's --delivery-secrets-namespace")
	c.Flags().BoolVar(&allowPlain, "allow-plain-http-credentials", false, "send the Infrahub credentials to a plain http:// URL off loopback and the cluster")
	c.Flags().StringSliceVar(&kinds, "allowed-kinds", nil, "the manager's --delivery-allowed-kinds")
	c.Flags().StringSliceVar(&namespaces, "allowed-namespaces", nil, "the manager's --delivery-allowed-namespaces")
	c.Flags().StringVar(&query, "query-name", "", "the stored Infrahub query (the manager's --delivery-query-name); empty: Infrahub's default")
	c.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "timeout of each request to Infrahub and the cluster")
	_ = c.MarkFlagRequired("branch")
	c.RunE = func(c *cobra.Command, args []string) error {
		if format != "text" && format != "markdown" && format != "json" {
			return Usage(fmt.Errorf("-o %q: want text, markdown or json", format))
		}
		ctx := c.Context()
		cfg, err := k.flags.ToRESTConfig()
		if err != nil {
			return fmt.Errorf("loading kubeconfig: %w", err)
		}
		cl, err := client.New(cfg, client.Options{Scheme: scheme.New()})
		if err != nil {
			return fmt.Errorf("connecting to the cluster: %w", err)
		}
		s := &infrahubv1alpha1.InfrahubSync{}
		if err := cl.Get(ctx, client.ObjectKey{Name: args[0]}, s); err != nil {
			return fmt.Errorf("InfrahubSync %s: %w", args[0], err)
		}
		var list infrahubv1alpha1.VidraResourceList
		if err := cl.List(ctx, &list, client.MatchingLabels{manifests.SyncLabel: s.Name}); err != nil {
			return fmt.Errorf("listing the sync's VidraResources: %w", err)
		}
		var current []infrahubv1alpha1.VidraResource
		for _, vr := range list.Items {
			if apply.OwnedBy(&vr, s) && vr.DeletionTimestamp.IsZero() {
				current = append(current, vr)
			}
		}
		creds := &target.Credentials{Reader: cl, Live: cl, Scope: target.NewSecretScope(secretsNS, operatorNS),
			Timeout: timeout, MaxBody: policy.Limits{}.WithDefaults().MaxManifestBytes, AllowPlainHTTP: allowPlain}
		icfg, err := creds.Config(ctx, s)
		if err != nil {
			return err
		}
		ic, err := infrahub.New(icfg)
		if err != nil {
			return err
		}
		defaultSA := asSA
		ns, name := target.ServiceAccountFor(s.Spec.Destination, defaultSA)
		as := ""
		if name != "" {
			as = target.ServiceAccountUser(ns, name)
		}
		tcfg := rest.CopyConfig(cfg)
		tcfg.Impersonate = rest.ImpersonationConfig{UserName: as}
		hc, err := rest.HTTPClientFor(tcfg)
		if err != nil {
			return err
		}
		mapper, err := apiutil.NewDynamicRESTMapper(tcfg, hc)
		if err != nil {
			return err
		}
		tc, err := client.New(tcfg, client.Options{Scheme: scheme.New(), HTTPClient: hc, Mapper: mapper})
		if err != nil {
			return err
		}
		t := &target.Target{Key: cfg.Host, Cfg: tcfg, Client: tc, Mapper: mapper, Timeout: timeout, As: as}
		p := policy.Policy{AllowedKinds: kinds, AllowedNamespaces: namespaces, OperatorNamespace: operatorNS}
		if err := p.Validate(); err != nil {
			return Usage(err)
		}
		rep, err := preview.Run(ctx, preview.Input{Sync: s, Branch: branch, Query: query, Source: ic, Target: t, Policy: p, Current: current})
		if err != nil {
			return err
		}
		switch format {
		case "markdown":
			_, err = fmt.Fprint(c.OutOrStdout(), rep.Markdown())
			return err
		case "json":
			enc := json.NewEncoder(c.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(rep)
		}
		rep.Text(c.OutOrStdout())
		return nil
	}
	return c
}

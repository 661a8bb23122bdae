package apply

import (
	"context"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"

	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
)

// unmanagedLimit is how many unmanaged objects unmanagedIn names; one is enough to keep a
// Namespace.
const unmanagedLimit = 5

// unmanagedIn lists (up to unmanagedLimit) objects in namespace ns that no VidraResource
// manages: without our managed-by label and not owned (ownerReferences) by another object,
// which goes with its owner. What the cluster itself puts in every namespace (the
// kube-root-ca.crt ConfigMap, the default ServiceAccount, Events, Endpoints) does not count.
// Every namespaced kind the cluster serves is listed, as the identity t applies as: what it
// cannot list is an error, and the caller keeps the Namespace.
func unmanagedIn(ctx context.Context, t *target.Target, ns string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	dc, err := discovery.NewDiscoveryClientForConfig(t.Cfg)
	if err != nil {
		return nil, err
	}
	mc, err := metadata.NewForConfig(t.Cfg)
	if err != nil {
		return nil, err
	}
	lists, err := dc.ServerPreferredNamespacedResources()
	if err != nil {
		return nil, fmt.Errorf("discovering the kinds of cluster %s: %w", t.Key, err)
	}
	var out []string
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, res := range l.APIResources {
			if strings.Contains(res.Name, "/") || !canList(res.Verbs) || ignoredKind(gv.Group, res.Kind) {
				continue
			}
			items, err := mc.Resource(gv.WithResource(res.Name)).Namespace(ns).List(ctx, metav1.ListOptions{})
			if apierrors.IsNotFound(err) {
				// Discovered but no longer served: a definition deleted a moment ago (often by
				// the same cleanup). A kind not served holds nothing of anyone's here.
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("listing %s in %s: %w", res.Name, ns, err)
			}
			for _, o := range items.Items {
				if o.Labels[manifests.ManagedByLabel] == manifests.ManagedByValue || len(o.OwnerReferences) > 0 || clusterMade(gv.Group, res.Kind, o.Name) {
					continue
				}
				out = append(out, res.Kind+"/"+o.Name)
				if len(out) >= unmanagedLimit {
					sort.Strings(out)
					return out, nil
				}
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

func canList(verbs metav1.Verbs) bool {
	for _, v := range verbs {
		if v == "list" {
			return true
		}
	}
	return false
}

// ignoredKind: kinds whose objects record or mirror others and never hold a tenant's state.
func ignoredKind(group, kind string) bool {
	switch {
	case kind == "Event" && (group == "" || group == "events.k8s.io"):
		return true
	case group == "" && kind == "Endpoints":
		return true
	}
	return false
}

// clusterMade: what the cluster's controllers create in every namespace.
func clusterMade(group, kind, name string) bool {
	return group == "" && (kind == "ConfigMap" && name == "kube-root-ca.crt" || kind == "ServiceAccount" && name == "default")
}

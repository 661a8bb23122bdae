package policy

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/infrahub"
)

// Settings are the four knobs of the reference's settings ConfigMap.
type Settings struct {
	// RequeueSyncAfter is how often an InfrahubSync queries Infrahub.
	RequeueSyncAfter time.Duration
	// RequeueResourcesAfter is how often a VidraResource looks at its objects without an event.
	// Event mode never turns it off (defect 7): events can be missed, a watch can be refused.
	RequeueResourcesAfter time.Duration
	// QueryName is the stored Infrahub query that lists the artifacts.
	QueryName string
	// EventBasedReconcile restores managed objects on their change/delete events for every
	// VidraResource, not only those with spec.destination.reconcileOnEvents.
	EventBasedReconcile bool
}

// ConfigMap keys, spelt as the reference reads them.
const (
	keyRequeueSyncAfter      = "requeueSyncAfter"
	keyRequeueResourcesAfter = "requeueResourcesAfter"
	keyQueryName             = "queryName"
	keyEventBasedReconcile   = "eventBasedReconcile"
)

// MinInterval keeps a typo (1ms, 0s) from turning a requeue into a hot loop against Infrahub.
const MinInterval = time.Second

// DefaultSettings are the reference's defaults.
func DefaultSettings() Settings {
	return Settings{
		RequeueSyncAfter:      time.Minute,
		RequeueResourcesAfter: 10 * time.Minute,
		QueryName:             infrahub.DefaultQueryName,
	}
}

// Overlay returns s with the ConfigMap's values applied. Unknown keys and malformed values are
// skipped (the value of s is kept) and described in problems: a bad ConfigMap must never stop
// the operator (defect 10), but its author must be told.
func (s Settings) Overlay(data map[string]string) (out Settings, problems []string) {
	out = s
	keys := slices.Sorted(maps.Keys(data))
	for _, k := range keys {
		v := strings.TrimSpace(data[k])
		switch k {
		case keyRequeueSyncAfter, keyRequeueResourcesAfter:
			target := &out.RequeueResourcesAfter
			if k == keyRequeueSyncAfter {
				target = &out.RequeueSyncAfter
			}
			d, err := parseInterval(v)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v; keeping %s", k, err, *target))
				continue
			}
			*target = d
		case keyQueryName:
			if v == "" {
				problems = append(problems, fmt.Sprintf("%s: empty; keeping %q", k, out.QueryName))
				continue
			}
			out.QueryName = v
		case keyEventBasedReconcile:
			b, err := strconv.ParseBool(v)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %q is not a boolean; keeping %t", k, v, out.EventBasedReconcile))
				continue
			}
			out.EventBasedReconcile = b
		default:
			problems = append(problems, fmt.Sprintf("unknown key %q ignored (known: %s, %s, %s, %s)", k,
				keyRequeueSyncAfter, keyRequeueResourcesAfter, keyQueryName, keyEventBasedReconcile))
		}
	}
	return out, problems
}

// parseInterval reads a Go duration ("90s", "1m"); a bare number is taken as seconds, as users
// of the reference sometimes write.
func parseInterval(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.Atoi(v)
		if nerr != nil {
			return 0, fmt.Errorf("%q is not a duration such as 30s or 10m", v)
		}
		d = time.Duration(n) * time.Second
	}
	if d < MinInterval {
		return 0, fmt.Errorf("%q is below the minimum of %s", v, MinInterval)
	}
	return d, nil
}

// SettingsSource computes the effective settings from the flags and the settings ConfigMap as the
// cache has it now. Every pass asks, so a change is seen by the next pass without a restart.
type SettingsSource struct {
	Base      Settings
	Reader    client.Reader // cache of ConfigMaps labelled app=vidra
	Namespace string

	mu   sync.Mutex
	memo settingsView
}

// settingsView is one computation: the settings, which ConfigMap they came from and what was
// wrong with it.
type settingsView struct {
	Key      string // ConfigMap identities and resourceVersions the view was computed from
	Settings Settings
	From     *corev1.ConfigMap // nil: flags only
	Problems []string
	// Conflicting are the ConfigMaps of a conflict (more than one): none of them is used.
	Conflicting []*corev1.ConfigMap
}

// Current returns the effective settings. Errors reading the cache fall back to the flags.
func (s *SettingsSource) Current(ctx context.Context) Settings { return s.View(ctx).Settings }

// View returns the effective settings with their provenance.
func (s *SettingsSource) View(ctx context.Context) settingsView {
	var list corev1.ConfigMapList
	opts := []client.ListOption{client.MatchingLabels{manifests.SettingsLabel: manifests.SettingsLabelValue}}
	if s.Namespace != "" {
		opts = append(opts, client.InNamespace(s.Namespace))
	}
	if err := s.Reader.List(ctx, &list, opts...); err != nil {
		return settingsView{Settings: s.Base, Problems: []string{fmt.Sprintf("reading settings ConfigMaps: %v; using flags", err)}}
	}
	items := list.Items
	sort.Slice(items, func(i, j int) bool {
		if items[i].Namespace != items[j].Namespace {
			return items[i].Namespace < items[j].Namespace
		}
		return items[i].Name < items[j].Name
	})
	var key strings.Builder
	for _, cm := range items {
		fmt.Fprintf(&key, "%s/%s@%s;", cm.Namespace, cm.Name, cm.ResourceVersion)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.memo.Key == key.String() && s.memo.Key != "" {
		return s.memo
	}
	v := settingsView{Key: key.String(), Settings: s.Base}
	switch len(items) {
	case 0:
	case 1:
		cm := items[0].DeepCopy()
		v.From = cm
		v.Settings, v.Problems = s.Base.Overlay(cm.Data)
	default:
		// Two sets of settings are a conflict for a human to settle, not a sort order to win:
		// until one remains, the flags apply.
		names := make([]string, 0, len(items))
		for _, cm := range items {
			names = append(names, cm.Namespace+"/"+cm.Name)
			v.Conflicting = append(v.Conflicting, cm.DeepCopy())
		}
		v.Problems = []string{fmt.Sprintf("%d ConfigMaps are labelled %s=%s (%s): keep one; the flags apply until then",
			len(items), manifests.SettingsLabel, manifests.SettingsLabelValue, strings.Join(names, ", "))}
	}
	s.memo = v
	return v
}

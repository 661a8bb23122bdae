package firmware

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// flowOrder is the settings flow in the order it is applied: by priority, lowest first, then by
// name for equal priorities.
func flowOrder(flow []systemv1alpha1.SettingsFlowItem) []systemv1alpha1.SettingsFlowItem {
	out := slices.Clone(flow)
	slices.SortStableFunc(out, func(a, b systemv1alpha1.SettingsFlowItem) int {
		if a.Priority != b.Priority {
			return int(a.Priority) - int(b.Priority)
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// specHash names what a settings record is for: the version and the flow with its variables.
func specHash(t *systemv1alpha1.BIOSSettingsTemplate) string {
	return flowHash(t.Version, t.SettingsFlow, t.Variables)
}

func flowHash(version string, flow []systemv1alpha1.SettingsFlowItem, vars []systemv1alpha1.Variable) string {
	b, _ := json.Marshal(struct {
		V string
		F []systemv1alpha1.SettingsFlowItem
		X []systemv1alpha1.Variable
	}{version, flowOrder(flow), vars})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// flowProgress finds the first step from index from on whose settings are not in effect, and
// records every step before it applied (at now, unless it already was). i == len(flow): none
// left. An attribute the target lacks is an error.
func flowProgress(flow []systemv1alpha1.SettingsFlowItem, attrs map[string]any, from int, applied map[string]int64, now int64) (int, map[string]int64, error) {
	applied = maps.Clone(applied)
	if applied == nil {
		applied = map[string]int64{}
	}
	for i := from; i < len(flow); i++ {
		diff, err := differing(flow[i].Settings, attrs)
		if err != nil {
			return i, applied, err
		}
		if len(diff) > 0 {
			return i, applied, nil
		}
		if _, ok := applied[flow[i].Name]; !ok {
			applied[flow[i].Name] = now
		}
	}
	return len(flow), applied, nil
}

// stepIndex is the index of the step named name (0 when gone).
func stepIndex(name string, flow []systemv1alpha1.SettingsFlowItem) int {
	for i := range flow {
		if flow[i].Name == name {
			return i
		}
	}
	return 0
}

// differing are the settings of a step not in effect: name → value as the BIOS takes it (a number
// or boolean where the attribute in effect is one). An attribute the BIOS does not have is an
// error: settings are never sent blind.
func differing(settings map[string]string, current map[string]any) (map[string]any, error) {
	out := map[string]any{}
	for _, k := range slices.Sorted(mapsKeys(settings)) {
		want := settings[k]
		cur, ok := current[k]
		if !ok {
			return nil, fmt.Errorf("the BIOS has no attribute %q", k)
		}
		if fmt.Sprint(cur) == want {
			continue
		}
		v, err := typed(want, cur)
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", k, err)
		}
		out[k] = v
	}
	return out, nil
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// typed turns a wanted value into the type of the attribute in effect.
func typed(want string, cur any) (any, error) {
	switch cur.(type) {
	case float64, int, int64:
		n, err := strconv.ParseFloat(want, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", want)
		}
		if n == float64(int64(n)) {
			return int64(n), nil
		}
		return n, nil
	case bool:
		b, err := strconv.ParseBool(want)
		if err != nil {
			return nil, fmt.Errorf("%q is not a boolean", want)
		}
		return b, nil
	}
	return want, nil
}

// resolveFlow replaces $(key) in the flow's values with the variables' values.
func resolveFlow(ctx context.Context, c client.Reader, self client.Object, tmpl *systemv1alpha1.BIOSSettingsTemplate) ([]systemv1alpha1.SettingsFlowItem, error) {
	return resolveSteps(ctx, c, self, tmpl.SettingsFlow, tmpl.Variables)
}

func resolveSteps(ctx context.Context, c client.Reader, self client.Object, steps []systemv1alpha1.SettingsFlowItem, vars []systemv1alpha1.Variable) ([]systemv1alpha1.SettingsFlowItem, error) {
	flow := flowOrder(steps)
	if len(vars) == 0 {
		return flow, nil
	}
	vals := map[string]string{}
	for _, v := range vars {
		val, err := variableValue(ctx, c, self, v.ValueFrom)
		if err != nil {
			return nil, lifecycle.WithReason(systemv1alpha1.ReasonVariableNotFound, fmt.Errorf("variable %s: %w", v.Key, err))
		}
		vals[v.Key] = val
	}
	out := make([]systemv1alpha1.SettingsFlowItem, len(flow))
	for i, step := range flow {
		out[i] = systemv1alpha1.SettingsFlowItem{Name: step.Name, Priority: step.Priority, Settings: map[string]string{}}
		for k, v := range step.Settings {
			for key, val := range vals {
				v = strings.ReplaceAll(v, "$("+key+")", val)
			}
			out[i].Settings[k] = v
		}
	}
	return out, nil
}

func variableValue(ctx context.Context, c client.Reader, self client.Object, src systemv1alpha1.VariableSource) (string, error) {
	switch {
	case src.FieldRef != nil:
		return fieldOf(self, src.FieldRef.FieldPath)
	case src.ObjectFieldRef != nil:
		if src.ObjectFieldRef.Kind != "BMC" {
			return "", fmt.Errorf("objectFieldRef kind %s: only BMC", src.ObjectFieldRef.Kind)
		}
		b := &metalv1alpha1.BMC{}
		if err := c.Get(ctx, client.ObjectKey{Name: src.ObjectFieldRef.Name}, b); err != nil {
			return "", fmt.Errorf("reading BMC %s: %w", src.ObjectFieldRef.Name, err)
		}
		return fieldOf(b, src.ObjectFieldRef.FieldPath)
	case src.ConfigMapKeyRef != nil:
		r := src.ConfigMapKeyRef
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Name}, cm); err != nil {
			return "", fmt.Errorf("reading ConfigMap %s/%s: %w", r.Namespace, r.Name, err)
		}
		v, ok := cm.Data[r.Key]
		if !ok {
			return "", fmt.Errorf("ConfigMap %s/%s has no key %s", r.Namespace, r.Name, r.Key)
		}
		return v, nil
	case src.SecretKeyRef != nil:
		r := src.SecretKeyRef
		sec := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Name}, sec); err != nil {
			return "", fmt.Errorf("reading Secret %s/%s: %w", r.Namespace, r.Name, err)
		}
		v, ok := sec.Data[r.Key]
		if !ok {
			return "", fmt.Errorf("secret %s/%s has no key %s", r.Namespace, r.Name, r.Key)
		}
		return string(v), nil
	}
	return "", fmt.Errorf("no source")
}

// fieldOf reads a field path (spec.serverRef.name, or {.spec.serverRef.name}) of obj.
func fieldOf(obj client.Object, path string) (string, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return "", err
	}
	expr := path
	if !strings.HasPrefix(expr, "{") {
		expr = "{." + strings.TrimPrefix(expr, ".") + "}"
	}
	jp := jsonpath.New("field")
	if err := jp.Parse(expr); err != nil {
		return "", fmt.Errorf("field path %q: %w", path, err)
	}
	var b strings.Builder
	if err := jp.Execute(&b, u); err != nil {
		return "", fmt.Errorf("field path %q: %w", path, err)
	}
	return b.String(), nil
}

package settings

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
	"github.com/metalhub/metalhub/internal/controller/firmware/secretvalue"
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

// step is a settings flow step with its variables resolved (see settingValue).
type step struct {
	Name     string
	Priority int32
	Settings map[string]secretvalue.Value
}

// plainSteps are steps without variables, as they are written.
func plainSteps(flow []systemv1alpha1.SettingsFlowItem) []step {
	out := make([]step, len(flow))
	for i, f := range flow {
		out[i] = step{Name: f.Name, Priority: f.Priority, Settings: map[string]secretvalue.Value{}}
		for k, v := range f.Settings {
			out[i].Settings[k] = secretvalue.Plain(v)
		}
	}
	return out
}

// flowProgress finds the first step from index from on whose settings are not in effect, and
// records every step before it applied (at now, unless it already was). i == len(flow): none
// left. An attribute the target lacks is an error. Step from was just set (verified): an
// attribute of it that cannot be read back counts as in effect (see differing).
func flowProgress(flow []step, attrs map[string]any, from int, verified bool, applied map[string]int64, now int64) (int, map[string]int64, error) {
	applied = maps.Clone(applied)
	if applied == nil {
		applied = map[string]int64{}
	}
	for i := from; i < len(flow); i++ {
		diff, err := differing(flow[i].Settings, attrs, verified && i == from)
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
func stepIndex(name string, flow []step) int {
	for i := range flow {
		if flow[i].Name == name {
			return i
		}
	}
	return 0
}

// unreadable: the BMC shows a secret-sourced value's attribute as nothing (null, or empty):
// write-only, as a BIOS password is. It never reads back as what was set.
func unreadable(want secretvalue.Value, cur any) bool {
	return want.IsSecret() && (cur == nil || cur == "")
}

// differing are the settings of a step not in effect: name → value as the BIOS takes it (a number
// or boolean where the attribute in effect is one). An attribute the BIOS does not have is an
// error: settings are never sent blind. A secret-sourced value whose attribute reads back as
// nothing (unreadable) cannot be compared: it differs until it has been set (verified: the step
// was set and its restart is over), then it counts as in effect. Errors name the values as they
// print (settingValue): a secret-sourced one by its Secret.
func differing(settings map[string]secretvalue.Value, current map[string]any, verified bool) (secretvalue.Changes, error) {
	out := secretvalue.Changes{}
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		want := settings[k]
		cur, ok := current[k]
		if !ok {
			return nil, fmt.Errorf("the BIOS has no attribute %q", k)
		}
		if unreadable(want, cur) {
			if verified {
				continue
			}
		} else if fmt.Sprint(cur) == want.Reveal() {
			continue
		}
		v, err := typed(want, cur)
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", k, err)
		}
		out[k] = secretvalue.Change{Typed: v, Want: want}
	}
	return out, nil
}

// typed turns a wanted value into the type of the attribute in effect.
func typed(want secretvalue.Value, cur any) (any, error) {
	switch cur.(type) {
	case float64, int, int64:
		n, err := strconv.ParseFloat(want.Reveal(), 64)
		if err != nil {
			// Not err: strconv quotes the text it could not parse.
			return nil, fmt.Errorf("%q is not a number", want)
		}
		if n == float64(int64(n)) {
			return int64(n), nil
		}
		return n, nil
	case bool:
		b, err := strconv.ParseBool(want.Reveal())
		if err != nil {
			return nil, fmt.Errorf("%q is not a boolean", want)
		}
		return b, nil
	}
	return want.Reveal(), nil
}

// resolveFlow replaces $(key) in the flow's values with the variables' values; Secrets are read
// only from secretNS.
func resolveFlow(ctx context.Context, c client.Reader, self client.Object, tmpl *systemv1alpha1.BIOSSettingsTemplate, secretNS string) ([]step, error) {
	return resolveSteps(ctx, c, self, tmpl.SettingsFlow, tmpl.Variables, secretNS)
}

// resolveSteps is resolveFlow for any flow. An error carries its reason: VariableNotFound, or
// SecretRefNotAllowed, which the spec must fix.
func resolveSteps(ctx context.Context, c client.Reader, self client.Object, steps []systemv1alpha1.SettingsFlowItem, vars []systemv1alpha1.Variable, secretNS string) ([]step, error) {
	flow := flowOrder(steps)
	if len(vars) == 0 {
		return plainSteps(flow), nil
	}
	vals := map[string]secretvalue.Value{}
	for _, v := range vars {
		val, err := variableValue(ctx, c, self, v.ValueFrom, secretNS)
		if err != nil {
			reason, ok := lifecycle.ReasonOf(err)
			if !ok {
				reason = systemv1alpha1.ReasonVariableNotFound
			}
			return nil, lifecycle.WithReason(reason, fmt.Errorf("variable %s: %w", v.Key, err))
		}
		vals[v.Key] = val
	}
	out := make([]step, len(flow))
	for i, f := range flow {
		out[i] = step{Name: f.Name, Priority: f.Priority, Settings: map[string]secretvalue.Value{}}
		for k, v := range f.Settings {
			out[i].Settings[k] = secretvalue.Substitute(v, vals)
		}
	}
	return out, nil
}

func variableValue(ctx context.Context, c client.Reader, self client.Object, src systemv1alpha1.VariableSource, secretNS string) (secretvalue.Value, error) {
	switch {
	case src.FieldRef != nil:
		v, err := fieldOf(self, src.FieldRef.FieldPath)
		return secretvalue.Plain(v), err
	case src.ObjectFieldRef != nil:
		if src.ObjectFieldRef.Kind != "BMC" {
			return secretvalue.Value{}, fmt.Errorf("objectFieldRef kind %s: only BMC", src.ObjectFieldRef.Kind)
		}
		b := &metalv1alpha1.BMC{}
		if err := c.Get(ctx, client.ObjectKey{Name: src.ObjectFieldRef.Name}, b); err != nil {
			return secretvalue.Value{}, fmt.Errorf("reading BMC %s: %w", src.ObjectFieldRef.Name, err)
		}
		v, err := fieldOf(b, src.ObjectFieldRef.FieldPath)
		return secretvalue.Plain(v), err
	case src.ConfigMapKeyRef != nil:
		r := src.ConfigMapKeyRef
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Name}, cm); err != nil {
			return secretvalue.Value{}, fmt.Errorf("reading ConfigMap %s/%s: %w", r.Namespace, r.Name, err)
		}
		v, ok := cm.Data[r.Key]
		if !ok {
			return secretvalue.Value{}, fmt.Errorf("ConfigMap %s/%s has no key %s", r.Namespace, r.Name, r.Key)
		}
		return secretvalue.Plain(v), nil
	case src.SecretKeyRef != nil:
		r := src.SecretKeyRef
		if err := secretvalue.RefAllowed("secretKeyRef", r.Namespace, r.Name, secretNS); err != nil {
			return secretvalue.Value{}, err
		}
		sec := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Name}, sec); err != nil {
			return secretvalue.Value{}, fmt.Errorf("reading Secret %s/%s: %w", r.Namespace, r.Name, err)
		}
		v, ok := sec.Data[r.Key]
		if !ok {
			return secretvalue.Value{}, fmt.Errorf("secret %s/%s has no key %s", r.Namespace, r.Name, r.Key)
		}
		return secretvalue.FromSecret(string(v), fmt.Sprintf("Secret %s/%s key %s", r.Namespace, r.Name, r.Key)), nil
	}
	return secretvalue.Value{}, fmt.Errorf("no source")
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

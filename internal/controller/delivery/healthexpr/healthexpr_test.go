package healthexpr

import (
	"context"
	"strings"
	"testing"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

func widget(statusFields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "Widget",
		"metadata":   map[string]any{"name": "w", "namespace": "ns", "generation": int64(2)},
		"spec":       map[string]any{"size": int64(3)},
	}}
	if statusFields != nil {
		u.Object["status"] = statusFields
	}
	return u
}

func TestEvaluate(t *testing.T) {
	entry := infrahubv1alpha1.HealthExpression{
		APIVersion: "example.com/v1", Kind: "Widget",
		Failed:     "status.phase == 'Broken'",
		Current:    "status.ready == true",
		InProgress: "status.phase == 'Building'",
	}
	for _, tc := range []struct {
		name    string
		entries []infrahubv1alpha1.HealthExpression
		obj     *unstructured.Unstructured
		want    status.Status
		matched bool
		msg     string // a part of the message
	}{
		{name: "no entries", obj: widget(nil), matched: false},
		{name: "no entry for the kind", entries: []infrahubv1alpha1.HealthExpression{{APIVersion: "example.com/v1", Kind: "Gadget", Current: "true"}}, obj: widget(nil), matched: false},
		{name: "another version of the kind", entries: []infrahubv1alpha1.HealthExpression{{APIVersion: "example.com/v2", Kind: "Widget", Current: "true"}}, obj: widget(nil), matched: false},
		{name: "current", entries: []infrahubv1alpha1.HealthExpression{entry}, obj: widget(map[string]any{"ready": true}), want: status.CurrentStatus, matched: true},
		{name: "failed wins over current", entries: []infrahubv1alpha1.HealthExpression{entry}, obj: widget(map[string]any{"ready": true, "phase": "Broken"}), want: status.FailedStatus, matched: true, msg: "healthExpressions[0].failed is true: status.phase == 'Broken'"},
		{name: "current wins over inProgress", entries: []infrahubv1alpha1.HealthExpression{entry}, obj: widget(map[string]any{"ready": true, "phase": "Building"}), want: status.CurrentStatus, matched: true},
		{name: "inProgress", entries: []infrahubv1alpha1.HealthExpression{entry}, obj: widget(map[string]any{"ready": false, "phase": "Building"}), want: status.InProgressStatus, matched: true, msg: "inProgress is true"},
		{name: "none true", entries: []infrahubv1alpha1.HealthExpression{entry}, obj: widget(map[string]any{"ready": false, "phase": "Idle"}), want: status.InProgressStatus, matched: true, msg: "current is not true yet"},
		{name: "no status yet: errors count as not true", entries: []infrahubv1alpha1.HealthExpression{entry}, obj: widget(nil), want: status.InProgressStatus, matched: true, msg: "no such key"},
		{name: "has() on a missing status", entries: []infrahubv1alpha1.HealthExpression{{APIVersion: "example.com/v1", Kind: "Widget", Current: "has(status.ready) && status.ready"}}, obj: widget(nil), want: status.InProgressStatus, matched: true},
		{name: "optional field access", entries: []infrahubv1alpha1.HealthExpression{{APIVersion: "example.com/v1", Kind: "Widget",
			Current: "status.?conditions.orValue([]).exists(c, c.type == 'Ready' && c.status == 'True')"}},
			obj: widget(map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}), want: status.CurrentStatus, matched: true},
		{name: "metadata and spec", entries: []infrahubv1alpha1.HealthExpression{{APIVersion: "example.com/v1", Kind: "Widget", Current: "metadata.name == 'w' && spec.size == 3"}}, obj: widget(nil), want: status.CurrentStatus, matched: true},
		{name: "observedGeneration behind", entries: []infrahubv1alpha1.HealthExpression{entry}, obj: widget(map[string]any{"ready": true, "observedGeneration": int64(1)}), want: status.InProgressStatus, matched: true, msg: "generation 1"},
		{name: "not bool at run time", entries: []infrahubv1alpha1.HealthExpression{{APIVersion: "example.com/v1", Kind: "Widget", Current: "status.phase"}}, obj: widget(map[string]any{"phase": "x"}), want: status.InProgressStatus, matched: true, msg: "not bool"},
		{name: "does not compile", entries: []infrahubv1alpha1.HealthExpression{{APIVersion: "example.com/v1", Kind: "Widget", Current: "status.ready =="}}, obj: widget(map[string]any{"ready": true}), want: status.FailedStatus, matched: true, msg: "healthExpressions[0].current:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, msg, matched := For(tc.entries).Evaluate(context.Background(), tc.obj)
			if matched != tc.matched || st != tc.want || !strings.Contains(msg, tc.msg) {
				t.Fatalf("got %q %q matched %v; want %q containing %q matched %v", st, msg, matched, tc.want, tc.msg, tc.matched)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	list := []infrahubv1alpha1.HealthExpression{
		{APIVersion: "v1", Kind: "ConfigMap", Current: "true"},
		{APIVersion: "example.com/v1", Kind: "Widget", Current: "status.ready ==", Failed: "status.phase == 'x'"},
		{APIVersion: "example.com/v1", Kind: "Gadget", Current: "status.x", InProgress: "1 + 1", Failed: "nosuchvar == 1"},
	}
	got := Validate(list)
	var names []string
	for _, p := range got {
		names = append(names, p.Error())
	}
	want := []string{"healthExpressions[1].current:", "healthExpressions[2].failed:", "healthExpressions[2].inProgress:"}
	if len(got) != len(want) {
		t.Fatalf("problems %q, want %d", names, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(names[i], w) {
			t.Fatalf("problem %d %q, want it to start %q", i, names[i], w)
		}
	}
	if !strings.Contains(names[1], "undeclared reference to 'nosuchvar'") || !strings.Contains(names[2], "not bool") {
		t.Fatalf("messages do not say what is wrong: %q", names)
	}
}

package webhook

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

func expr(key string, op metav1.LabelSelectorOperator, values ...string) metav1.LabelSelectorRequirement {
	return metav1.LabelSelectorRequirement{Key: key, Operator: op, Values: values}
}

func TestValidateServerSelector(t *testing.T) {
	tests := []struct {
		name string
		sel  *metav1.LabelSelector
		want string // in the error; empty: valid
	}{
		{name: "none"},
		{name: "empty", sel: &metav1.LabelSelector{}},
		{name: "labels", sel: &metav1.LabelSelector{MatchLabels: map[string]string{"metal.ironcore.dev/rack": "r1", "gpu": ""}}},
		{name: "every operator", sel: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			expr("a", metav1.LabelSelectorOpIn, "x"), expr("b", metav1.LabelSelectorOpNotIn, "y", "z"),
			expr("c", metav1.LabelSelectorOpExists), expr("d", metav1.LabelSelectorOpDoesNotExist)}}},
		{name: "operator in lower case", sel: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{expr("a", "in", "x")}},
			want: `spec.serverSelector.matchExpressions[0].operator: Invalid value: "in": not a valid selector operator`},
		{name: "Gt is for node selectors only", sel: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{expr("a", metav1.LabelSelectorOpExists), expr("cpus", "Gt", "8")}},
			want: `spec.serverSelector.matchExpressions[1].operator: Invalid value: "Gt"`},
		{name: "In without values", sel: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{expr("a", metav1.LabelSelectorOpIn)}},
			want: "spec.serverSelector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"},
		{name: "NotIn without values", sel: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{expr("a", metav1.LabelSelectorOpNotIn)}},
			want: "spec.serverSelector.matchExpressions[0].values: Required value"},
		{name: "Exists with values", sel: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{expr("a", metav1.LabelSelectorOpExists, "x")}},
			want: "spec.serverSelector.matchExpressions[0].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"},
		{name: "DoesNotExist with values", sel: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{expr("a", metav1.LabelSelectorOpDoesNotExist, "x")}},
			want: "spec.serverSelector.matchExpressions[0].values: Forbidden"},
		{name: "bad expression key", sel: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{expr("rack id", metav1.LabelSelectorOpExists)}},
			want: `spec.serverSelector.matchExpressions[0].key: Invalid value: "rack id": name part must consist of alphanumeric characters`},
		{name: "bad expression value", sel: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{expr("rack", metav1.LabelSelectorOpIn, "r1", "row 2")}},
			want: `spec.serverSelector.matchExpressions[0].values[1]: Invalid value: "row 2": a valid label must be an empty string or consist of alphanumeric characters`},
		{name: "bad label key", sel: &metav1.LabelSelector{MatchLabels: map[string]string{"-rack": "r1"}},
			want: `spec.serverSelector.matchLabels: Invalid value: "-rack": name part must consist of alphanumeric characters`},
		{name: "bad label value", sel: &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "r1/r2"}},
			want: `spec.serverSelector.matchLabels: Invalid value: "r1/r2": a valid label must be an empty string or consist of alphanumeric characters`},
		{name: "label value too long", sel: &metav1.LabelSelector{MatchLabels: map[string]string{"rack": strings.Repeat("r", 64)}},
			want: "must be no more than 63 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateServerSelector(tc.sel, field.NewPath("spec", "serverSelector"))
			// The webhook refuses exactly what the claim controller cannot use.
			_, convErr := metav1.LabelSelectorAsSelector(tc.sel)
			if (convErr != nil) != (len(errs) > 0) {
				t.Fatalf("webhook errors %v, but LabelSelectorAsSelector says %v", errs, convErr)
			}
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			if !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Fatalf("errors %q do not say %q", errs.ToAggregate().Error(), tc.want)
			}
		})
	}
}

func claim(sel *metav1.LabelSelector, ref string) *metalv1alpha1.ServerClaim {
	c := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default"},
		Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "img", ServerSelector: sel}}
	if ref != "" {
		c.Spec.ServerRef = &corev1.LocalObjectReference{Name: ref}
	}
	return c
}

func TestServerClaimValidator(t *testing.T) {
	ctx := context.Background()
	bad := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{expr("a", metav1.LabelSelectorOpIn)}}
	good := &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
	v := ServerClaimValidator{}

	// serverRef and a selector together are fine.
	if _, err := v.ValidateCreate(ctx, claim(good, "server-1")); err != nil {
		t.Fatalf("claim with serverRef and selector refused: %v", err)
	}
	_, err := v.ValidateCreate(ctx, claim(bad, ""))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `ServerClaim.metal.ironcore.dev "c" is invalid: spec.serverSelector.matchExpressions[0].values: Required value`) {
		t.Fatalf("bad selector: %v", err)
	}
	// A claim that got its bad selector before the webhook existed can still be updated (the
	// controller writes its finalizer) as long as the selector stays; fixing it is allowed,
	// breaking a good one is not.
	if _, err := v.ValidateUpdate(ctx, claim(bad, ""), claim(bad, "")); err != nil {
		t.Fatalf("unchanged bad selector refused: %v", err)
	}
	if _, err := v.ValidateUpdate(ctx, claim(bad, ""), claim(good, "")); err != nil {
		t.Fatalf("fixed selector refused: %v", err)
	}
	if _, err := v.ValidateUpdate(ctx, claim(good, ""), claim(bad, "")); !apierrors.IsInvalid(err) {
		t.Fatalf("selector broken by an update: %v", err)
	}
}

package settings

import (
	"context"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/secretvalue"
)

func TestDiffering(t *testing.T) {
	current := map[string]any{"BootMode": "Uefi", "NumaNodesPerSocket": float64(1), "SriovGlobalEnable": "Disabled", "TpmOn": true}
	for _, tc := range []struct {
		name string
		want map[string]string
		diff map[string]any
		err  string
	}{
		{"all in effect", map[string]string{"BootMode": "Uefi", "NumaNodesPerSocket": "1", "TpmOn": "true"}, map[string]any{}, ""},
		{"typed as in effect", map[string]string{"NumaNodesPerSocket": "2", "TpmOn": "false", "BootMode": "Bios"},
			map[string]any{"NumaNodesPerSocket": int64(2), "TpmOn": false, "BootMode": "Bios"}, ""},
		{"unknown attribute", map[string]string{"bootMode": "Uefi"}, nil, `no attribute "bootMode"`},
		{"not a number", map[string]string{"NumaNodesPerSocket": "two"}, nil, "not a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := map[string]secretvalue.Value{}
			for k, v := range tc.want {
				want[k] = secretvalue.Plain(v)
			}
			got, err := differing(want, current, false)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got.Send(), tc.diff) {
				t.Fatalf("differing = %v %v, want %v", got, err, tc.diff)
			}
		})
	}
}

func TestFlowOrderAndVariables(t *testing.T) {
	s := &systemv1alpha1.BIOSSettings{
		ObjectMeta: metav1.ObjectMeta{Name: "s"},
		Spec: systemv1alpha1.BIOSSettingsSpec{ServerRef: &corev1.LocalObjectReference{Name: "r1-s4"},
			BIOSSettingsTemplate: systemv1alpha1.BIOSSettingsTemplate{Version: "1",
				SettingsFlow: []systemv1alpha1.SettingsFlowItem{
					{Name: "late", Priority: 20, Settings: map[string]string{"A": "x"}},
					{Name: "early", Priority: 10, Settings: map[string]string{"HostName": "$(host)-bmc"}},
				},
				Variables: []systemv1alpha1.Variable{{Key: "host", ValueFrom: systemv1alpha1.VariableSource{FieldRef: &systemv1alpha1.FieldRef{FieldPath: "spec.serverRef.name"}}}},
			}},
	}
	flow, err := resolveFlow(context.Background(), nil, s, &s.Spec.BIOSSettingsTemplate, "default")
	if err != nil {
		t.Fatal(err)
	}
	if flow[0].Name != "early" || flow[1].Name != "late" || flow[0].Settings["HostName"].Reveal() != "r1-s4-bmc" {
		t.Fatalf("flow %+v", flow)
	}
}

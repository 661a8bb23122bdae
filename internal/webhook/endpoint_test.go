package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

func TestNormalizeMAC(t *testing.T) {
	for in, want := range map[string]string{
		"52:54:00:AA:BB:01":   "52:54:00:aa:bb:01",
		"52-54-00-aa-bb-01":   "52:54:00:aa:bb:01",
		"52:54-00:Aa-bB:01":   "52:54:00:aa:bb:01",
		"525400aabb01":        "52:54:00:aa:bb:01",
		"5254.00aa.bb01":      "52:54:00:aa:bb:01",
		" 52:54:00:aa:bb:01 ": "52:54:00:aa:bb:01",
		"":                    "",
		"not-a-mac":           "not-a-mac",
		"52:54:00:aa:bb":      "52:54:00:aa:bb",
		"52:54:00:aa:bb:zz":   "52:54:00:aa:bb:zz",
	} {
		if got := NormalizeMAC(in); got != want {
			t.Errorf("NormalizeMAC(%q) = %q, want %q", in, got, want)
		}
	}
}

func endpoint(name, mac string) metalv1alpha1.Endpoint {
	return metalv1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: metalv1alpha1.EndpointSpec{MACAddress: mac, IP: "10.0.0.1"}}
}

func TestValidateUniqueMAC(t *testing.T) {
	others := []metalv1alpha1.Endpoint{endpoint("rack1-bmc", "52:54:00:AA:BB:01"), endpoint("no-mac", ""), endpoint("rack2-bmc", "52:54:00:aa:bb:02")}
	tests := []struct {
		name, ep, mac string
		want          string // in the error; empty: allowed
	}{
		{name: "same MAC other case and separator", ep: "new", mac: "52-54-00-aa-bb-01",
			want: `spec.macAddress: Duplicate value: "52-54-00-aa-bb-01": MAC address 52:54:00:aa:bb:01 is already used by Endpoint "rack1-bmc"`},
		{name: "same MAC exactly", ep: "new", mac: "52:54:00:aa:bb:02", want: `Endpoint "rack2-bmc"`},
		{name: "unique MAC", ep: "new", mac: "52:54:00:aa:bb:03"},
		{name: "itself", ep: "rack1-bmc", mac: "52:54:00:aa:bb:01"},
		{name: "no MAC", ep: "new", mac: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ep := endpoint(tc.ep, tc.mac)
			checkRefusal(t, ValidateUniqueMAC(&ep, others), tc.want)
		})
	}
}

// An update that keeps the MAC (normalised) is not checked, so the list is not even read; a
// deleted Endpoint is never checked.
func TestEndpointUpdateChecksOnlyMACChanges(t *testing.T) {
	v := &EndpointValidator{Reader: nil} // a list would panic
	old, upd := endpoint("e", "52:54:00:AA:BB:01"), endpoint("e", "52-54-00-aa-bb-01")
	if _, err := v.ValidateUpdate(context.Background(), &old, &upd); err != nil {
		t.Fatal(err)
	}
	upd.Spec.MACAddress = "52:54:00:aa:bb:09"
	upd.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if _, err := v.ValidateUpdate(context.Background(), &old, &upd); err != nil {
		t.Fatal(err)
	}
}

// checkRefusal asserts that errs is empty when want is, else that it holds one error saying want.
func checkRefusal(t *testing.T, errs field.ErrorList, want string) {
	t.Helper()
	if want == "" {
		if len(errs) > 0 {
			t.Fatalf("refused: %v", errs)
		}
		return
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), want) {
		t.Fatalf("errors %v, want one saying %q", errs, want)
	}
}

package bmccontroller

import (
	"context"
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
)

// One BMC written by name and by IP is found either way: by the IPs its name resolves to, and,
// from the other side, by the IP a name was last observed to resolve to (status.ip, indexed).
func TestSameAddressByName(t *testing.T) {
	proto := metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: 443}
	inline := func(name, host, observed string) *metalv1alpha1.BMC {
		return &metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:   metalv1alpha1.BMCSpec{Access: &metalv1alpha1.InlineEndpoint{IP: host}, Protocol: proto},
			Status: metalv1alpha1.BMCStatus{IP: observed}}
	}
	byEndpoint := &metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: "ep-7"},
		Spec: metalv1alpha1.BMCSpec{EndpointRef: &corev1.LocalObjectReference{Name: "ep-7"}, Protocol: proto}}
	objs := []client.Object{
		inline("ip-7", "10.0.0.7", ""), byEndpoint,
		&metalv1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Name: "ep-7"}, Spec: metalv1alpha1.EndpointSpec{IP: "10.0.0.7"}},
		inline("name-7", "bmc7.example", ""),
		inline("ip-8", "10.0.0.8", ""),
		inline("name-9", "BMC9.example.", "10.0.0.9"), inline("ip-9", "10.0.0.9", ""),
	}
	c := metaltest.FakeClient(objs...)
	get := func(name string) *metalv1alpha1.BMC {
		b := &metalv1alpha1.BMC{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		bmc  string
		ips  []string
		want []string
	}{
		{"name-7", []string{"10.0.0.7"}, []string{"ep-7", "ip-7"}},
		{"name-7", nil, nil}, // does not resolve: compared as written
		{"ip-7", nil, []string{"ep-7"}},
		{"ip-9", nil, []string{"name-9"}},                  // name-9 was seen at 10.0.0.9
		{"name-9", []string{"10.0.0.9"}, []string{"ip-9"}}, // and finds ip-9 itself
		{"name-7", []string{"10.0.0.8", "10.0.0.7"}, []string{"ep-7", "ip-7", "ip-8"}},
	} {
		others, _, err := sameAddress(context.Background(), c, get(tc.bmc), tc.ips)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, o := range others {
			got = append(got, o.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("sameAddress(%s, %v) = %v, want %v", tc.bmc, tc.ips, got, tc.want)
		}
	}
}

func TestResolve(t *testing.T) {
	r := &Reconciler{Resolve: func(_ context.Context, host string) ([]string, error) {
		if host == "bmc7.example" {
			return []string{"::ffff:10.0.0.7", "10.0.0.7", "2001:DB8::7"}, nil
		}
		return nil, errors.New("no such host")
	}}
	for host, want := range map[string][]string{
		"BMC7.example.": {"10.0.0.7", "2001:db8::7"},
		"10.0.0.7":      nil, // an IP needs no lookup
		"gone.example":  nil,
		"":              nil,
	} {
		if got := r.resolve(context.Background(), host); !slices.Equal(got, want) {
			t.Errorf("resolve(%q) = %v, want %v", host, got, want)
		}
	}
}

package target

import "testing"

// Issue 42 finding 7: credentials go over plain http without a flag only where the wire does
// not leave the node or the cluster network: loopback and in-cluster Service names.
func TestPlainHTTPAllowedByDefault(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want bool
	}{
		{"http://127.0.0.1:8300", true},
		{"http://127.8.9.10", true},
		{"http://[::1]:8000", true},
		{"http://localhost:8000", true},
		{"http://LOCALHOST", true},
		{"http://infrahub.infrahub.svc:8000", true},
		{"http://infrahub.infrahub.svc.cluster.local:8000", true},
		{"http://infrahub.infrahub.SVC.Cluster.Local", true},
		{"http://infrahub.infrahub.svc.cluster.local.:8000", true},
		{"http://svc", false},
		{"http://.svc", false},
		{"http://infrahub.example.com:8000", false},
		{"http://infrahub.svc.example.com", false},
		{"http://localhost.example.com", false},
		{"http://10.0.0.5:8000", false},
		{"http://192.0.2.1", false},
		{"http://[::2]", false},
		{"http://0.0.0.0:8000", false},
		{"http://cluster.local", false},
	} {
		e, err := ParseEndpoint(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if got := plainHTTPByDefault(e.host); got != tc.want {
			t.Errorf("plainHTTPByDefault(%q) = %t, want %t", e.host, got, tc.want)
		}
	}
}

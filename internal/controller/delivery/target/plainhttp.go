package target

import (
	"net"
	"strings"
)

// plainHTTPByDefault says whether credentials may go over plain http to host without
// --delivery-allow-plain-http-credentials: on loopback they never leave the node, and an
// in-cluster Service name (*.svc, *.svc.cluster.local) keeps them on the cluster network, which
// is where Vidra users run Infrahub beside the operator. Any other host needs the flag. host is
// lower-case, without port or brackets (endpoint.host).
func plainHTTPByDefault(host string) bool {
	if host == "localhost" {
		return true
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	host = strings.TrimSuffix(host, ".")
	for _, suffix := range []string{".svc", ".svc.cluster.local"} {
		if name, ok := strings.CutSuffix(host, suffix); ok && name != "" {
			return true
		}
	}
	return false
}

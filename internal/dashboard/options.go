// Package dashboard serves the live web view of the fleet: racks of servers coloured by state,
// their claims, maintenances and Infrahub syncs, kept current from watches on the API server
// with the user's own kubeconfig, so what it shows and may change is the user's RBAC.
//
// Every change it makes is an internal/fleetops write, the same as the CLI's; beyond that it
// writes only the token and access reviews that check a caller. It never acts on a BMC and never
// uses the operator's identity.
package dashboard

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/metalhub/metalhub/internal/telemetry/latest"
)

// DefaultTelemetryRefresh is how often tiles take the telemetry readings again by default: the
// collector reads each server every --telemetry-interval, at the least a few seconds.
const DefaultTelemetryRefresh = 5 * time.Second

// Options configure the dashboard.
type Options struct {
	// Address is the listen address; port 0 picks one (see Server.URL).
	Address string
	// AllowActions enables the buttons that write (cordon/uncordon, park/unpark, power).
	// Off, the dashboard is read-only and refuses every write with 403.
	AllowActions bool
	// TokenFile holds a bearer token that authorises actions (Authorization: Bearer; the page
	// asks for it once). Needed, or TokenReview, for actions off loopback.
	TokenFile string
	// TokenReview authorises actions by the requester's own Kubernetes bearer token: a
	// TokenReview says who it is, a SubjectAccessReview whether they may patch the server.
	TokenReview bool
	// AllowedHosts are further Host names the page may be opened under ("name" on any port, or
	// "name:port"), besides the listen address's own; every other Host is refused.
	AllowedHosts []string
	// RecorderURL is the base URL of the BMC emulator's control endpoint (development only):
	// a server's details then show the power and boot actions its BMC recorded.
	RecorderURL string
	// Telemetry, when set, gives each server's latest telemetry reading (the operator's
	// collector, in the same process: metalhub dev), which its tile shows: power draw, hottest
	// temperature and a badge for a failed power supply or fan. The dashboard never reads a
	// BMC itself. Nil: tiles show no telemetry.
	Telemetry latest.Source
	// TelemetryRefresh is how often the tiles take the readings again (default 5s).
	TelemetryRefresh time.Duration
	// PrometheusURL, when Telemetry is nil, is a Prometheus server that scrapes the operator:
	// the tiles then take the collector's readings from it (metalhub dashboard runs apart from
	// the operator and cannot borrow its memory).
	PrometheusURL string
}

// DefaultOptions are loopback-only and read-only.
func DefaultOptions() Options {
	return Options{Address: "127.0.0.1:8090"}
}

// BindFlags registers the options as flags on fs.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Address, "address", o.Address,
		"Listen address of the dashboard (host:port; port 0 picks a free one). Anything but loopback exposes the fleet, with your credentials, to the network.")
	fs.BoolVar(&o.AllowActions, "allow-actions", o.AllowActions,
		"Show buttons that change servers (cordon/uncordon, park/unpark, power on/off/restart), written with your credentials. Off: read-only.")
	fs.StringVar(&o.TokenFile, "token-file", o.TokenFile,
		"File holding a bearer token (16 characters or more) that actions must carry as Authorization: Bearer; the page asks for it once. Actions off loopback need this or --token-review.")
	fs.BoolVar(&o.TokenReview, "token-review", o.TokenReview,
		"Accept the requester's own Kubernetes bearer token for actions, checked by TokenReview and a SubjectAccessReview for patch on the server (your kubeconfig's user needs create on both).")
	fs.StringSliceVar(&o.AllowedHosts, "allowed-hosts", o.AllowedHosts,
		"Host names the page may be opened under besides the listen address's own (name or name:port, comma-separated); any other Host header is refused, against DNS rebinding.")
	fs.StringVar(&o.PrometheusURL, "prometheus-url", o.PrometheusURL,
		"Base URL of a Prometheus server that scrapes the operator: the tiles then show each server's power draw, hottest temperature and failed power supplies or fans, from the telemetry collector's metalhub_server_* gauges (--telemetry-interval on the operator).")
	fs.StringVar(&o.RecorderURL, "recorder-url", o.RecorderURL,
		"Development only: base URL of the BMC emulator's control endpoint; a server's details then list the power and boot actions its BMC recorded.")
}

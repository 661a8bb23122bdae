// Package dashboard serves the live web view of the fleet: racks of servers coloured by state,
// their claims, maintenances and Infrahub syncs, kept current from watches on the API server
// with the user's own kubeconfig, so what it shows and may change is the user's RBAC.
package dashboard

import "github.com/spf13/pflag"

// Options configure the dashboard.
type Options struct {
	// Address is the listen address; port 0 picks one (see Server.URL).
	Address string
	// AllowActions enables the buttons that write (cordon/uncordon, park/unpark, power).
	// Off, the dashboard is read-only and refuses every write with 403.
	AllowActions bool
	// RecorderURL is the base URL of the BMC emulator's control endpoint (development only):
	// a server's details then show the power and boot actions its BMC recorded.
	RecorderURL string
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
	fs.StringVar(&o.RecorderURL, "recorder-url", o.RecorderURL,
		"Development only: base URL of the BMC emulator's control endpoint; a server's details then list the power and boot actions its BMC recorded.")
}

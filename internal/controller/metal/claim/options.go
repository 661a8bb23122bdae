package claim

import (
	"flag"
	"time"
)

// Options configure the claim controller. The zero value is usable: the default safety-net
// resync and fan-out.
type Options struct {
	// Resync is how often a claim that could not bind looks again by itself. A freed server wakes
	// waiting claims at once, so this is only a safety net.
	Resync time.Duration
	// WakeFanOut bounds how many waiting claims one freed server wakes (oldest first).
	WakeFanOut int
	// Concurrency is the number of parallel claim reconciles; 0 takes the family's. Binding
	// makes no BMC calls, only API writes that wait on the API server, so it runs wider than
	// the Server controller (BenchmarkClaims measures a burst at either width).
	Concurrency int
}

const (
	defaultClaimResync = time.Minute
	defaultWakeFanOut  = 4
	// defaultClaimConcurrency: see Options.Concurrency.
	defaultClaimConcurrency = 64
)

// DefaultOptions are the settings for a real fleet.
func DefaultOptions() Options {
	return Options{Resync: defaultClaimResync, WakeFanOut: defaultWakeFanOut, Concurrency: defaultClaimConcurrency}
}

// BindFlags registers the flags of the claim family.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.Resync, "claim-resync", o.Resync, "Safety-net interval at which a claim that could not bind looks again.")
	fs.IntVar(&o.WakeFanOut, "claim-wake-fan-out", o.WakeFanOut, "Waiting claims one freed server wakes, oldest first.")
	fs.IntVar(&o.Concurrency, "claim-concurrency", o.Concurrency, "Parallel claim reconciles (0: --metal-concurrency); binding only writes to the API server, so it runs wider.")
}

// WithDefaults fills what is left zero with the defaults.
func (o Options) WithDefaults() Options {
	if o.Resync <= 0 {
		o.Resync = defaultClaimResync
	}
	if o.WakeFanOut <= 0 {
		o.WakeFanOut = defaultWakeFanOut
	}
	return o
}

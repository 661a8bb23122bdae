package server

import (
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/health"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	"github.com/metalhub/metalhub/internal/shard"
)

// Options configure the Server controller.
type Options struct {
	// BMCRequestTimeout bounds every Redfish request, from the moment it has one of the BMC's
	// request slots until its answer.
	BMCRequestTimeout time.Duration
	// BMCPassTimeout bounds one pass's BMC calls together, the waits for the BMC's request
	// slots included: no pass waits longer on a BMC (zero: DefaultBMCPassTimeout). A pass
	// makes several requests in turn, and a real BMC answers each in up to seconds and serves
	// a few at a time to every system it manages; a pass bounded by one request's time ran out
	// of it on BMCs that were merely busy, which counted as their failure.
	BMCPassTimeout time.Duration
	// BMCResetSettle is how long after a reset of unknown outcome (a BMC's, or a server's
	// restart) an unchanged LastResetTime means it never arrived (and it is issued again).
	BMCResetSettle time.Duration
	// Concurrency is the number of parallel reconciles per controller.
	Concurrency int
	// ServerResync is the steady-state look at a server (one Redfish request).
	ServerResync time.Duration
	// RetryAfter is the look after a failure.
	RetryAfter time.Duration
	// PowerPoll is how often a power change in flight is observed.
	PowerPoll time.Duration
	// PowerTimeout is how long a power change may take before it is issued again.
	PowerTimeout time.Duration
	// DiscoveryNamespace holds the discovery ServerBootConfigurations and their Secrets.
	DiscoveryNamespace string
	// DiscoveryImage is the OS image the discovery boot configuration boots.
	DiscoveryImage string
	// DiscoveryBootMethod is how servers boot the discovery image: PXE (default), HTTP (UEFI
	// HTTP boot) or VirtualMedia (the ISO at DiscoveryBootURI, for sites without DHCP).
	DiscoveryBootMethod metalv1alpha1.BootMethod
	// DiscoveryBootURI is the discovery image the BMC boots with HTTP or VirtualMedia.
	DiscoveryBootURI string
	// DiscoveryTimeout sends a Server back to Initial when no report arrived in time.
	DiscoveryTimeout time.Duration
	// ErrorThreshold is the number of consecutive BMC failures after which a Server is Error.
	ErrorThreshold int
	// Ignition renders the ignition of a server's round with its token: a discovery round's
	// (cleaning "") or a cleaning round's, which starts the agent erasing by that policy. Setup
	// fills it from the options above when RegistryURL is set.
	Ignition func(s *metalv1alpha1.Server, token string, cleaning metalv1alpha1.CleaningPolicy) ([]byte, error)
	// CleaningPolicy is what is erased of a server's disks when a claim releases it, unless
	// the server names its own (spec.cleaningPolicy); a claim may narrow it. None: a released
	// server is Available at once.
	CleaningPolicy metalv1alpha1.CleaningPolicy
	// CleanDiscovered sends a server whose discovery finds it never cleaned by metalhub to
	// Cleaning (by its policy) before it is first Available: a box bought used, or handed over
	// by another operator, carries someone's data too.
	CleanDiscovered bool
	// CleaningBMCErase erases an AllDisks cleaning through the BMC (Drive.SecureErase, or a
	// volume's Initialize for drives without it) where it advertises that for every drive of
	// the system, and boots no agent: faster, and it reaches drives the OS never sees, but the
	// proof is the BMC's word (its tasks' outcome), with no block read back.
	CleaningBMCErase bool
	// CleaningTimeout is how long a cleaning round may take from its boot to its report before
	// the server is put in Error (a full overwrite of big spinning disks takes hours).
	CleaningTimeout time.Duration
	// Shards, set, splits the fleet between replicas (internal/shard): each acts on the objects
	// of the shards it holds.
	Shards *shard.Set
	// HardwareLogPoll is how often each server's hardware log (SEL) is read for critical events;
	// 0 turns health reading off. An event from a BMC's subscription brings a read at once.
	HardwareLogPoll time.Duration
	// HardwareFaultPolicy is what a critical event does beyond the condition, event and metric.
	HardwareFaultPolicy health.FaultPolicy
	// HardwareFaultMaintenanceNamespace holds the maintenances the fault policy opens (default:
	// DiscoveryNamespace).
	HardwareFaultMaintenanceNamespace string
	// HardwareEvents, if set, is the event receiver the server controller listens to (tests
	// serve it themselves); Setup otherwise makes one, which the registry's listener serves.
	HardwareEvents *health.EventReceiver
	// ExternalBootProvider leaves ServerBootConfigurations to another boot provider (the IronCore
	// boot-operator consumes the same objects and reports their state itself): a Server then
	// waits for that provider's verdict, and the built-in provider only marks new ones Pending.
	// It is the one place the flag lands; the boot configuration controller reads it from here.
	ExternalBootProvider bool
}

// DefaultConcurrency is the metal controllers' workers. A pass waits on its BMC's answers, a
// quarter of a second to two seconds each on real BMCs, a dozen or more of them for a first
// inventory; the per-BMC request cap and the API write slots bound what the workers ask of the
// BMCs and the API server, so idle workers cost nothing and too few leave both waiting.
const DefaultConcurrency = 256

// DefaultBMCPassTimeout is the default BMCPassTimeout: a pass of a dozen requests to a
// chassis manager whose few slots its systems share, each request answered in a second or two.
const DefaultBMCPassTimeout = 2 * time.Minute

// PassTimeout is BMCPassTimeout, or its default when unset.
func (o Options) PassTimeout() time.Duration {
	if o.BMCPassTimeout > 0 {
		return o.BMCPassTimeout
	}
	return DefaultBMCPassTimeout
}

// DefaultOptions are the Server controller's settings for a real fleet.
func DefaultOptions() Options {
	return Options{
		BMCRequestTimeout:   10 * time.Second,
		BMCPassTimeout:      DefaultBMCPassTimeout,
		BMCResetSettle:      intent.DefaultResetSettle,
		Concurrency:         DefaultConcurrency,
		ServerResync:        2 * time.Minute,
		RetryAfter:          15 * time.Second,
		PowerPoll:           2 * time.Second,
		PowerTimeout:        5 * time.Minute,
		DiscoveryNamespace:  "default",
		DiscoveryImage:      "metalprobe:latest",
		DiscoveryTimeout:    30 * time.Minute,
		CleaningPolicy:      metalv1alpha1.CleaningPolicyNone,
		CleaningTimeout:     12 * time.Hour,
		ErrorThreshold:      5,
		HardwareLogPoll:     10 * time.Minute,
		HardwareFaultPolicy: health.FaultPolicyNone,
	}
}

// Package redfish emulates a fleet of Redfish BMCs in one process: each BMC
// has its own listener, one or more systems with deterministic, vendor-shaped
// inventory, sessions and Basic auth, asynchronous power, boot overrides with
// ETags, a run-time fault menu, a recorder of power and boot actions, a
// hook fired when a system PXE-boots, a System Event Log per system (package sel),
// an EventService that delivers its new entries to subscribers (package events), and
// storage whose RAID volumes are made and deleted and whose drives and volumes the BMC
// erases itself (Drive.SecureErase, Volume.Initialize), each erase a task of the
// TaskService that counts, once completed, in System.Erasures and System.Initializations
// (packages inventory and update), and a CertificateService whose GenerateCSR and
// ReplaceCertificate change the certificate the BMC's TLS listener serves (package certs), and
// per chassis deterministic power, temperature and fan readings with failable PSUs and fans, in
// the legacy Power/Thermal and/or the newer PowerSubsystem/ThermalSubsystem/Sensors (package sensors).
//
// How fast the BMCs answer is Options.Latency (LatencyModel, Preset). The default, "fast", is
// the emulator as it always was: answers in a few milliseconds, as many at once as asked. Real
// BMCs answer in 100 ms to 2 s, serve 2 to 4 requests at a time, answer nothing for tens of
// seconds while they reset, and a chassis manager serves 8 to 16 systems through one BMC (vendor
// BMCs as operators of large fleets describe them; metal3's baremetal-operator, as OpenShift
// ships it, is sized for 500 to 1,500 hosts per operator and, by default, 10 BMC operations at
// once at 1,000 hosts). The presets:
//
//	preset   answer time: median, p95 [min, max]   at once   silent after a reset   systems per BMC
//	fast     none                                  no cap    0                      1
//	typical  250 ms, 1 s [100 ms, 2 s]             4         30 s                   8
//	slow     1 s, 3 s [250 ms, 5 s]                2         60 s                   16
//
// Answer times are log-normal (median and p95), clamped to [min, max], each BMC's drawn from its
// own stream of Options.Seed. A request beyond the cap waits in a queue, holding no slot; the
// answer time is spent holding one, as on a BMC with that many sessions or worker threads.
// BMC.Stats counts the waits (Queued, Waited, QueueWait) and the peak served at once.
//
// This package is the one type the rest of the code uses (Emulator, BMC, System and their
// data types) and the routing between services; each Redfish service's state and handlers
// live in a subpackage (accounts, certs, events, sessions, sel, sshconsole, managerattrs, inventory)
// beside the shared pieces (rfhttp, hardware, faults, tlscert, sensors). The subpackages never import
// this one: what they need of a BMC comes through a small interface or a callback.
package redfish

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/hardware"
	"github.com/metalhub/metalhub/internal/emulator/redfish/journal"
	"github.com/metalhub/metalhub/internal/emulator/redfish/managerattrs"
	"github.com/metalhub/metalhub/internal/emulator/redfish/media"
	"github.com/metalhub/metalhub/internal/emulator/redfish/sessions"
	"github.com/metalhub/metalhub/internal/emulator/redfish/update"

	"github.com/go-logr/logr"
	"github.com/metalhub/metalhub/internal/emulator/redfish/accounts"
	"github.com/metalhub/metalhub/internal/emulator/redfish/certs"
	"github.com/metalhub/metalhub/internal/emulator/redfish/events"
	"github.com/metalhub/metalhub/internal/emulator/redfish/sshconsole"
)

// Options configure an Emulator. Zero values get defaults.
type Options struct {
	// BMCs is the number of BMCs (default 1).
	BMCs int
	// SystemsPerBMC is the number of systems behind each BMC (default Latency.SystemsPerBMC,
	// else 1).
	SystemsPerBMC int
	// Latency is how fast and how much at once each BMC answers (Preset; the zero model, the
	// default, answers at once and in parallel). Each BMC draws its answer times from its own
	// stream of Seed.
	Latency LatencyModel
	// Host is the listen address (default 127.0.0.1).
	Host string
	// BasePort > 0 puts BMC i on BasePort+i; 0 picks free ports.
	BasePort int
	// Seed makes inventories deterministic (same seed, same fleet).
	Seed uint64
	// Username and Password are accepted by every BMC (default admin/password).
	Username, Password string
	// PowerDelay is how long a power transition takes (default 3s; set a
	// negative value for instant transitions).
	PowerDelay time.Duration
	// TLS serves HTTPS: each BMC presents its own certificate, read for every new connection:
	// first the self-signed one it makes at start (see CACertPEM), then the one a
	// CertificateService.ReplaceCertificate installed (from the BMC's next reset with
	// Faults.CertificateNeedsReset). Without it the BMCs speak plain HTTP, and their
	// CertificateService manages a certificate no listener serves.
	TLS bool
	// MaxSessions caps open sessions per BMC, like real BMCs (default 16).
	MaxSessions int
	// SessionTimeout expires idle sessions (default 30m).
	SessionTimeout time.Duration
	// InitialPower is the power state systems start in (default Off).
	InitialPower string
	// OnBoot is called (in its own goroutine) when a system finishes powering
	// on while a PXE boot override is set.
	OnBoot func(BootEvent)
	// Logger receives lifecycle messages.
	Logger logr.Logger
	// SSHConsole gives every BMC an SSH serial console, as real BMCs have: it listens on Host
	// at a port the system picks (BMC.SSHAddress) with one host key per emulator
	// (Emulator.SSHHostKey), takes the BMC's credentials, and "console <systemID>" (exec, or
	// typed at its "bmc> " prompt) attaches to a system's console. The systems' and manager's
	// SerialConsole resources advertise it.
	SSHConsole bool
	// EventRootCAs are the CAs trusted for HTTPS event destinations (nil: the system's roots).
	EventRootCAs *x509.CertPool
	// EventInsecureSkipVerify delivers events to HTTPS destinations without verifying their
	// certificates, as many BMCs do. Off unless asked for: a test with its own TLS receiver
	// trusts it through EventRootCAs instead.
	EventInsecureSkipVerify bool
	// EventRetryAttempts is how many times a failed event delivery is retried (default 3;
	// negative for none), EventRetryInterval the pause between tries (default 1s).
	EventRetryAttempts int
	EventRetryInterval time.Duration
}

func (o Options) withDefaults() Options {
	if o.BMCs <= 0 {
		o.BMCs = 1
	}
	if o.SystemsPerBMC <= 0 {
		o.SystemsPerBMC = max(o.Latency.SystemsPerBMC, 1)
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Username == "" {
		o.Username = "admin"
	}
	if o.Password == "" {
		o.Password = "password"
	}
	switch {
	case o.PowerDelay == 0:
		o.PowerDelay = 3 * time.Second
	case o.PowerDelay < 0:
		o.PowerDelay = 0
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = 16
	}
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = 30 * time.Minute
	}
	if o.InitialPower == "" {
		o.InitialPower = PowerOff
	}
	switch {
	case o.EventRetryAttempts == 0:
		o.EventRetryAttempts = 3
	case o.EventRetryAttempts < 0:
		o.EventRetryAttempts = 0
	}
	if o.EventRetryInterval <= 0 {
		o.EventRetryInterval = time.Second
	}
	return o
}

// Power states as Redfish spells them.
const (
	PowerOn          = "On"
	PowerOff         = "Off"
	PowerPoweringOn  = "PoweringOn"
	PowerPoweringOff = "PoweringOff"
)

// Emulator is a running fleet of emulated BMCs.
type Emulator struct {
	opts    Options
	bmcs    []*BMC
	srvMu   sync.Mutex // servers: ListenAt adds to them after Start
	servers []*http.Server
	caPEM   []byte
	closing chan struct{}
	wg      sync.WaitGroup
	hook    atomic.Pointer[func(BootEvent)]
	rec     recorder
	// images maps an image URI to the version it installs (SetImageVersion).
	images  sync.Map
	started bool
	closed  sync.Once

	// ssh serves the BMCs' SSH consoles (Options.SSHConsole; nil when off).
	ssh *sshconsole.Server

	// events is the HTTP client that delivers every BMC's events (events.go).
	events eventClient
}

// New builds the fleet (no listening yet: see Start).
func New(opts Options) (*Emulator, error) {
	opts = opts.withDefaults()
	e := &Emulator{opts: opts, closing: make(chan struct{})}
	if opts.OnBoot != nil {
		e.SetBootHook(opts.OnBoot)
	}
	if opts.SSHConsole {
		srv, err := sshconsole.NewServer(&e.wg)
		if err != nil {
			return nil, fmt.Errorf("generate SSH host key: %w", err)
		}
		e.ssh = srv
	}
	for i := range opts.BMCs {
		b := newBMC(e, i)
		if opts.TLS {
			// Each BMC's own self-signed certificate, made now so that CACertPEM holds them all.
			p, err := b.certs.CurrentPEM()
			if err != nil {
				return nil, fmt.Errorf("BMC %d: %w", i, err)
			}
			e.caPEM = append(e.caPEM, p...)
		}
		e.bmcs = append(e.bmcs, b)
	}
	return e, nil
}

// Start opens one listener per BMC and serves until Close.
func (e *Emulator) Start() error {
	if e.started {
		return errors.New("emulator already started")
	}
	e.started = true
	var listeners, sshListeners []net.Listener
	closeAll := func() {
		for _, l := range append(listeners, sshListeners...) {
			l.Close()
		}
	}
	for i, b := range e.bmcs {
		port := 0
		if e.opts.BasePort > 0 {
			port = e.opts.BasePort + i
		}
		l, err := net.Listen("tcp", net.JoinHostPort(e.opts.Host, strconv.Itoa(port)))
		if err != nil {
			closeAll()
			return fmt.Errorf("listen for BMC %d: %w", i, err)
		}
		if e.ssh != nil {
			sl, err := sshconsole.Listen(e.opts.Host)
			if err != nil {
				l.Close()
				closeAll()
				return fmt.Errorf("BMC %d: %w", i, err)
			}
			sshListeners = append(sshListeners, sl)
		}
		scheme := "http"
		if e.opts.TLS {
			l = tls.NewListener(l, b.tlsConfig())
			scheme = "https"
		}
		b.url = scheme + "://" + l.Addr().String()
		listeners = append(listeners, l)
	}
	for i, l := range listeners {
		e.serve(e.bmcs[i], l)
		if sshListeners != nil {
			e.serveSSH(e.bmcs[i], sshListeners[i])
		}
	}
	e.opts.Logger.V(1).Info("emulator started", "bmcs", len(e.bmcs), "systemsPerBMC", e.opts.SystemsPerBMC)
	return nil
}

// serve answers l's connections with b until the emulator closes.
func (e *Emulator) serve(b *BMC, l net.Listener) {
	srv := &http.Server{
		Handler:           b,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// Dropped and hung connections are part of the fault menu, not news.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	e.srvMu.Lock()
	e.servers = append(e.servers, srv)
	e.srvMu.Unlock()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		_ = srv.Serve(l)
	}()
}

// ListenAt makes b answer at addr (host:port) as well, as BMCs in a data centre all answer on
// one port, each at its own IP: with addr on another loopback IP and another BMC's port, an
// Endpoint edited from that BMC's IP to this one reaches this BMC. The address must be free (the
// other BMC holds the port on its own IP only); the listener closes with the emulator.
func (b *BMC) ListenAt(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen at %s for BMC %d: %w", addr, b.index, err)
	}
	if b.em.ssh != nil && b.SSHAddress() == "" {
		// A BMC first started here gets its console on this host; one that has it keeps it.
		host, _, _ := net.SplitHostPort(addr)
		sl, err := sshconsole.Listen(host)
		if err != nil {
			l.Close()
			return fmt.Errorf("BMC %d: %w", b.index, err)
		}
		b.em.serveSSH(b, sl)
	}
	if b.em.opts.TLS {
		l = tls.NewListener(l, b.tlsConfig())
	}
	b.em.serve(b, l)
	return nil
}

// Start is New followed by Emulator.Start.
func Start(opts Options) (*Emulator, error) {
	e, err := New(opts)
	if err != nil {
		return nil, err
	}
	if err := e.Start(); err != nil {
		return nil, err
	}
	return e, nil
}

// Close stops every BMC, releasing hung requests and pending power timers.
func (e *Emulator) Close() error {
	e.closed.Do(func() {
		close(e.closing)
		e.srvMu.Lock()
		for _, s := range e.servers {
			_ = s.Close()
		}
		e.srvMu.Unlock()
		if e.ssh != nil {
			e.ssh.Close()
		}
		for _, b := range e.bmcs {
			b.ev.Shutdown() // pending deliveries end with the emulator
		}
		e.wg.Wait()
		for _, b := range e.bmcs {
			for _, s := range b.systems {
				s.stopTimer()
			}
		}
	})
	return nil
}

// Shutdown closes the emulator when ctx is done; handy for commands.
func (e *Emulator) Shutdown(ctx context.Context) error {
	<-ctx.Done()
	return e.Close()
}

// BMCs returns every BMC, in index order.
func (e *Emulator) BMCs() []*BMC { return e.bmcs }

// BMC returns BMC i (nil when out of range).
func (e *Emulator) BMC(i int) *BMC {
	if i < 0 || i >= len(e.bmcs) {
		return nil
	}
	return e.bmcs[i]
}

// CACertPEM is what to trust when Options.TLS is set: every BMC's self-signed certificate as it
// started, one PEM bundle (a certificate ReplaceCertificate installed is its issuer's to trust).
func (e *Emulator) CACertPEM() []byte { return e.caPEM }

// SetBootHook replaces the boot hook (nil removes it).
func (e *Emulator) SetBootHook(fn func(BootEvent)) {
	if fn == nil {
		e.hook.Store(nil)
		return
	}
	e.hook.Store(&fn)
}

// Records returns every recorded power action and boot override change.
func (e *Emulator) Records() []Record { return e.rec.list() }

// ClearRecords forgets the recorded actions.
func (e *Emulator) ClearRecords() { e.rec.clear() }

// Options returns the effective options.
func (e *Emulator) Options() Options { return e.opts }

// BMC is one emulated BMC with its systems.
type BMC struct {
	em        *Emulator
	index     int
	url       string
	profile   *hardware.Profile
	managerID string
	mgrModel  string
	mgrFW     string
	mgrMAC    string
	mgrUUID   string
	systems   []*System
	byID      map[string]*System

	faults atomic.Pointer[Faults]
	// answeredBy is the BMC that answers at this one's address instead (AnswerAs).
	answeredBy atomic.Pointer[BMC]
	creds      atomic.Pointer[[2]string]
	// sshAddr is the SSH console's host:port (Options.SSHConsole).
	sshAddr atomic.Pointer[string]
	accts   accounts.Service
	// certs is the CertificateService and the HTTPS certificate (package certs).
	certs      certs.Store
	upd        update.Service
	powerDelay atomic.Int64 // nanoseconds
	// lastReset is when the manager last came out of a reset (unix nanoseconds); reportsReset
	// says whether its Manager resource shows it (LastResetTime), as newer firmware does.
	lastReset    atomic.Int64
	reportsReset atomic.Bool
	// reportsSystemReset says whether its ComputerSystem resources show their LastResetTime.
	reportsSystemReset atomic.Bool

	// sess holds the BMC's sessions and their counters (package sessions).
	sess *sessions.Store

	// inFlight counts the requests being served (holding a slot, with Latency.Concurrency).
	requests, inFlight, maxInFlight atomic.Int64
	// latency draws the answer times; slots caps the requests served at once (nil: no cap).
	latency *Sampler
	slots   chan struct{}
	// queued counts the requests waiting for a slot; waited those that had to, queueWait and
	// maxQueueWait their waits (nanoseconds).
	queued, maxQueued, waited, queueWait, maxQueueWait atomic.Int64
	// silentUntil: after a manager reset the BMC answers nothing until then (unix nanoseconds).
	silentUntil atomic.Int64
	tasks       atomic.Int64
	// mattrs are the manager's own settings (package managerattrs).
	mattrs managerattrs.Store
	// ev is the EventService: subscriptions and their deliveries (package events).
	ev events.Service
	// logPageSize pages the SEL Entries collections (SetLogPageSize; 0: no paging).
	logPageSize atomic.Int64
	// journal keeps every request's span while on (package journal).
	journal journal.Journal
}

func newBMC(e *Emulator, i int) *BMC {
	r := rand.New(rand.NewPCG(e.opts.Seed, uint64(i)+1))
	p := &hardware.Profiles[r.IntN(len(hardware.Profiles))]
	b := &BMC{
		em: e, index: i, profile: p, managerID: p.ManagerID, mgrModel: p.ManagerModel,
		mgrFW:   p.Firmware[r.IntN(len(p.Firmware))],
		mgrMAC:  hardware.MAC(p.MACOUI, 0x800000+i),
		mgrUUID: hardware.UUID(r, 0x40000000+i),
		byID:    map[string]*System{},
		sess:    sessions.NewStore(e.opts.MaxSessions, e.opts.SessionTimeout),
		latency: e.opts.Latency.NewSampler(e.opts.Seed, latencyStream(i)),
	}
	if n := e.opts.Latency.Concurrency; n > 0 {
		b.slots = make(chan struct{}, n)
	}
	b.creds.Store(&[2]string{e.opts.Username, e.opts.Password})
	b.powerDelay.Store(int64(e.opts.PowerDelay))
	b.lastReset.Store(time.Now().Truncate(time.Second).UnixNano())
	b.reportsReset.Store(p.LastReset)
	b.reportsSystemReset.Store(p.LastReset)
	b.faults.Store(&Faults{})
	b.ev.Init(i, eventHost{b})
	b.accts.Init(accountHost{b})
	b.certs.Init(certHost{b}, v1+"/Managers/"+b.managerID, e.opts.Host)
	b.upd.Init(updateHost{b})
	style := hardware.IDStyle(r.IntN(3))
	for k := range e.opts.SystemsPerBMC {
		idx := i*e.opts.SystemsPerBMC + k
		hw := hardware.Generate(p, r, idx, k, e.opts.SystemsPerBMC, style)
		s := &System{bmc: b, hw: hw, power: e.opts.InitialPower, etag: 1, lastReset: b.lastReset.Load()}
		s.sens.Index, s.sens.CPUs = idx, len(hw.CPUs)
		for _, d := range b.profile.Media {
			s.media = append(s.media, media.Device{MediaDevice: d})
		}
		for _, o := range bootOptions {
			s.bootOrder = append(s.bootOrder, o.ref)
		}
		s.boot = BootOverride{Enabled: "Disabled", Target: "None"}
		s.sel.Seed(time.Now())
		if p.UEFI {
			s.boot.Mode = "UEFI"
		}
		b.systems = append(b.systems, s)
		b.byID[hw.ID] = s
	}
	return b
}

// AnswerAs hands b's address to another BMC: from now on o answers every request sent to b's
// address (its systems, its sessions, its records), as after a DHCP lease or IPAM swap, a
// replaced BMC or an edited address. nil gives the address back to b.
func (b *BMC) AnswerAs(o *BMC) { b.answeredBy.Store(o) }

// ReportsLastResetTime says whether the Manager resource shows LastResetTime.
func (b *BMC) ReportsLastResetTime() bool { return b.reportsReset.Load() }

// SetReportsLastResetTime makes the Manager resource show LastResetTime or not (older firmware).
func (b *BMC) SetReportsLastResetTime(on bool) { b.reportsReset.Store(on) }

// LastResetTime is when the manager last came out of a reset (shown or not).
func (b *BMC) LastResetTime() time.Time { return time.Unix(0, b.lastReset.Load()) }

// ReportsSystemLastResetTime says whether the ComputerSystem resources show LastResetTime.
func (b *BMC) ReportsSystemLastResetTime() bool { return b.reportsSystemReset.Load() }

// SetReportsSystemLastResetTime makes the ComputerSystem resources show LastResetTime or not
// (firmware that does not say when the host last reset).
func (b *BMC) SetReportsSystemLastResetTime(on bool) { b.reportsSystemReset.Store(on) }

// Index is the BMC's position in the fleet.
func (b *BMC) Index() int { return b.index }

// URL is the BMC base URL, e.g. http://127.0.0.1:8000 (empty before Start).
func (b *BMC) URL() string { return b.url }

// Credentials returns the accepted username and password.
func (b *BMC) Credentials() (string, string) {
	c := b.creds.Load()
	return c[0], c[1]
}

// SetCredentials changes the accepted credentials (existing sessions stay).
func (b *BMC) SetCredentials(username, password string) {
	b.creds.Store(&[2]string{username, password})
}

// Vendor is the profile name shaping this BMC ("dell", "hpe", ...).
func (b *BMC) Vendor() string { return b.profile.Name }

// HTTPBoot reports whether the BMC advertises UEFI HTTP boot now (its profile, less NoHTTPBoot).
func (b *BMC) HTTPBoot() bool {
	f := b.Faults()
	return b.httpBoot(&f)
}

// SystemIDs lists the Redfish Ids of this BMC's systems.
func (b *BMC) SystemIDs() []string {
	out := make([]string, len(b.systems))
	for i, s := range b.systems {
		out[i] = s.hw.ID
	}
	return out
}

// System returns a system by Redfish Id (nil when unknown).
func (b *BMC) System(id string) *System { return b.byID[id] }

// Systems returns every system.
func (b *BMC) Systems() []*System { return b.systems }

// SetPowerDelay changes how long this BMC's power transitions take from the
// next action on (big machines take minutes; tests may want forever).
func (b *BMC) SetPowerDelay(d time.Duration) { b.powerDelay.Store(int64(max(d, 0))) }

// Faults returns the active faults.
func (b *BMC) Faults() Faults { return *b.faults.Load() }

// SetFaults replaces the active faults; they apply to the next request.
func (b *BMC) SetFaults(f Faults) { b.faults.Store(&f) }

// ClearFaults removes every fault.
func (b *BMC) ClearFaults() { b.faults.Store(&Faults{}) }

// Stats are request and session counters for one BMC.
type Stats struct {
	Requests int64 `json:"requests"`
	// InFlight and MaxInFlight count the requests being served (at most
	// Latency.Concurrency); Queued and MaxQueued those waiting for one of those slots.
	InFlight    int64 `json:"inFlight"`
	MaxInFlight int64 `json:"maxInFlight"`
	Queued      int64 `json:"queued"`
	MaxQueued   int64 `json:"maxQueued"`
	// Waited counts the requests that found every slot taken; QueueWait is the sum of their
	// waits, MaxQueueWait the longest (nanoseconds in JSON).
	Waited          int64         `json:"waited"`
	QueueWait       time.Duration `json:"queueWait"`
	MaxQueueWait    time.Duration `json:"maxQueueWait"`
	SessionsCreated int64         `json:"sessionsCreated"`
	SessionsDeleted int64         `json:"sessionsDeleted"`
	ActiveSessions  int           `json:"activeSessions"`
	Unauthorized    int64         `json:"unauthorized"`
}

// Stats returns the counters.
func (b *BMC) Stats() Stats {
	active := b.sess.Active()
	return Stats{
		Requests: b.requests.Load(), InFlight: b.inFlight.Load(), MaxInFlight: b.maxInFlight.Load(),
		Queued: b.queued.Load(), MaxQueued: b.maxQueued.Load(), Waited: b.waited.Load(),
		QueueWait: time.Duration(b.queueWait.Load()), MaxQueueWait: time.Duration(b.maxQueueWait.Load()),
		SessionsCreated: b.sess.Created.Load(), SessionsDeleted: b.sess.Deleted.Load(),
		ActiveSessions: active, Unauthorized: b.sess.Unauthorized.Load(),
	}
}

// ResetStats zeroes the counters (not the open sessions).
func (b *BMC) ResetStats() {
	b.requests.Store(0)
	b.waited.Store(0)
	b.queueWait.Store(0)
	b.ResetMaxima()
	b.sess.Created.Store(0)
	b.sess.Deleted.Store(0)
	b.sess.Unauthorized.Store(0)
}

// ResetMaxima starts the maxima (in flight, queued, queue wait) over from now, leaving the
// other counters: a benchmark's phase measures its own peaks.
func (b *BMC) ResetMaxima() {
	b.maxInFlight.Store(b.inFlight.Load())
	b.maxQueued.Store(b.queued.Load())
	b.maxQueueWait.Store(0)
}

// ExpireSessions deletes every open session, as a BMC reboot or session
// timeout would; clients must log in again. It returns how many were open.
func (b *BMC) ExpireSessions() int { return b.sess.Expire() }

package campaign

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/metalhub/metalhub/internal/testenv"
)

// Manager timing: short enough that a schedule converges in seconds, the same discipline as in
// production (every value is a flag users set too).
const (
	bmcRequestTimeout = 2 * time.Second
	// bmcPassTimeout bounds one pass's BMC calls together (--bmc-pass-timeout).
	bmcPassTimeout = 2 * bmcRequestTimeout
	// passBound is the longest reconcile pass the campaign accepts: the pass timeout plus a
	// margin for API writes; it must be a bucket of controller_runtime_reconcile_time_seconds.
	passBound      = "7"
	passBoundValue = 7 * time.Second
	leaseDuration  = 4 * time.Second
	leaseID        = "metalhub-campaign"
	// shardSet names the shard Leases of sharded seeds (metalhub-campaign-shards-0 and -1).
	shardSet = "metalhub-campaign-shards"
	shards   = 2
	// cleaningPolicy is what every release is cleaned by (--cleaning-policy): the fleet's, as
	// neither Servers nor the campaign's claims set one of their own.
	cleaningPolicy = "AllDisks"
	// cleaningTimeout bounds a cleaning round from its boot to its report. The agent's work on
	// the emulated sparse disks takes well under a second; the boot behind it may wait out a
	// stuck power transition (20 s), a hanging BMC and a restore's stopped registries, none of
	// which may fail a cleaning: a round that times out leaves its server in Error until a
	// retry, which the campaign's convergence would report.
	cleaningTimeout = 60 * time.Second
)

// features are the optional flags a manager binary has: the campaign also replays seeds against
// older builds (METALHUB_CAMPAIGN_BINARY), which lack them.
type features struct{ addressFile, retryAfter, firmware, shards, cleaning bool }

var binFeatures sync.Map // binary path -> features

func featuresOf(bin string) features {
	if f, ok := binFeatures.Load(bin); ok {
		return f.(features)
	}
	out, _ := exec.Command(bin, "manager", "-h").CombinedOutput() // -h exits non-zero; the text is what counts
	f := features{addressFile: bytes.Contains(out, []byte("-address-file")), retryAfter: bytes.Contains(out, []byte("-retry-after")),
		firmware: bytes.Contains(out, []byte("-firmware-poll")), shards: bytes.Contains(out, []byte("-shard-lease-name")),
		cleaning: bytes.Contains(out, []byte("-cleaning-policy"))}
	binFeatures.Store(bin, f)
	return f
}

// managerArgs are the flags of every manager process; ports are per slot. With --address-file
// the metrics endpoint listens on port 0 and the file says where; the registry's port must be
// known before start, for --registry-url (see /tmp/campaign-needs.md). A sharded replica (link
// set) reaches the API server through its link and shares the fleet instead of electing a leader.
func managerArgs(f features, registryPort, metricsPort int, addressFile string, link *testenv.APILink, kubeconfig string) []string {
	metrics := fmt.Sprintf("127.0.0.1:%d", metricsPort)
	var extra []string
	if f.addressFile {
		metrics = "127.0.0.1:0"
		extra = append(extra, "--address-file", addressFile)
	}
	if f.firmware {
		// Firmware tasks read often and versions given a while to show, as for power.
		extra = append(extra, "--firmware-poll", "200ms", "--firmware-verify-timeout", "20s")
	}
	if f.retryAfter {
		// A failed pass looks again after 2 s instead of 15 s: faults heal within the schedule.
		extra = append(extra, "--retry-after", "2s")
	}
	if f.cleaning {
		// Every release is cleaned before the server is Available again (no-claim-without-clean).
		extra = append(extra, "--cleaning-policy", cleaningPolicy, "--cleaning-timeout", cleaningTimeout.String())
	}
	election := []string{"--leader-elect", "--leader-election-namespace", "default", "--leader-election-id", leaseID}
	if link != nil {
		election = []string{"--shards", strconv.Itoa(shards), "--shard-namespace", "default", "--shard-lease-name", shardSet}
	}
	args := append([]string{
		"--kubeconfig", kubeconfig, "--controllers", "metal",
		"--metrics-bind-address", metrics, "--health-probe-bind-address", "0"}, election...)
	return append(append(args,
		"--leader-election-lease-duration", leaseDuration.String(), "--leader-election-renew-deadline", "3s",
		"--leader-election-retry-period", "500ms",
		"--registry-bind-address", fmt.Sprintf("127.0.0.1:%d", registryPort),
		"--registry-url", fmt.Sprintf("http://127.0.0.1:%d", registryPort),
		"--discovery-namespace", "default",
		"--power-poll", "100ms", "--power-timeout", "5s", "--bmc-request-timeout", bmcRequestTimeout.String(), "--bmc-pass-timeout", bmcPassTimeout.String(),
		"--server-resync", "3s", "--bmc-resync", "3s", "--claim-resync", "3s", "--discovery-timeout", "15s",
		"--metal-concurrency", "4", "--graceful-shutdown-timeout", "1s",
	), extra...)
}

// slot is one of the two manager replicas. A replica that exits without being told to (lost
// leadership, a crash) is restarted, as a Deployment would; a crash is reported.
type slot struct {
	idx int
	bin string
	dir string
	// link is the replica's way to the API server in a sharded seed (nil: it dials directly),
	// kubeconfig the file that says so.
	link       *testenv.APILink
	kubeconfig string
	onCrash    func(string)
	logf       func(string, ...any)

	mu           sync.Mutex
	cmd          *exec.Cmd
	exited       chan struct{}
	incarnation  int
	logPath      string
	up           bool // the harness wants it running
	expectExit   bool // the harness is stopping it
	registryPort int
	metricsPort  int
	metricsAddr  string                // of the current incarnation, from its address file (or the picked port)
	samples      map[int]metricsSample // last scrape per incarnation
}

func (s *slot) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startLocked()
}

func (s *slot) startLocked() {
	if s.registryPort == 0 {
		// The manager reports neither port when given :0 (see /tmp/campaign-needs.md): pick
		// free ones and keep them across restarts, as a Service would.
		if err := s.pickPorts(); err != nil {
			s.logf("manager-%d: %v", s.idx, err)
			return
		}
	}
	s.incarnation++
	s.logPath = filepath.Join(s.dir, fmt.Sprintf("manager-%d.%d.log", s.idx, s.incarnation))
	log, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		s.logf("manager-%d: %v", s.idx, err)
		return
	}
	s.metricsAddr = ""
	kubeconfig := env.Kubeconfig
	if s.link != nil {
		kubeconfig = s.kubeconfig
	}
	cmd := exec.Command(s.bin, managerArgs(featuresOf(s.bin), s.registryPort, s.metricsPort, s.logPath+".addresses", s.link, kubeconfig)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		s.logf("manager-%d: starting: %v", s.idx, err)
		return
	}
	exited := make(chan struct{})
	s.cmd, s.exited, s.up, s.expectExit = cmd, exited, true, false
	inc, path := s.incarnation, s.logPath
	go func() {
		err := cmd.Wait()
		log.Close()
		close(exited)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.expectExit || !s.up || s.incarnation != inc {
			return
		}
		tail := logTail(path, 30)
		if strings.Contains(tail, "panic:") || strings.Contains(tail, "fatal error:") {
			s.onCrash(fmt.Sprintf("manager-%d.%d crashed (%v):\n%s", s.idx, inc, err, tail))
		} else {
			s.logf("manager-%d.%d exited on its own (%v); restarting it", s.idx, inc, err)
		}
		if strings.Contains(tail, "address already in use") {
			s.registryPort = 0 // someone took a port between our pick and the listen: pick again
		}
		s.startLocked()
	}()
}

// pickPorts picks a registry and a metrics port that are free right now (testenv.FreePort
// without a testing.TB: it runs on the supervisor's goroutine too).
func (s *slot) pickPorts() error {
	var ports [2]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("picking a port: %w", err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	s.registryPort, s.metricsPort = ports[0], ports[1]
	return nil
}

// registry is the address of the replica's registry while it runs ("" while it is down).
func (s *slot) registry() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.up || s.registryPort == 0 {
		return ""
	}
	return fmt.Sprintf("127.0.0.1:%d", s.registryPort)
}

// stop ends the replica with sig and waits for it; it stays down until start.
func (s *slot) stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.expectExit, s.up = true, false
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// leads reports whether the replica's current incarnation runs the controllers.
func (s *slot) leads() bool {
	s.mu.Lock()
	up, path := s.up, s.logPath
	s.mu.Unlock()
	if !up {
		return false
	}
	b, err := os.ReadFile(path)
	return err == nil && bytes.Contains(b, []byte("Starting workers"))
}

var identityRE = regexp.MustCompile(`"msg":"sharding the fleet".*"identity":"([^"]+)"`)

// identity is the shard identity of the replica's current incarnation ("" before it logged it,
// or without shards).
func (s *slot) identity() string {
	s.mu.Lock()
	up, path := s.up, s.logPath
	s.mu.Unlock()
	if !up {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if m := identityRE.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// logTail returns the last n lines of a file.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// metricsSample is one scrape: per controller, passes in total and passes longer than passBound,
// and reconcile panics.
type metricsSample struct {
	total, over, panics map[string]float64
}

func (s *slot) scrape(ctx context.Context, hc *http.Client) {
	s.mu.Lock()
	up, inc, addr, path, port := s.up, s.incarnation, s.metricsAddr, s.logPath, s.metricsPort
	s.mu.Unlock()
	if !up {
		return
	}
	if addr == "" {
		addr = fmt.Sprintf("127.0.0.1:%d", port)
		if featuresOf(s.bin).addressFile {
			var a struct {
				Metrics string `json:"metrics"`
			}
			b, err := os.ReadFile(path + ".addresses")
			if err != nil || json.Unmarshal(b, &a) != nil || a.Metrics == "" {
				return // not bound yet
			}
			addr = a.Metrics
		}
		s.mu.Lock()
		if s.incarnation == inc {
			s.metricsAddr = addr
		}
		s.mu.Unlock()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return
	}
	resp, err := hc.Do(req)
	if err != nil {
		return // starting, stopping, or killed: the last sample of that incarnation stands
	}
	defer resp.Body.Close()
	sample, err := parseMetrics(resp.Body)
	if err != nil {
		return
	}
	s.mu.Lock()
	if s.samples == nil {
		s.samples = map[int]metricsSample{}
	}
	s.samples[inc] = sample
	s.mu.Unlock()
}

// parseMetrics reads the reconcile-time histogram and the panic counter from the Prometheus
// text format.
func parseMetrics(r io.Reader) (metricsSample, error) {
	m := metricsSample{total: map[string]float64{}, over: map[string]float64{}, panics: map[string]float64{}}
	within := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		name, labels, value, ok := metricLine(line)
		if !ok {
			continue
		}
		switch name {
		case "controller_runtime_reconcile_time_seconds_bucket":
			if labels["le"] == passBound {
				within[labels["controller"]] = value
			}
		case "controller_runtime_reconcile_time_seconds_count":
			m.total[labels["controller"]] = value
		case "controller_runtime_reconcile_panics_total":
			m.panics[labels["controller"]] = value
		}
	}
	for c, total := range m.total {
		m.over[c] = total - within[c]
	}
	return m, sc.Err()
}

// metricLine splits `name{a="b",c="d"} 12` into its parts.
func metricLine(line string) (string, map[string]string, float64, bool) {
	if line == "" || line[0] == '#' {
		return "", nil, 0, false
	}
	open, closing := strings.IndexByte(line, '{'), strings.LastIndexByte(line, '}')
	if open < 0 || closing < open {
		return "", nil, 0, false
	}
	labels := map[string]string{}
	for _, kv := range strings.Split(line[open+1:closing], ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			labels[k] = strings.Trim(v, `"`)
		}
	}
	fields := strings.Fields(line[closing+1:])
	if len(fields) == 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", nil, 0, false
	}
	return line[:open], labels, v, true
}

// passTotals sums the last sample of every incarnation of every slot.
func passTotals(slots []*slot) (total, over, panics map[string]float64) {
	total, over, panics = map[string]float64{}, map[string]float64{}, map[string]float64{}
	for _, s := range slots {
		s.mu.Lock()
		for _, m := range s.samples {
			for c, v := range m.total {
				total[c] += v
			}
			for c, v := range m.over {
				over[c] += v
			}
			for c, v := range m.panics {
				panics[c] += v
			}
		}
		s.mu.Unlock()
	}
	return total, over, panics
}

// Package dashboards checks the Grafana dashboards in charts/metalhub/dashboards against what the
// operator exports: the telemetry collector reads an emulated fleet (one power supply failed,
// one fan stopped, memory critical on one server), its scrape becomes promtool's input series,
// and every panel's query must return data against it (absent(query) must be empty). promtool
// is the pinned one (hack/tools/build.sh), or $PROMTOOL.
package dashboards

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/telemetry"
	"github.com/metalhub/metalhub/internal/testenv"
)

var root = testenv.RepoRoot()

func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	cmd := exec.Command(filepath.Join(root, "hack", "tools", "build.sh"), "promtool")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("building promtool: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// scrape runs one telemetry round over an emulated fleet and returns its series as promtool
// input ("name{labels}" to value).
func scrape(t *testing.T) map[string]float64 {
	t.Helper()
	em, err := redfish.Start(redfish.Options{BMCs: 6, PowerDelay: -1, InitialPower: redfish.PowerOn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = em.Close() })
	objs := []client.Object{&metalv1alpha1.BMCSecret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		Data:       map[string][]byte{metalv1alpha1.BMCSecretUsernameKey: []byte("admin"), metalv1alpha1.BMCSecretPasswordKey: []byte("password")},
	}}
	for _, b := range em.BMCs() {
		u, _ := url.Parse(b.URL())
		host, port, _ := net.SplitHostPort(u.Host)
		p, _ := strconv.Atoi(port)
		s := b.Systems()[0]
		objs = append(objs, &metalv1alpha1.Server{
			ObjectMeta: metav1.ObjectMeta{Name: "server-" + strconv.Itoa(b.Index())},
			Spec: metalv1alpha1.ServerSpec{
				SystemUUID: s.UUID(), SystemURI: "/redfish/v1/Systems/" + s.ID(),
				BMC: &metalv1alpha1.BMCAccess{
					Protocol: metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfishLocal, Port: int32(p)},
					Address:  host, BMCSecretRef: corev1.LocalObjectReference{Name: "creds"},
				},
			},
		})
	}
	sick := em.BMC(0).Systems()[0]
	if err := sick.SetSensorFaults(redfish.SensorFaults{FailedPSUs: []string{"PSU2"}, StoppedFans: []string{"Fan3"}, MemoryHealth: "Critical"}); err != nil {
		t.Fatal(err)
	}
	pool := bmc.NewPool(bmc.Options{RequestTimeout: 5 * time.Second})
	t.Cleanup(pool.Close)
	m := telemetry.NewMetrics(0)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	(&telemetry.Collector{Client: metaltest.FakeClient(objs...), Pool: pool, Metrics: m, Interval: time.Minute}).Round(context.Background())

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	mfs = append(mfs, certificateScrape(t)...)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			var ls []string
			for _, l := range mt.GetLabel() {
				ls = append(ls, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			v := mt.GetGauge().GetValue()
			if mt.GetCounter() != nil {
				v = mt.GetCounter().GetValue()
			}
			out[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out
}

type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

var (
	metricName = regexp.MustCompile(`metalhub_[a-z_]+`)
	// Grafana's variables, as a query would read them.
	variables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "${__interval}", "1m", "$__range", "1h")
)

func TestDashboardQueriesReturnData(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "charts", "metalhub", "dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	series := scrape(t)
	have := map[string]bool{}
	var input []map[string]string
	for s, v := range series {
		have[s[:strings.Index(s, "{")]] = true
		// Constant over the test's window: rate() sees two samples, gauges a value.
		input = append(input, map[string]string{"series": s, "values": strconv.FormatFloat(v, 'g', -1, 64) + "+0x20"})
	}
	sort.Slice(input, func(i, j int) bool { return input[i]["series"] < input[j]["series"] })

	type exprTest struct {
		Expr       string `json:"expr"`
		EvalTime   string `json:"eval_time"`
		ExpSamples []any  `json:"exp_samples"`
	}
	var tests []exprTest
	checked := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				expr := variables.Replace(tg.Expr)
				for _, name := range metricName.FindAllString(expr, -1) {
					if !have[name] {
						t.Errorf("%s / %s: %s is not in the scrape", d.Title, p.Title, name)
					}
				}
				checked++
				// absent() of a query that returns data is empty: the expected samples.
				tests = append(tests, exprTest{Expr: "absent(" + expr + ")", EvalTime: "10m", ExpSamples: []any{}})
			}
		}
	}
	if checked == 0 {
		t.Fatal("no dashboard query was checked")
	}
	// JSON is YAML: promtool reads it as it is.
	spec, err := json.MarshalIndent(map[string]any{
		"rule_files":          []string{},
		"evaluation_interval": "1m",
		"tests": []any{map[string]any{
			"interval": "1m", "input_series": input, "promql_expr_test": tests,
		}},
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "dashboards_test.yaml")
	if err := os.WriteFile(file, spec, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool(t), "test", "rules", file)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("a dashboard query returns no data against the collector's scrape: %v\n%s", err, out.String())
	}
	t.Logf("%d queries return data against %d series", checked, len(series))
}

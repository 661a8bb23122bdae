// Package alerts unit-tests the Prometheus alert rules in config/prometheus with promtool (built
// from its pinned module by hack/tools/build.sh), and checks that every metalhub_* metric they
// read is one the operator exports.
package alerts

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/metalhub/metalhub/internal/testenv"
)

var root = testenv.RepoRoot()

// promtool is $PROMTOOL when set (a promtool built elsewhere), else the pinned one built into bin/.
var promtool = sync.OnceValues(func() (string, error) {
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p, nil
	}
	cmd := exec.Command(filepath.Join(root, "hack", "tools", "build.sh"), "promtool")
	cmd.Stderr = os.Stderr // the first build takes a few minutes and prints progress
	out, err := cmd.Output()
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
})

func run(t *testing.T, args ...string) {
	t.Helper()
	bin, err := promtool()
	if err != nil {
		t.Fatalf("building promtool: %v", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Join(root, "config", "prometheus")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out.String())
}

func TestRulesValid(t *testing.T) { run(t, "check", "rules", "alerts.yaml") }

func TestRulesUnitTests(t *testing.T) { run(t, "test", "rules", "alerts_test.yaml") }

// Every metalhub_* metric the rules read is one the operator's code defines (a metric name in
// a Go string literal under internal/): a renamed metric cannot silently disarm an alert. The
// values themselves are checked against a running operator in test/deploy (TestLeastPrivilege).
func TestRulesReadExportedMetrics(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join(root, "config", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	literal := regexp.MustCompile(`"(metalhub_[a-z_]+)"`)
	err = filepath.WalkDir(filepath.Join(root, "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range literal.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, m := range regexp.MustCompile(`metalhub_[a-z_]+`).FindAllString(string(rules), -1) {
		used[strings.TrimSuffix(m, "_bucket")] = true
	}
	if len(used) < 8 {
		t.Fatalf("the rules read only %v", used)
	}
	for name := range used {
		if !defined[name] {
			t.Errorf("alerts.yaml reads %s, which no metric of the operator is named", name)
		}
	}
}

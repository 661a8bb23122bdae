// Package campaign is the seeded fault campaign (issue 14): a schedule drawn from a seed
// interleaves user actions, control-plane faults and BMC faults over a small emulated fleet run
// by the manager as its own process, while the safety invariants of docs/safety.md are checked
// continuously from the emulator's recorder and the API server.
//
//	go test ./test/campaign/                    a fixed set of seeds (what make test runs)
//	make campaign SEEDS=200                     seeds 1..200, then the summary
//	make campaign SEED=17                       replays seed 17
package campaign

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/metalhub/metalhub/internal/testenv"
)

var env *testenv.Env

// TestMain starts one control plane for every schedule of the package, except under -short,
// where the campaign is skipped and a control plane would only cost start-up time.
func TestMain(m *testing.M) {
	flag.Parse()
	// The harness's own clients log nothing worth reading; without a logger controller-runtime
	// prints a warning with a stack trace into the campaign's output.
	ctrl.SetLogger(logr.Discard())
	if testing.Short() {
		os.Exit(m.Run())
	}
	os.Exit(testenv.Main(m, &env, func(m *testing.M) int {
		code := m.Run()
		if te := targetEnv.Load(); te != nil {
			_ = te.Stop()
		}
		if dir := binDir.Load(); dir != nil {
			_ = os.RemoveAll(*dir)
		}
		return code
	}))
}

// binDir is where managerBinary built the binary, removed when the package's tests end.
var binDir atomic.Pointer[string]

// managerBinary compiles cmd/metalhub once per test binary: the campaign runs the real
// executable, so a SIGKILL is a real crash and a restart a real cold start.
// METALHUB_CAMPAIGN_BINARY names a binary to use instead (a build of another commit, to replay a
// seed against it).
var managerBinary = sync.OnceValues(func() (string, error) {
	if bin := os.Getenv("METALHUB_CAMPAIGN_BINARY"); bin != "" {
		return bin, nil
	}
	dir, err := os.MkdirTemp("", "metalhub-campaign-bin-")
	if err != nil {
		return "", fmt.Errorf("creating a directory for the binary: %w", err)
	}
	binDir.Store(&dir)
	bin := filepath.Join(dir, "metalhub")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/metalhub")
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/metalhub: %w\n%s", err, out)
	}
	return bin, nil
})

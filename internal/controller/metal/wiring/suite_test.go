package wiring

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/eventsink"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// One control plane and one manager running only this controller for the whole package: the
// tests write Servers and their discovered NICs themselves, as discovery would. The claims a
// miswired server is kept from are tested with the whole family in package metal.
var (
	env *testenv.Env
	// writes counts the manager's writes: every test checks "one write per object per pass".
	writes = &testenv.WriteCounter{}
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env, runSuite)) }

func runSuite(m *testing.M) int {
	mgr, err := suite.StartManager(env, ctrl.Options{NewClient: writes.NewClient}, func(ctx context.Context, mgr ctrl.Manager) error {
		if err := index.SetupWiring(ctx, mgr.GetFieldIndexer()); err != nil {
			return err
		}
		ev, err := eventsink.New(mgr, eventsink.Options{})
		if err != nil {
			return err
		}
		return (&Reconciler{Client: mgr.GetClient(), Recorder: ev.Recorder("serverwiring-controller"), Concurrency: 4}).SetupWithManager(mgr)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		return 1
	}
	code := m.Run()
	mgr.Stop()
	return code
}

func ctx() context.Context { return context.Background() }

const wait = 10 * time.Second

func checkNoDoubleWrites(t *testing.T) {
	t.Helper()
	if v := writes.Violations(); len(v) > 0 {
		t.Fatalf("passes that wrote an object twice:\n%s", strings.Join(v, "\n"))
	}
}

package server

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// The single-pass tests run one step of the controller on a fake client (metaltest) against
// boxes of a small emulated fleet of their own; the envtests of the assembled controllers are
// in package metal.
var (
	fleet    *suite.Fleet
	testOpts Options
)

func TestMain(m *testing.M) {
	var err error
	if fleet, err = suite.StartFleet(nil, suite.FleetOptions{BMCs: 120, PowerDelay: 300 * time.Millisecond}); err != nil {
		fmt.Fprintln(os.Stderr, "emulator:", err)
		os.Exit(1)
	}
	testOpts = DefaultOptions()
	testOpts.BMCRequestTimeout = 2 * time.Second
	testOpts.PowerPoll = 100 * time.Millisecond
	testOpts.RetryAfter = 500 * time.Millisecond
	code := m.Run()
	fleet.Close()
	os.Exit(code)
}

func ctx() context.Context { return context.Background() }

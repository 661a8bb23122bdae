package metal

import (
	"flag"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/controller/metal/server"
)

// The boot provider's flag lands in one field, the one the Server controller reads and Setup
// hands to the boot configuration controller: no second copy that a caller could set and see
// ignored.
func TestExternalBootProviderFlagLandsOnce(t *testing.T) {
	t.Parallel()
	o := DefaultOptions()
	fs := flag.NewFlagSet("metalhub", flag.ContinueOnError)
	o.BindFlags(fs)
	if o.ExternalBootProvider {
		t.Fatal("external boot provider on by default")
	}
	if err := fs.Parse([]string{"--external-boot-provider"}); err != nil {
		t.Fatal(err)
	}
	if !o.Options.ExternalBootProvider {
		t.Fatalf("--external-boot-provider did not reach the Server controller's options: %+v", o.Options)
	}
}

// A pass timeout shorter than a request's is refused at start: such a pass could never wait for
// one answer. Unset, the pass timeout is its default, not the request timeout.
func TestPassTimeoutFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args    []string
		pass    time.Duration
		wantErr bool
	}{
		{nil, server.DefaultBMCPassTimeout, false},
		{[]string{"--bmc-pass-timeout", "30s"}, 30 * time.Second, false},
		{[]string{"--bmc-pass-timeout", "10s", "--bmc-request-timeout", "10s"}, 10 * time.Second, false},
		{[]string{"--bmc-pass-timeout", "5s"}, 5 * time.Second, true},
		{[]string{"--bmc-pass-timeout", "0"}, server.DefaultBMCPassTimeout, false},
	} {
		o := DefaultOptions()
		fs := flag.NewFlagSet("metalhub", flag.ContinueOnError)
		o.BindFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := o.PassTimeout(); got != tc.pass {
			t.Errorf("%v: pass timeout %s, want %s", tc.args, got, tc.pass)
		}
		if err := o.validateTimeouts(); (err != nil) != tc.wantErr {
			t.Errorf("%v: validation %v, want an error: %t", tc.args, err, tc.wantErr)
		}
	}
}

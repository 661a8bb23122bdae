package metal

import (
	"flag"
	"testing"
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

package manager

import (
	"strings"
	"testing"
	"time"
)

// With shards, a BMC request must fit in what a shard's lease leaves it: one that could outlast
// the lease would run on while another replica acts on the same BMC.
func TestValidateShardsBoundsTheRequestTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		want    string
	}{
		{"the defaults fit", 0, ""},
		{"a request as long as the lease", 15 * time.Second, "--bmc-request-timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			o.Shards, o.Controllers = 4, Families{FamilyMetal}
			if tc.timeout > 0 {
				o.Metal.BMCRequestTimeout = tc.timeout
			}
			err := o.validateShards()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("validateShards: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("validateShards = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

package metal

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// spec.bootOrder reaches the BMC once and status reports the order the BMC has.
func TestBootOrderApplied(t *testing.T) {
	t.Parallel()
	b := fleet.Take(t)
	name := fleet.RegisterBMC(t, b, "bootorder")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	start := time.Now()
	editServer(t, name, func(s *metalv1alpha1.Server) {
		s.Spec.BootOrder = []metalv1alpha1.BootOrder{{Name: "cd", Priority: 1, Device: "Boot0002"}, {Name: "Hard Disk: Internal RAID", Priority: 2}}
	})
	want := []string{"Boot0002", "Boot0001", "Boot0000", "Boot0003"}
	testenv.Eventually(t, 15*time.Second, "boot order reported", func() (bool, string) {
		s := suite.Server(env, name)
		return slices.Equal(s.Status.BootOrder, want), fmt.Sprint(s.Status.BootOrder)
	})
	if got := systemOf(b).BootOrder(); !slices.Equal(got, want) {
		t.Fatalf("BMC order %v", got)
	}
	annotate(t, name, "touch", "1") // another pass sends nothing
	testenv.Eventually(t, 5*time.Second, "pass seen", func() (bool, string) {
		return suite.Server(env, name).Annotations["touch"] == "1", ""
	})
	var writes int
	for _, r := range suite.Since(fleet.BoxActions(b), start) {
		if r.Action == redfish.ActionBootOrder {
			writes++
		}
	}
	if writes != 1 {
		t.Errorf("%d boot order writes, want 1", writes)
	}
}

package metal

import (
	"fmt"
	"slices"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/readiness"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// A readiness rule taints the servers it selects while they do not meet its conditions (a
// missing one is Unknown) and takes the taint off those that do: for good with BootstrapOnly
// (recorded on the Server), again with Continuous when they regress. Deleting the rule takes
// its taint and records off.
func TestReadinessRuleTaintsUntilConditionsHold(t *testing.T) {
	t.Parallel()
	for _, mode := range []metalv1alpha1.EnforcementMode{metalv1alpha1.EnforcementBootstrapOnly, metalv1alpha1.EnforcementContinuous} {
		t.Run(string(mode), func(t *testing.T) {
			prefix := "ready-" + map[metalv1alpha1.EnforcementMode]string{metalv1alpha1.EnforcementBootstrapOnly: "boot", metalv1alpha1.EnforcementContinuous: "cont"}[mode]
			names, _ := availableServers(t, prefix, 2, func(int) map[string]string { return map[string]string{"pool": prefix} })
			taint := metalv1alpha1.Taint{Key: "burn-in", Value: "pending", Effect: metalv1alpha1.TaintEffectNoBind}
			rule := &metalv1alpha1.ServerReadinessRule{
				ObjectMeta: metav1.ObjectMeta{Name: prefix},
				Spec: metalv1alpha1.ServerReadinessRuleSpec{
					Conditions:      []metalv1alpha1.ConditionRequirement{{Type: "BurnIn", RequiredStatus: metav1.ConditionTrue}},
					EnforcementMode: mode, Taint: &taint,
					ServerSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": prefix}},
				},
			}
			if err := env.Client.Create(ctx(), rule); err != nil {
				t.Fatal(err)
			}
			tainted := func(name string, want bool) {
				t.Helper()
				testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%s tainted=%v", name, want), func() (bool, string) {
					s := suite.Server(env, name)
					return slices.Contains(s.Spec.Taints, taint) == want, fmt.Sprint(s.Spec.Taints)
				})
			}
			burnIn := func(name string, status metav1.ConditionStatus) {
				t.Helper()
				testenv.Eventually(t, 10*time.Second, "condition BurnIn on "+name, func() (bool, string) {
					s := suite.Server(env, name)
					apimeta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: "BurnIn", Status: status, Reason: "Test", Message: "burn-in"})
					err := testenv.WriteStatus(ctx(), env.Client, s)
					return err == nil, fmt.Sprint(err)
				})
			}
			tainted(names[0], true)
			tainted(names[1], true)
			testenv.Eventually(t, 10*time.Second, "rule Ready", func() (bool, string) {
				r := &metalv1alpha1.ServerReadinessRule{}
				if err := env.Client.Get(ctx(), client.ObjectKey{Name: prefix}, r); err != nil {
					return false, err.Error()
				}
				c := apimeta.FindStatusCondition(r.Status.Conditions, metalv1alpha1.ConditionReady)
				return c != nil && c.Status == metav1.ConditionTrue && c.Message == "2 servers selected, 2 tainted burn-in=pending:NoBind", fmt.Sprint(c)
			})

			burnIn(names[0], metav1.ConditionTrue)
			tainted(names[0], false)
			burnIn(names[0], metav1.ConditionFalse)
			if mode == metalv1alpha1.EnforcementContinuous {
				tainted(names[0], true)
			} else {
				// The regression brings the rule's pass; wait for its report to be sure it judged.
				testenv.Eventually(t, 10*time.Second, "record kept", func() (bool, string) {
					s := suite.Server(env, names[0])
					return s.Annotations[readiness.MetAnnotationPrefix+prefix] != "", fmt.Sprint(s.Annotations)
				})
				consistentlyUntainted(t, names[0], taint)
			}

			if err := env.Client.Delete(ctx(), rule); err != nil {
				t.Fatal(err)
			}
			for _, name := range names {
				tainted(name, false)
				testenv.Eventually(t, 10*time.Second, "record gone from "+name, func() (bool, string) {
					_, ok := suite.Server(env, name).Annotations[readiness.MetAnnotationPrefix+prefix]
					return !ok, ""
				})
			}
		})
	}
}

// consistentlyUntainted checks over a few of the rule's passes (each server event brings one)
// that the server stays without the taint.
func consistentlyUntainted(t *testing.T, name string, taint metalv1alpha1.Taint) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if slices.Contains(suite.Server(env, name).Spec.Taints, taint) {
			t.Fatalf("%s tainted again after meeting a BootstrapOnly rule once", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

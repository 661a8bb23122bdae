package wiring

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	readinessv1alpha1 "github.com/metalhub/metalhub/api/readiness/v1alpha1"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// ---- helpers ---------------------------------------------------------------------------------

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	if err := env.Client.Create(ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// server creates a Server and reports nics as its discovery would.
func server(t *testing.T, name string, nics ...metalv1alpha1.NetworkInterface) {
	t.Helper()
	s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: metalv1alpha1.ServerSpec{SystemUUID: "uuid-" + name}}
	if err := env.Client.Create(ctx(), s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), s) })
	if len(nics) > 0 {
		discovered(t, name, nics...)
	}
}

// discovered reports nics on the server, as a discovery round does (the controller writes the
// server's status too: retried on conflict).
func discovered(t *testing.T, name string, nics ...metalv1alpha1.NetworkInterface) {
	t.Helper()
	testenv.Eventually(t, wait, "discovery report on "+name, func() (bool, string) {
		s := suite.Server(env, name)
		if s == nil {
			return false, "no server"
		}
		s.Status.NetworkInterfaces = nics
		err := testenv.WriteStatus(ctx(), env.Client, s)
		return err == nil, fmt.Sprint(err)
	})
}

func wiring(ns, name, serverName string, ifs ...readinessv1alpha1.ExpectedInterface) *readinessv1alpha1.ServerWiring {
	return &readinessv1alpha1.ServerWiring{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: readinessv1alpha1.ServerWiringSpec{ServerRef: corev1.LocalObjectReference{Name: serverName},
			Network: readinessv1alpha1.ExpectedNetwork{Interfaces: ifs}}}
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(ctx(), obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
}

// waitWiring waits until the wiring reports ready and the Ready condition's reason as want
// ("true/Match"), and returns it.
func waitWiring(t *testing.T, ns, name, want string) *readinessv1alpha1.ServerWiring {
	t.Helper()
	var w *readinessv1alpha1.ServerWiring
	testenv.Eventually(t, wait, fmt.Sprintf("wiring %s/%s %s", ns, name, want), func() (bool, string) {
		w = &readinessv1alpha1.ServerWiring{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Namespace: ns, Name: name}, w); err != nil {
			return false, err.Error()
		}
		got := fmt.Sprint(w.Status.Ready)
		if c := apimeta.FindStatusCondition(w.Status.Conditions, readinessv1alpha1.ConditionReady); c != nil {
			got += "/" + c.Reason
		}
		return got == want, fmt.Sprintf("%s %+v", got, w.Status.Mismatches)
	})
	return w
}

// waitNetworkReady waits until the server's NetworkReady condition is want ("True/Match"; ""
// for none) and returns it.
func waitNetworkReady(t *testing.T, name, want string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	testenv.Eventually(t, wait, fmt.Sprintf("server %s NetworkReady %q", name, want), func() (bool, string) {
		s := suite.Server(env, name)
		if s == nil {
			return false, "no server"
		}
		c = apimeta.FindStatusCondition(s.Status.Conditions, readinessv1alpha1.ConditionNetworkReady)
		got := ""
		if c != nil {
			got = string(c.Status) + "/" + c.Reason
		}
		return got == want, fmt.Sprintf("%q %+v", got, c)
	})
	return c
}

func waitEvent(t *testing.T, name, reason string) {
	t.Helper()
	testenv.Eventually(t, wait, "event "+reason+" regarding "+name, func() (bool, string) {
		evs, err := suite.EventsRegarding(env, name)
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs {
			if e.Reason == reason {
				return true, ""
			}
			seen = append(seen, e.Reason)
		}
		return false, fmt.Sprint(seen)
	})
}

// ---- tests -----------------------------------------------------------------------------------

// The reference's sample, applied as written into its namespace, names a server that does not
// exist yet: not ready, ServerNotFound. Once the server is discovered cabled as the sample
// says, the wiring is ready and the server NetworkReady.
func TestSampleWiring(t *testing.T) {
	dir := os.Getenv("METALHUB_COMPAT_SAMPLES")
	if dir == "" {
		dir = filepath.Join(testenv.RepoRoot(), "..", "shared", "compat", "samples")
	}
	f, err := os.Open(filepath.Join(dir, "metal-maintenance-operator", "readiness_v1alpha1_serverwiring.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := utilyaml.NewYAMLReader(bufio.NewReader(f)).Read()
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	w := &readinessv1alpha1.ServerWiring{}
	if err := yaml.UnmarshalStrict(js, w); err != nil {
		t.Fatal(err)
	}
	ensureNamespace(t, w.Namespace)
	create(t, w)
	waitWiring(t, w.Namespace, w.Name, "false/"+readinessv1alpha1.ReasonServerNotFound)
	waitEvent(t, w.Name, readinessv1alpha1.ReasonWiringMismatch)

	server(t, w.Spec.ServerRef.Name, nic("eno1", "AA:BB:CC:DD:EE:FF", "up", nb{"spine-01", "Ethernet1/1"}))
	waitWiring(t, w.Namespace, w.Name, "true/"+readinessv1alpha1.ReasonMatch)
	waitNetworkReady(t, w.Spec.ServerRef.Name, "True/"+readinessv1alpha1.ReasonMatch)
	waitEvent(t, w.Name, readinessv1alpha1.ReasonWiringVerified)
	checkNoDoubleWrites(t)
}

// A cable moved to another switch port: the next discovery report makes the wiring not ready,
// the mismatch names both ports, the server's NetworkReady goes False. Cabling it back (the next
// report) makes both ready again.
func TestMiswiredAndFixed(t *testing.T) {
	const ns, name = "default", "wire-fix"
	right := nic("eno1", "02:00:00:00:01:01", "up", nb{"leaf-07", "Ethernet12"})
	other := nic("eno2", "02:00:00:00:01:02", "up", nb{"leaf-08", "Ethernet12"})
	server(t, name, right, other)
	create(t, wiring(ns, name, name,
		want("02:00:00:00:01:01", "up", nb{"leaf-07", "Ethernet12"}), want("02-00-00-00-01-02", "up", nb{"leaf-08", "Ethernet12"})))
	waitWiring(t, ns, name, "true/"+readinessv1alpha1.ReasonMatch)
	waitNetworkReady(t, name, "True/"+readinessv1alpha1.ReasonMatch)

	moved := nic("eno1", "02:00:00:00:01:01", "up", nb{"leaf-07", "Ethernet13"})
	discovered(t, name, moved, other)
	w := waitWiring(t, ns, name, "false/"+readinessv1alpha1.ReasonNeighborMismatch)
	if len(w.Status.Mismatches) != 1 {
		t.Fatalf("mismatches %+v, want the one moved cable", w.Status.Mismatches)
	}
	m := w.Status.Mismatches[0]
	if m.MACAddress != "02:00:00:00:01:01" || m.Reason != readinessv1alpha1.ReasonNeighborMismatch ||
		!strings.Contains(m.Message, "leaf-07 port Ethernet12 not seen") || !strings.Contains(m.Message, "seen: leaf-07 port Ethernet13") {
		t.Errorf("mismatch %+v does not name the expected and the seen port", m)
	}
	c := waitNetworkReady(t, name, "False/"+readinessv1alpha1.ReasonNeighborMismatch)
	if !strings.Contains(c.Message, ns+"/"+name) || !strings.Contains(c.Message, "Ethernet13") {
		t.Errorf("NetworkReady message %q names neither the wiring nor what is seen", c.Message)
	}
	waitEvent(t, name, readinessv1alpha1.ReasonWiringMismatch)

	// The link goes down as well: the gravest reason leads.
	discovered(t, name, nic("eno1", "02:00:00:00:01:01", "down"), other)
	waitWiring(t, ns, name, "false/"+readinessv1alpha1.ReasonCarrierDown)
	waitNetworkReady(t, name, "False/"+readinessv1alpha1.ReasonCarrierDown)

	discovered(t, name, right, other)
	waitWiring(t, ns, name, "true/"+readinessv1alpha1.ReasonMatch)
	waitNetworkReady(t, name, "True/"+readinessv1alpha1.ReasonMatch)
	checkNoDoubleWrites(t)
}

// Two wirings of one server (from two teams' namespaces) make one condition: False while either
// is miswired. Deleting the miswired one gives the server back to the other; deleting the last
// removes the condition, and the wiring goes (finalizer released).
func TestWiringsShareTheCondition(t *testing.T) {
	const name = "wire-share"
	ensureNamespace(t, "team-a")
	ensureNamespace(t, "team-b")
	server(t, name, nic("eno1", "02:00:00:00:02:01", "up", nb{"leaf-01", "Ethernet1"}))
	good := wiring("team-a", "good", name, want("02:00:00:00:02:01", "up", nb{"leaf-01", "Ethernet1"}))
	bad := wiring("team-b", "bad", name, want("02:00:00:00:02:01", "up", nb{"leaf-01", "Ethernet2"}))
	create(t, good)
	waitNetworkReady(t, name, "True/"+readinessv1alpha1.ReasonMatch)
	create(t, bad)
	waitWiring(t, "team-b", "bad", "false/"+readinessv1alpha1.ReasonNeighborMismatch)
	waitWiring(t, "team-a", "good", "true/"+readinessv1alpha1.ReasonMatch)
	c := waitNetworkReady(t, name, "False/"+readinessv1alpha1.ReasonNeighborMismatch)
	if !strings.Contains(c.Message, "team-b/bad") {
		t.Errorf("NetworkReady message %q does not name the miswired wiring", c.Message)
	}

	if err := env.Client.Delete(ctx(), bad); err != nil {
		t.Fatal(err)
	}
	waitNetworkReady(t, name, "True/"+readinessv1alpha1.ReasonMatch)
	if err := env.Client.Delete(ctx(), good); err != nil {
		t.Fatal(err)
	}
	waitNetworkReady(t, name, "")
	testenv.Eventually(t, wait, "wiring gone", func() (bool, string) {
		err := env.Client.Get(ctx(), client.ObjectKeyFromObject(good), &readinessv1alpha1.ServerWiring{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	checkNoDoubleWrites(t)
}

// Re-pointing a wiring at another server takes its condition off the first.
func TestWiringRepointed(t *testing.T) {
	const ns = "default"
	cabled := nic("eno1", "02:00:00:00:03:01", "up", nb{"leaf-02", "Ethernet3"})
	server(t, "wire-first", cabled)
	server(t, "wire-second", cabled)
	w := wiring(ns, "wire-repoint", "wire-first", want("02:00:00:00:03:01", "up", nb{"leaf-02", "Ethernet3"}))
	create(t, w)
	waitNetworkReady(t, "wire-first", "True/"+readinessv1alpha1.ReasonMatch)
	testenv.Eventually(t, wait, "wiring re-pointed", func() (bool, string) {
		cur := &readinessv1alpha1.ServerWiring{}
		if err := env.Client.Get(ctx(), client.ObjectKeyFromObject(w), cur); err != nil {
			return false, err.Error()
		}
		cur.Spec.ServerRef.Name = "wire-second"
		err := env.Client.Update(ctx(), cur)
		return err == nil, fmt.Sprint(err)
	})
	waitNetworkReady(t, "wire-second", "True/"+readinessv1alpha1.ReasonMatch)
	waitNetworkReady(t, "wire-first", "")
	checkNoDoubleWrites(t)
}

// A wiring of a server that goes away reports ServerNotFound; one that comes back with the
// same cabling is ready again. A NetworkReady condition removed by someone else is put back.
func TestServerGoneAndBack(t *testing.T) {
	const ns, name = "default", "wire-gone"
	cabled := nic("eno1", "02:00:00:00:04:01", "up", nb{"leaf-03", "Ethernet4"})
	server(t, name, cabled)
	create(t, wiring(ns, name, name, want("02:00:00:00:04:01", "up", nb{"leaf-03", "Ethernet4"})))
	waitWiring(t, ns, name, "true/"+readinessv1alpha1.ReasonMatch)

	testenv.Eventually(t, wait, "condition removed by hand", func() (bool, string) {
		s := suite.Server(env, name)
		s.Status.Conditions = slices.DeleteFunc(s.Status.Conditions, func(c metav1.Condition) bool {
			return c.Type == readinessv1alpha1.ConditionNetworkReady
		})
		err := testenv.WriteStatus(ctx(), env.Client, s)
		return err == nil, fmt.Sprint(err)
	})
	waitNetworkReady(t, name, "True/"+readinessv1alpha1.ReasonMatch)

	if err := env.Client.Delete(ctx(), suite.Server(env, name)); err != nil {
		t.Fatal(err)
	}
	waitWiring(t, ns, name, "false/"+readinessv1alpha1.ReasonServerNotFound)
	server(t, name, cabled)
	waitWiring(t, ns, name, "true/"+readinessv1alpha1.ReasonMatch)
	waitNetworkReady(t, name, "True/"+readinessv1alpha1.ReasonMatch)
	checkNoDoubleWrites(t)
}

package metaltest

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
)

// Fleet is an emulated fleet whose BMCs tests take one by one, so that they do not see each
// other's boxes.
type Fleet struct {
	*redfish.Emulator
	size int
	next atomic.Int32
}

// StartFleet starts an emulated fleet of o.BMCs BMCs.
func StartFleet(o redfish.Options) (*Fleet, error) {
	e, err := redfish.Start(o)
	if err != nil {
		return nil, err
	}
	return &Fleet{Emulator: e, size: o.BMCs}, nil
}

// Take reserves the next BMC for a test.
func (f *Fleet) Take(t testing.TB) *redfish.BMC {
	t.Helper()
	i := int(f.next.Add(1)) - 1
	if i >= f.size {
		t.Fatalf("fleet exhausted: raise its size")
	}
	return f.BMC(i)
}

// Records are the actions on b's boxes; event subscriptions are the BMC's configuration, not an
// action on a box, and are looked at through b.Subscriptions.
func (f *Fleet) Records(b *redfish.BMC) []redfish.Record {
	var out []redfish.Record
	for _, r := range f.Emulator.Records() {
		if r.Action == redfish.ActionSubscribe || r.Action == redfish.ActionUnsubscribe {
			continue
		}
		if r.BMC == b.Index() {
			out = append(out, r)
		}
	}
	return out
}

// Port is the port b listens on.
func Port(b *redfish.BMC) int32 {
	var p int32
	fmt.Sscanf(b.URL()[strings.LastIndex(b.URL(), ":")+1:], "%d", &p)
	return p
}

// BMCObject is the BMC object for b, logging in with the BMCSecret of the same name.
func BMCObject(b *redfish.BMC, name string) *metalv1alpha1.BMC {
	return &metalv1alpha1.BMC{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"test": name}},
		Spec: metalv1alpha1.BMCSpec{
			Access:       &metalv1alpha1.InlineEndpoint{IP: "127.0.0.1"},
			BMCSecretRef: corev1.LocalObjectReference{Name: name},
			Protocol:     metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: Port(b), Scheme: metalv1alpha1.HTTPScheme},
		},
	}
}

// ResetTypes names the records' actions the way the tests compare them: a reset by its type, a
// boot override as Boot:<target>/<enabled>.
func ResetTypes(recs []redfish.Record) []string {
	var out []string
	for _, r := range recs {
		switch r.Action {
		case redfish.ActionReset:
			out = append(out, r.ResetType)
		case redfish.ActionBootOverride:
			out = append(out, "Boot:"+r.Boot.Target+"/"+r.Boot.Enabled)
		default:
			out = append(out, r.Action+":"+r.ResetType)
		}
	}
	return out
}

// Since are the records at or after t.
func Since(recs []redfish.Record, t time.Time) []redfish.Record {
	var out []redfish.Record
	for _, r := range recs {
		if !r.Time.Before(t) {
			out = append(out, r)
		}
	}
	return out
}

// Connect logs in to b as the controllers do, through a pool of its own that the test closes.
func Connect(t testing.TB, b *redfish.BMC) (*bmc.Pool, bmc.BMC) {
	t.Helper()
	pool := bmc.NewPool(bmc.Options{RequestTimeout: 2 * time.Second})
	t.Cleanup(pool.Close)
	user, pw := b.Credentials()
	conn, err := pool.Get(bmc.Endpoint{Address: b.URL(), Username: user, Password: pw})
	if err != nil {
		t.Fatal(err)
	}
	return pool, conn
}

package registry

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/discovery"
)

// Waits are bounded; a wake releases every wait of its server and frees their room; a Server
// without a round wakes no one.
func TestRoundWaits(t *testing.T) {
	w := &roundWaits{waiting: map[string][]chan struct{}{}, max: 2}
	a, b := w.add("s1"), w.add("s1")
	if a == nil || b == nil {
		t.Fatal("a wait within the bound was refused")
	}
	if c := w.add("s2"); c != nil {
		t.Fatal("a wait beyond the bound was taken")
	}
	server := func(round string) *metalv1alpha1.Server {
		s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "s1"}}
		if round != "" {
			s.Annotations = map[string]string{discovery.RoundAnnotation: round}
		}
		return s
	}
	w.wake(server(""))
	for _, ch := range []chan struct{}{a, b} {
		select {
		case <-ch:
			t.Fatal("woken by a Server without a round")
		default:
		}
	}
	w.wake(server("r1"))
	for _, ch := range []chan struct{}{a, b} {
		select {
		case <-ch:
		default:
			t.Fatal("not woken by the Server's round")
		}
	}
	w.remove("s1", a)
	w.remove("s1", b)
	if c := w.add("s2"); c == nil {
		t.Fatal("the bound's room not freed by the ended waits")
	}
}

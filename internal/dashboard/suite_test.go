package dashboard

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/testenv"
)

// One control plane for the package; each test starts its own dashboard on a free port and
// names its objects apart.
var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

func ctx() context.Context { return context.Background() }

// start runs a dashboard on cfg (the admin's without one) until the test ends, on a free
// loopback port unless o names an address.
func start(t testing.TB, o Options, cfg ...*rest.Config) *Server {
	t.Helper()
	c := env.Config
	if len(cfg) > 0 {
		c = cfg[0]
	}
	return startLogged(t, o, testr.NewWithInterface(t, testr.Options{LogTimestamp: true}), c)
}

// startLogged is start with the dashboard's log going to log.
func startLogged(t testing.TB, o Options, log logr.Logger, c *rest.Config) *Server {
	t.Helper()
	if o.Address == "" {
		o.Address = "127.0.0.1:0"
	}
	s, err := New(c, o, log)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

func newServer(name string, labels map[string]string) *metalv1alpha1.Server {
	return &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: metalv1alpha1.ServerSpec{SystemUUID: "uuid-" + name}}
}

func create(t testing.TB, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(ctx(), o); err != nil {
			t.Fatalf("creating %s: %v", o.GetName(), err)
		}
	}
}

// sseEvent is one server-sent event.
type sseEvent struct {
	name string
	data string
	at   time.Time // when it was read off the connection
}

// stream opens GET /api/stream and delivers its events (comments dropped) until the test ends.
func stream(t testing.TB, s *Server) <-chan sseEvent {
	t.Helper()
	c, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(c, http.MethodGet, s.URL()+"api/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		cancel()
		t.Fatalf("stream: %s, %s", resp.Status, ct)
	}
	out := make(chan sseEvent, 1024)
	finished := make(chan struct{})
	t.Cleanup(func() { cancel(); <-finished })
	go func() {
		defer close(finished)
		defer close(out)
		defer func() { _ = resp.Body.Close() }()
		readSSE(resp.Body, func(ev sseEvent) { out <- ev })
	}()
	return out
}

func readSSE(r io.Reader, emit func(sseEvent)) {
	br := bufio.NewReaderSize(r, 1<<20)
	var ev sseEvent
	var data []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if len(data) > 0 {
				ev.data = strings.Join(data, "\n")
				ev.at = time.Now()
				emit(ev)
			}
			ev, data = sseEvent{}, nil
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
}

// next waits for the stream's next event.
func next(t testing.TB, evs <-chan sseEvent, within time.Duration) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-evs:
		if !ok {
			t.Fatal("stream ended")
		}
		return ev
	case <-time.After(within):
		t.Fatalf("no stream event within %s", within)
	}
	return sseEvent{}
}

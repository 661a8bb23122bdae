package dashboard

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
)

// port is the port s listens on.
func port(s *Server) string { return strconv.Itoa(s.ln.Addr().(*net.TCPAddr).Port) }

// Off loopback, --allow-actions without authentication would let anyone on the network power
// servers off as the dashboard's user: it must not start, and must say which flags fix it.
func TestOffLoopbackActionsNeedAuth(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		s, err := New(env.Config, Options{Address: addr, AllowActions: true}, testr.New(t))
		if err == nil {
			_ = s.ln.Close()
			t.Errorf("%s: started with actions and no authentication", addr)
			continue
		}
		for _, flag := range []string{"--allow-actions", "--token-file", "--token-review"} {
			if !strings.Contains(err.Error(), flag) {
				t.Errorf("%s: error %q does not name %s", addr, err, flag)
			}
		}
	}
	// Read-only off loopback starts, as before.
	s := start(t, Options{Address: "0.0.0.0:0"})
	if code := getJSON(t, s.URL()+"api/snapshot", &Snapshot{}); code != http.StatusOK {
		t.Errorf("read-only snapshot off loopback: %d", code)
	}
}

// Off loopback the Host header is checked too: a page whose name an attacker points at this
// machine (DNS rebinding) must neither read the fleet nor reach the buttons.
func TestOffLoopbackHostAllowlist(t *testing.T) {
	s := start(t, Options{Address: "0.0.0.0:0"})
	p := port(s)
	for host, want := range map[string]int{
		"evil.example:" + p: http.StatusForbidden,
		"evil.example":      http.StatusForbidden,
		"127.0.0.1:" + p:    http.StatusOK,
		"localhost:" + p:    http.StatusOK,
		"LOCALHOST:" + p:    http.StatusOK,
	} {
		req, _ := http.NewRequest(http.MethodGet, s.URL()+"api/snapshot", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %s, want %d", host, resp.Status, want)
		}
	}
}

package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// registryStub answers posts with the scripted status codes in order, then the last one forever.
type registryStub struct {
	mu      sync.Mutex
	codes   []int
	posts   int
	auth    []string
	reports []Report
}

func (s *registryStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != RegisterPath {
		http.Error(w, "wrong endpoint", http.StatusTeapot)
		return
	}
	var rep Report
	if err := json.NewDecoder(r.Body).Decode(&rep); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.reports = append(s.reports, rep)
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	code := s.codes[min(s.posts, len(s.codes)-1)]
	s.posts++
	switch code {
	case http.StatusOK:
		fmt.Fprint(w, `{"done":true}`)
	case 0: // 200 but not done yet
		fmt.Fprint(w, `{"done":false}`)
	default:
		http.Error(w, "scripted", code)
	}
}

func (s *registryStub) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.posts
}

func newAgent(t *testing.T, stub *registryStub, once bool) *Agent {
	t.Helper()
	srv := httptest.NewServer(stub)
	t.Cleanup(srv.Close)
	n := 0
	return &Agent{
		Client: &Client{RegistryURL: srv.URL + "/", Token: "s3cret", Attempts: 3, Backoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond},
		Collect: func(context.Context) (*Report, error) {
			n++
			return &Report{Version: ReportVersion, SystemUUID: fmt.Sprintf("uuid-%d", n)}, nil
		},
		Interval: 5 * time.Millisecond,
		Once:     once,
	}
}

func TestAgent(t *testing.T) {
	tests := []struct {
		name      string
		codes     []int
		once      bool
		wantErr   error // nil, ErrNotDone, or a *StatusError with this code
		wantCode  int
		wantPosts int
		// wantCycles is how many reports were collected: Send retries one report, Run collects
		// a fresh one for each round of retries.
		wantCycles int
	}{
		{"accepted at once", []int{200}, false, nil, 0, 1, 1},
		{"server errors retried with backoff", []int{503, 502, 200}, false, nil, 0, 3, 1},
		{"round not started yet: keeps reporting", []int{401, 401, 401, 404, 0, 200}, false, nil, 0, 6, 3},
		{"malformed is final", []int{400}, false, &StatusError{}, 400, 1, 1},
		{"too large is final", []int{503, 413}, false, &StatusError{}, 413, 2, 1},
		{"once: retries are bounded", []int{503}, true, &StatusError{}, 503, 3, 1},
		{"once: not done", []int{0}, true, ErrNotDone, 0, 1, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stub := &registryStub{codes: tc.codes}
			a := newAgent(t, stub, tc.once)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := a.Run(ctx)
			switch want := tc.wantErr.(type) {
			case nil:
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			case *StatusError:
				var se *StatusError
				if !errors.As(err, &se) || se.Code != tc.wantCode {
					t.Fatalf("Run: %v, want status %d", err, tc.wantCode)
				}
			default:
				if !errors.Is(err, want) {
					t.Fatalf("Run: %v, want %v", err, want)
				}
			}
			if got := stub.count(); got != tc.wantPosts {
				t.Fatalf("%d posts, want %d", got, tc.wantPosts)
			}
			for _, h := range stub.auth {
				if h != "Bearer s3cret" {
					t.Fatalf("Authorization %q", h)
				}
			}
			cycles := map[string]bool{}
			for _, r := range stub.reports {
				cycles[r.SystemUUID] = true
			}
			if len(cycles) != tc.wantCycles {
				t.Fatalf("%d reports collected, want %d", len(cycles), tc.wantCycles)
			}
		})
	}
}

func TestAgentStopsWithContext(t *testing.T) {
	stub := &registryStub{codes: []int{401}}
	a := newAgent(t, stub, false)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := a.Run(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v, want deadline exceeded", err)
	}
}

// answerThenStop answers every request 401 and ends the caller's context before the answer
// is read: the moment a deadline can pass between the registry's answer and the agent's look.
type answerThenStop struct{ stop context.CancelFunc }

func (a answerThenStop) RoundTrip(*http.Request) (*http.Response, error) {
	a.stop()
	return &http.Response{StatusCode: http.StatusUnauthorized, Status: "401 Unauthorized", Header: http.Header{},
		Body: io.NopCloser(strings.NewReader("scripted"))}, nil
}

// The agent stopped while the registry's answer came back says it was stopped, with that
// answer beside it, instead of ending on the answer alone.
func TestAgentStoppedMidAnswerSaysSo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := &Agent{
		Client: &Client{RegistryURL: "http://registry.invalid/", Token: "s3cret", Attempts: 1,
			HTTPClient: &http.Client{Transport: answerThenStop{stop: cancel}}},
		Collect:  func(context.Context) (*Report, error) { return &Report{Version: ReportVersion, SystemUUID: "u"}, nil },
		Interval: time.Hour,
	}
	err := a.Run(ctx)
	var se *StatusError
	if !errors.Is(err, context.Canceled) || !errors.As(err, &se) || se.Code != http.StatusUnauthorized {
		t.Fatalf("Run: %v, want canceled with the registry's 401 beside it", err)
	}
}

func TestClientUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c := &Client{RegistryURL: url, Token: "s3cret", Attempts: 2, Backoff: time.Millisecond}
	_, err := c.Send(context.Background(), &Report{Version: ReportVersion, SystemUUID: "u"})
	if err == nil || Permanent(err) {
		t.Fatalf("got %v, want a transient transport error", err)
	}
	if strings.Contains(err.Error(), "s3cret") || strings.Contains(fmt.Sprint(*c), "s3cret") {
		t.Fatal("token leaked into an error or the client's string form")
	}
}

func TestValidate(t *testing.T) {
	ok := func() *Report {
		return &Report{Version: ReportVersion, SystemUUID: "u", MemoryBytes: 1 << 30,
			NICs: []NIC{{Name: "eth0", MAC: "52:54:00:00:00:01", IPs: []string{"10.0.0.1", "fe80::1"}}}}
	}
	tests := []struct {
		name   string
		mutate func(*Report)
		want   string
	}{
		{"valid", func(*Report) {}, ""},
		{"future version", func(r *Report) { r.Version = 2 }, "version"},
		{"no uuid", func(r *Report) { r.SystemUUID = "" }, "systemUUID"},
		{"bad mac", func(r *Report) { r.NICs[0].MAC = "nope" }, "mac"},
		{"ip with prefix", func(r *Report) { r.NICs[0].IPs = []string{"10.0.0.1/24"} }, "ip"},
		{"ip with zone", func(r *Report) { r.NICs[0].IPs = []string{"fe80::1%eth0"} }, "zone"},
		{"too many nics", func(r *Report) { r.NICs = make([]NIC, MaxNICs+1) }, "nics"},
		{"long string", func(r *Report) { r.System.Vendor = strings.Repeat("x", MaxStringLen+1) }, "system.vendor"},
		{"negative memory", func(r *Report) { r.MemoryBytes = -1 }, "memoryBytes"},
		{"silly cores", func(r *Report) { r.CPUs = []CPU{{Cores: 1 << 20}} }, "cpus[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ok()
			tc.mutate(r)
			err := r.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
			if n := strings.Count(err.Error(), "\n"); n > 6 {
				t.Fatalf("error has %d lines; should be capped", n)
			}
		})
	}
}

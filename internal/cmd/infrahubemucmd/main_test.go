package infrahubemucmd

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/infrahub"
	"github.com/metalhub/metalhub/internal/syncbuf"
)

var urlRE = regexp.MustCompile(`listening on (http://\S+)`)

// run starts Main in the background and waits for its address.
func run(t *testing.T, args ...string) (url string, stdout *syncbuf.Buffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	code := make(chan int, 1)
	go func() { code <- Main(ctx, args, stdout, stderr) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := urlRE.FindStringSubmatch(stdout.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case c := <-code:
			cancel()
			t.Fatalf("Main exited early with %d: %s", c, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no address printed; stdout %q stderr %q", stdout.String(), stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop = func() int {
		cancel()
		select {
		case c := <-code:
			return c
		case <-time.After(5 * time.Second):
			t.Fatal("Main did not return after cancel")
			return -1
		}
	}
	return url, stdout, stop
}

func TestMainServesSample(t *testing.T) {
	url, out, stop := run(t, "--listen", "127.0.0.1:0", "--sample", "--username", "dev", "--password", "pw", "--token", "tok-1")
	for _, want := range []string{"username: dev", "password: pw", "tok-1", "branch feature-x: 2 artifacts", "/emulator/requests"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	ctx := context.Background()
	for _, cfg := range []infrahub.Config{
		{URL: url, Username: "dev", Password: "pw"},
		{URL: url, APIToken: "tok-1"},
	} {
		c, err := infrahub.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		arts, err := c.QueryArtifacts(ctx, "", "Webserver_Manifest", infrahub.Target{Branch: "main"})
		if err != nil || len(arts) != 2 {
			t.Fatalf("%s: %v %+v", cfg, err, arts)
		}
		content, err := c.DownloadArtifact(ctx, arts[0].ID, infrahub.Target{At: "2025-04-09T00:00:00Z"})
		if err != nil || !strings.Contains(string(content.Data), "kind: ConfigMap") {
			t.Fatalf("download: %v %+v", err, content)
		}
	}
	resp, err := http.Get(url + "/emulator/requests")
	if err != nil {
		t.Fatal(err)
	}
	var log struct {
		Counters struct{ Logins, Queries, Downloads int }
	}
	_ = json.NewDecoder(resp.Body).Decode(&log)
	resp.Body.Close()
	if log.Counters.Logins != 1 || log.Counters.Queries != 2 || log.Counters.Downloads != 2 {
		t.Errorf("counters over HTTP: %+v", log.Counters)
	}
	if code := stop(); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	if _, err := http.Get(url + "/emulator/requests"); err == nil {
		t.Error("still serving after cancel")
	}
}

func TestMainArtifactsDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "App.yaml"), []byte("kind: ConfigMap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	url, out, stop := run(t, "--listen", "127.0.0.1:0", "--artifacts-dir", dir)
	defer stop()
	if !strings.Contains(out.String(), "branch main: 1 artifacts App=") {
		t.Errorf("output: %s", out.String())
	}
	c, _ := infrahub.New(infrahub.Config{URL: url, Username: "admin", Password: "infrahub"})
	arts, err := c.QueryArtifacts(context.Background(), "", "App", infrahub.Target{})
	if err != nil || len(arts) != 1 {
		t.Fatalf("%v %+v", err, arts)
	}
}

func TestMainUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want int
	}{
		{[]string{"--no-such-flag"}, 2},
		{[]string{"extra"}, 2},
		{[]string{"--password", ""}, 2},
		{[]string{"--listen", "127.0.0.1:0", "--artifacts-dir", "/nonexistent/dir"}, 1},
		{[]string{"--listen", "not-an-address"}, 1},
		{[]string{"-h"}, 0},
		{[]string{"-help"}, 0},
	}
	for _, tc := range tests {
		var out, errb bytes.Buffer
		if got := Main(context.Background(), tc.args, &out, &errb); got != tc.want {
			t.Errorf("Main(%q) = %d, want %d (stderr %q)", tc.args, got, tc.want, errb.String())
		}
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/metalhub/metalhub/internal/probe"
)

// TestReportsThisMachine runs the agent as the command would, on this machine (root "/"),
// against a stand-in registry, and checks what arrives against the kernel's own numbers.
func TestReportsThisMachine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the probe reads Linux /sys and /proc")
	}
	var mu sync.Mutex
	var got *probe.Report
	var auth string
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got = &probe.Report{}
		if r.URL.Path != probe.RegisterPath || json.NewDecoder(r.Body).Decode(got) != nil {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		auth = r.Header.Get("Authorization")
		fmt.Fprint(w, `{"done":true}`)
	}))
	defer reg.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--registry-url", reg.URL, "--server-uuid", "u-1", "--token-file", tokenFile, "--once"}, &bytes.Buffer{}, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "tok-123") {
		t.Fatal("token logged")
	}
	mu.Lock()
	defer mu.Unlock()
	if auth != "Bearer tok-123" || got.SystemUUID != "u-1" {
		t.Fatalf("auth %q uuid %q", auth, got.SystemUUID)
	}
	threads := 0
	for _, c := range got.CPUs {
		threads += c.Threads
	}
	if threads != runtime.NumCPU() {
		t.Errorf("reported %d CPU threads, runtime.NumCPU (nproc) is %d", threads, runtime.NumCPU())
	}
	if want := memTotal(t); got.MemoryBytes != want {
		t.Errorf("reported %d bytes of memory, MemTotal is %d", got.MemoryBytes, want)
	}
}

func memTotal(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	t.Fatal("no MemTotal")
	return 0
}

func TestPrint(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--print", "--server-uuid", "u-2"}, &out, &bytes.Buffer{}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	var r probe.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.SystemUUID != "u-2" || r.MemoryBytes == 0 {
		t.Fatalf("printed %s (%v)", out.String(), err)
	}
}

func TestFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--token", "x"}, "--registry-url is required"},
		{[]string{"--registry-url", "http://r"}, "a token is required"},
		{[]string{"--registry-url", "http://r", "--token", "a", "--token-file", "b"}, "mutually exclusive"},
		{[]string{"--registry-url", "http://r", "--token-file", "/nonexistent"}, "reading --token-file"},
		{[]string{"--registry-url", "http://r", "--token", "x", "extra"}, "unexpected arguments"},
	}
	for _, tc := range tests {
		var stderr bytes.Buffer
		if code := run(context.Background(), tc.args, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// With --clean the command erases the disks of a machine (a fixture tree whose disks are files
// of random data) and posts the proof, not the hardware, to the cleaning endpoint.
func TestCleanErasesAndReports(t *testing.T) {
	root, dev := t.TempDir(), t.TempDir()
	for p, v := range map[string]string{"sys/class/dmi/id/product_uuid": "u-2", "sys/block/vda/size": "16384", "sys/block/vda/removable": "0"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dev, "vda"), bytes.Repeat([]byte("tenant"), 8<<20/6+1)[:8<<20], 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got *probe.CleaningReport
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got = &probe.CleaningReport{}
		if r.URL.Path != probe.CleanPath || json.NewDecoder(r.Body).Decode(got) != nil || r.Header.Get("Authorization") != "Bearer tok-9" {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, `{"done":true}`)
	}))
	defer reg.Close()
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--registry-url", reg.URL, "--token", "tok-9", "--root", root, "--dev-dir", dev, "--clean", "AllDisks"}, &bytes.Buffer{}, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if got == nil || got.SystemUUID != "u-2" || got.Policy != "AllDisks" || len(got.Disks) != 1 || got.Disks[0].Proof == nil || !got.Disks[0].Proof.Verified {
		t.Fatalf("report %+v", got)
	}
	b, err := os.ReadFile(filepath.Join(dev, "vda"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("tenant")) {
		t.Fatal("the disk still holds the tenant's data")
	}
}

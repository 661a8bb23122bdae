package dev

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/testenv"
)

// children lists the processes whose parent is pid.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// `make run 2>&1 | tee run.log`, then Ctrl-C: the terminal signals the whole foreground group,
// so the reader of the pipe dies with the run. The run must still stop kube-apiserver and etcd
// (in process groups of their own, the signal does not reach them) instead of dying of SIGPIPE
// on its next log line and leaving them running.
func TestPipedRunStopsEverythingOnCtrlC(t *testing.T) {
	t.Parallel() // a run of its own: every address on port 0, its own data directory
	if testing.Short() {
		t.Skip("end to end")
	}
	bin, err := testenv.MetalhubBinary()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	addrFile := filepath.Join(tmp, "addresses.json")
	args := []string{bin, "dev", "--servers", "2", "--power-delay", "200ms", "--address-file", addrFile, "--log-file", "-",
		"--emulator-control-address", "127.0.0.1:0", "--bmc-base-port", "0", "--infrahub-address", "127.0.0.1:0",
		"--registry-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0", "--metrics-bind-address", "0",
		"--webhook-port", "0", "--dashboard-address", "127.0.0.1:0", "--receiver-address", "127.0.0.1:0"}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = strconv.Quote(a)
	}
	// cat stands in for tee: it dies of the same Ctrl-C.
	sh := exec.Command("bash", "-c", strings.Join(quoted, " ")+" 2>&1 | cat >/dev/null")
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the terminal's foreground group
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sh.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL) })

	deadline := time.Now().Add(3 * time.Minute)
	for {
		if _, err := os.Stat(addrFile); err == nil {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the pipeline ended before the run was up: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("metalhub dev not up after 3m")
		}
	}
	var dev int
	for _, p := range children(sh.Process.Pid) {
		if exe, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(p), "exe")); exe == bin {
			dev = p
		}
	}
	if dev == 0 {
		t.Fatal("metalhub dev not found under the shell")
	}
	cp := children(dev)
	if len(cp) < 2 {
		t.Fatalf("want etcd and kube-apiserver under metalhub dev, found %v", cp)
	}
	t.Cleanup(func() {
		for _, p := range cp {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	})

	if err := syscall.Kill(-sh.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatal("the pipeline still runs 1m after Ctrl-C")
	}
	gone := time.Now().Add(30 * time.Second)
	for alive(dev) || anyAlive(cp) {
		if time.Now().After(gone) {
			t.Fatalf("after Ctrl-C: metalhub dev alive %v, control plane %v alive %v", alive(dev), cp, anyAlive(cp))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func anyAlive(pids []int) bool {
	for _, p := range pids {
		if alive(p) {
			return true
		}
	}
	return false
}

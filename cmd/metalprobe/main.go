// Command metalprobe is metalhub's discovery agent. It runs on a server booted into the discovery
// OS (started by the ignition that metalhub renders), collects the server's hardware from /sys,
// /proc, DMI and lldpctl, and reports it to the metalhub registry until the registry confirms.
//
//	metalprobe --registry-url=http://registry:8082 --server-uuid=<uuid> --token-file=/etc/metalprobe/token
//
// --print collects and prints the report as JSON without posting (no registry needed).
//
// --clean=Metadata|RootDisk|AllDisks makes it the cleaning agent of a cleaning round: it erases
// the disks as the policy asks (internal/probe/clean), reads them back, and posts what it did
// and proved to the registry's cleaning endpoint until the registry holds it. The disks are
// erased once; only the report is sent again.
//
// It has no Kubernetes credentials and touches no object: its only output is the report, posted to
// the registry with the round's token. It imports nothing of metalhub but internal/probe and
// its sub-packages.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/metalhub/metalhub/internal/probe"
	"github.com/metalhub/metalhub/internal/probe/clean"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

type flags struct {
	registryURL, serverUUID, token, tokenFile, root string
	clean, devDir                                   string
	interval, timeout                               time.Duration
	once, print                                     bool
	verbosity                                       int
}

func parseFlags(args []string, stderr io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("metalprobe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.registryURL, "registry-url", "", "Base URL of the metalhub registry, e.g. http://10.0.0.1:8082.")
	fs.StringVar(&f.serverUUID, "server-uuid", "", "System UUID of the server this agent reports for (default: DMI product_uuid).")
	fs.StringVar(&f.token, "token", "", "Bearer token of the discovery round (prefer --token-file: arguments are visible in ps).")
	fs.StringVar(&f.tokenFile, "token-file", "", "File holding the bearer token of the discovery round.")
	fs.StringVar(&f.root, "root", "/", "Root under which /sys and /proc are read; anything but / is a fixture tree.")
	fs.DurationVar(&f.interval, "interval", 30*time.Second, "Pause between reports while the registry is not done.")
	fs.DurationVar(&f.timeout, "timeout", 0, "Give up after this long (0: never; systemd restarts a failed agent anyway).")
	fs.BoolVar(&f.once, "once", false, "Report once (with bounded retries) and exit; non-zero if not confirmed.")
	fs.BoolVar(&f.print, "print", false, "Print the collected report as JSON and exit without posting.")
	fs.StringVar(&f.clean, "clean", "", "Erase the disks by this cleaning policy (Metadata, RootDisk or AllDisks) and report the proof instead of the hardware.")
	fs.StringVar(&f.devDir, "dev-dir", "/dev", "Directory of the disks' device nodes, by kernel name (--clean).")
	fs.IntVar(&f.verbosity, "v", 0, "Log verbosity (1 shows unreadable files and retries).")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if f.print {
		return f, nil
	}
	if f.registryURL == "" {
		return nil, errors.New("--registry-url is required")
	}
	if f.token != "" && f.tokenFile != "" {
		return nil, errors.New("--token and --token-file are mutually exclusive")
	}
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("reading --token-file: %w", err)
		}
		f.token = strings.TrimSpace(string(b))
	}
	if f.token == "" {
		return nil, errors.New("a token is required (--token or --token-file)")
	}
	return f, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "metalprobe:", err)
		return 2
	}
	log := logr.FromSlogHandler(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.Level(-f.verbosity)}))
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	collect := func(ctx context.Context) (*probe.Report, error) {
		r, err := probe.Collect(ctx, probe.Options{Root: f.root, Logger: log})
		if err != nil {
			return nil, err
		}
		r.SystemUUID = f.serverUUID
		if r.SystemUUID == "" {
			r.SystemUUID = r.System.UUID
		}
		return r, nil
	}
	if f.clean != "" {
		return runClean(ctx, f, log)
	}
	if f.print {
		r, err := collect(ctx)
		if err != nil {
			fmt.Fprintln(stderr, "metalprobe:", err)
			return 1
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(r)
		return 0
	}
	agent := &probe.Agent{
		Client:   &probe.Client{RegistryURL: f.registryURL, Token: f.token, Logger: log},
		Collect:  collect,
		Interval: f.interval,
		Once:     f.once,
		Logger:   log,
	}
	log.Info("reporting hardware", "registry", f.registryURL, "serverUUID", f.serverUUID, "root", f.root)
	if err := agent.Run(ctx); err != nil {
		log.Error(err, "discovery report failed")
		return 1
	}
	return 0
}

// runClean erases the disks by f.clean and delivers the proof.
func runClean(ctx context.Context, f *flags, log logr.Logger) int {
	log.Info("cleaning disks", "policy", f.clean, "registry", f.registryURL, "serverUUID", f.serverUUID)
	rep, err := clean.Run(ctx, clean.Options{Root: f.root, DevDir: f.devDir, Policy: f.clean, ServerUUID: f.serverUUID, Logger: log})
	if err != nil {
		log.Error(err, "cleaning failed before any report")
		return 1
	}
	c := &probe.Client{RegistryURL: f.registryURL, Token: f.token, Logger: log}
	if err := clean.Deliver(ctx, c, rep, f.interval, log); err != nil {
		log.Error(err, "cleaning report not delivered")
		return 1
	}
	return 0
}

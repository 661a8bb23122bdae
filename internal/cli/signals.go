package cli

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

var (
	forcedMu    sync.Mutex
	forcedHooks = map[int]func(){}
	forcedNext  int
)

// OnForcedExit registers f to run when a second signal forces the process out, before it exits:
// what a graceful stop would have cleaned up and must not be left behind (child processes).
// The returned function unregisters it.
func OnForcedExit(f func()) (remove func()) {
	forcedMu.Lock()
	defer forcedMu.Unlock()
	id := forcedNext
	forcedNext++
	forcedHooks[id] = f
	return func() {
		forcedMu.Lock()
		defer forcedMu.Unlock()
		delete(forcedHooks, id)
	}
}

// SignalContext is cancelled on SIGINT, SIGTERM or SIGHUP (a closed terminal); a second signal
// runs the forced-exit hooks and exits with code 1.
func SignalContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		<-ch
		cancel()
		<-ch
		forcedMu.Lock()
		for _, f := range forcedHooks {
			f()
		}
		forcedMu.Unlock()
		os.Exit(1)
	}()
	return ctx
}

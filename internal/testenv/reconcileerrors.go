package testenv

import (
	"fmt"
	"sync"

	"github.com/go-logr/logr"
)

// ReconcileErrors is a test manager's logger that counts controller-runtime's "Reconciler
// error" lines (an error returned from a pass: logged and retried with backoff) per controller
// and object, and drops everything else. A test asserts on its own object's count, which the
// other tests' objects sharing the manager cannot move (the per-controller metric can).
type ReconcileErrors struct {
	mu sync.Mutex
	n  map[string]int
}

// Logger returns the logger to give the manager (ctrl.Options.Logger).
func (e *ReconcileErrors) Logger() logr.Logger { return logr.New(&errorSink{e: e}) }

// Count returns how many passes of controller over the object namespace/name ("" for a
// cluster-scoped one) returned an error so far.
func (e *ReconcileErrors) Count(controller, namespace, name string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[controller+"/"+namespace+"/"+name]
}

func (e *ReconcileErrors) add(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[key]++
}

type errorSink struct {
	e  *ReconcileErrors
	kv []any
}

func (s *errorSink) Init(logr.RuntimeInfo)        {}
func (s *errorSink) Enabled(int) bool             { return false }
func (s *errorSink) Info(int, string, ...any)     {}
func (s *errorSink) WithName(string) logr.LogSink { return s }
func (s *errorSink) WithValues(kv ...any) logr.LogSink {
	return &errorSink{e: s.e, kv: append(append([]any(nil), s.kv...), kv...)}
}

// Error counts the line controller-runtime writes for a pass that returned an error; its
// logger carries the controller and the request's namespace and name as values.
func (s *errorSink) Error(_ error, msg string, kv ...any) {
	if msg != "Reconciler error" {
		return
	}
	v := map[string]string{}
	all := append(append([]any(nil), s.kv...), kv...)
	for i := 0; i+1 < len(all); i += 2 {
		if k, ok := all[i].(string); ok {
			v[k] = fmt.Sprint(all[i+1])
		}
	}
	s.e.add(v["controller"] + "/" + v["namespace"] + "/" + v["name"])
}

// Package healthexpr decides the health of applied objects with the CEL expressions of a
// spec.healthExpressions list (Flux's healthCheckExprs shape) instead of kstatus. The admission
// webhook compiles them to refuse one that does not compile; the VidraResource controller
// evaluates them on every health pass.
package healthexpr

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

// Variables are what an expression sees: the object's top-level fields, as in Flux, so that an
// expression from its cheatsheet (status.conditions.filter(...)) works unchanged. A field the
// object lacks is an empty map, so has(status.x) is false rather than an error.
var Variables = []string{"apiVersion", "kind", "metadata", "spec", "status"}

// costLimit bounds one evaluation: the expressions are a tenant's, run in the operator.
const costLimit = 1_000_000

var (
	envOnce sync.Once
	env     *cel.Env
	envErr  error
)

func celEnv() (*cel.Env, error) {
	envOnce.Do(func() {
		opts := []cel.EnvOption{
			cel.OptionalTypes(), // status.?conditions.orValue([]), as Flux's users write
			cel.CrossTypeNumericComparisons(true),
			cel.DefaultUTCTimeZone(true),
			ext.Strings(), ext.Sets(), ext.Lists(), ext.Encoders(),
		}
		for _, v := range Variables {
			opts = append(opts, cel.Variable(v, cel.DynType))
		}
		env, envErr = cel.NewEnv(opts...)
	})
	return env, envErr
}

// programs caches compiled expressions by their text: a pass judges many objects with the same
// few, and every VidraResource of a sync carries the same list.
var programs = struct {
	sync.Mutex
	m map[string]compiled
}{m: map[string]compiled{}}

// maxCached bounds the cache; past it, it starts over (expressions come from specs, whose
// number is bounded by the objects in the cluster, not by time).
const maxCached = 4096

type compiled struct {
	prg cel.Program
	err error
}

// Compile compiles one expression, from the cache when it was compiled before. The error says
// what CEL found wrong.
func Compile(expr string) (cel.Program, error) {
	programs.Lock()
	c, ok := programs.m[expr]
	programs.Unlock()
	if ok {
		return c.prg, c.err
	}
	c.prg, c.err = compile(expr)
	programs.Lock()
	if len(programs.m) >= maxCached {
		programs.m = map[string]compiled{}
	}
	programs.m[expr] = c
	programs.Unlock()
	return c.prg, c.err
}

func compile(expr string) (cel.Program, error) {
	e, err := celEnv()
	if err != nil {
		return nil, err
	}
	ast, iss := e.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, fmt.Errorf("evaluates to %s, not bool", t)
	}
	return e.Program(ast, cel.CostLimit(costLimit), cel.InterruptCheckFrequency(100))
}

// Problem is an entry's expression that does not compile.
type Problem struct {
	Index int    // in the list
	Field string // current, inProgress or failed
	Expr  string
	Err   error
}

func (p Problem) Error() string {
	return fmt.Sprintf("healthExpressions[%d].%s: %v", p.Index, p.Field, p.Err)
}

// Validate compiles every expression of list and returns those that do not compile.
func Validate(list []infrahubv1alpha1.HealthExpression) []Problem {
	var out []Problem
	for i, h := range list {
		for _, f := range fields(h) {
			if f.expr == "" {
				continue
			}
			if _, err := Compile(f.expr); err != nil {
				out = append(out, Problem{Index: i, Field: f.name, Expr: f.expr, Err: err})
			}
		}
	}
	return out
}

type field struct {
	name, expr string
	result     status.Status
}

// fields are an entry's expressions in the order they are evaluated: failed, current,
// inProgress; the first that is true decides.
func fields(h infrahubv1alpha1.HealthExpression) []field {
	return []field{
		{"failed", h.Failed, status.FailedStatus},
		{"current", h.Current, status.CurrentStatus},
		{"inProgress", h.InProgress, status.InProgressStatus},
	}
}

// Checks are the expressions of one spec.
type Checks struct {
	list []infrahubv1alpha1.HealthExpression
}

// For returns the checks of list (nil when it is empty: kstatus decides everything).
func For(list []infrahubv1alpha1.HealthExpression) *Checks {
	if len(list) == 0 {
		return nil
	}
	return &Checks{list: list}
}

// Evaluate judges obj with the entry of its apiVersion and kind; matched is false when there is
// none (kstatus decides). Failed is looked at first, then Current, then InProgress; when none
// is true the object is InProgress. An expression that cannot be evaluated (a field the object
// does not have yet) counts as not true, and its error is named in the message. An expression
// that does not compile makes the object Failed: it will not judge it until the spec changes.
// As in Flux, an object whose status.observedGeneration lags metadata.generation is InProgress
// without evaluating anything.
func (c *Checks) Evaluate(ctx context.Context, obj *unstructured.Unstructured) (st status.Status, msg string, matched bool) {
	if c == nil {
		return "", "", false
	}
	idx := -1
	for i, h := range c.list {
		if h.APIVersion == obj.GetAPIVersion() && h.Kind == obj.GetKind() {
			idx = i
			break
		}
	}
	if idx < 0 {
		return "", "", false
	}
	h := c.list[idx]
	if og, found, err := unstructured.NestedInt64(obj.Object, "status", "observedGeneration"); err == nil && found && og != obj.GetGeneration() {
		return status.InProgressStatus, fmt.Sprintf("status reports generation %d, the object is at %d", og, obj.GetGeneration()), true
	}
	vars := make(map[string]any, len(Variables))
	for _, v := range Variables {
		if x, ok := obj.Object[v]; ok && x != nil {
			vars[v] = x
		} else {
			vars[v] = map[string]any{}
		}
	}
	var notes []string
	for _, f := range fields(h) {
		if f.expr == "" {
			continue
		}
		prg, err := Compile(f.expr)
		if err != nil {
			return status.FailedStatus, Problem{Index: idx, Field: f.name, Expr: f.expr, Err: err}.Error(), true
		}
		out, _, err := prg.ContextEval(ctx, vars)
		if err != nil {
			notes = append(notes, fmt.Sprintf("healthExpressions[%d].%s: %v", idx, f.name, err))
			continue
		}
		b, ok := out.Value().(bool)
		if !ok {
			notes = append(notes, fmt.Sprintf("healthExpressions[%d].%s: evaluates to %s, not bool", idx, f.name, out.Type()))
			continue
		}
		if !b {
			continue
		}
		switch f.result {
		case status.FailedStatus:
			return f.result, fmt.Sprintf("healthExpressions[%d].failed is true: %s", idx, f.expr), true
		case status.CurrentStatus:
			return f.result, "", true
		}
		return f.result, fmt.Sprintf("healthExpressions[%d].inProgress is true", idx), true
	}
	msg = fmt.Sprintf("healthExpressions[%d].current is not true yet", idx)
	if len(notes) > 0 {
		msg += " (" + strings.Join(notes, "; ") + ")"
	}
	return status.InProgressStatus, msg, true
}

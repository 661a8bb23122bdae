package lifecycle

import "context"

// Step is one step of a pass over P (a *Pass, or a controller's own pass that embeds one): it
// acts and says so (Wrote, RequeueAfter, Done), or finds nothing to do and says Continue.
type Step[P any] func(ctx context.Context, p P) (Result, error)

// Steps runs steps in order until one returns anything but Continue, or an error; that is the
// pass's result. All of them continuing is Done. So a controller reads as its list of steps
// (Cluster API's phases), and a step that wrote ends the pass with its write.
func Steps[P any](ctx context.Context, p P, steps ...Step[P]) (Result, error) {
	for _, step := range steps {
		res, err := step(ctx, p)
		if err != nil || !res.IsContinue() {
			return res, err
		}
	}
	return Done(), nil
}

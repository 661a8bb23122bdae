package metal

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/metalhub/metalhub/internal/bmc"
)

// inventoryJobs runs Redfish inventory walks outside the passes that need them. A pass waits for
// its server's walk only as long as its own deadline allows; a slow walk goes on and the next
// pass picks its result up, so state and power are reported at once whatever the walk does.
type inventoryJobs struct {
	// timeout bounds one walk as a whole (each request is bounded on its own by the pool).
	timeout time.Duration

	mu   sync.Mutex
	jobs map[types.UID]*inventoryJob
}

type inventoryJob struct {
	done chan struct{}
	inv  *bmc.Inventory
	err  error
}

func newInventoryJobs(timeout time.Duration) *inventoryJobs {
	return &inventoryJobs{timeout: timeout, jobs: map[types.UID]*inventoryJob{}}
}

// wait returns the server's inventory once a walk (started now if none runs) has it, or the walk's
// error, or (nil, nil) when ctx ends first and the walk goes on. A finished walk is handed out
// once: the status it fills is how later passes know it is done.
func (j *inventoryJobs) wait(ctx context.Context, uid types.UID, walk func(context.Context) (*bmc.Inventory, error)) (*bmc.Inventory, error) {
	j.mu.Lock()
	job, ok := j.jobs[uid]
	if !ok {
		job = &inventoryJob{done: make(chan struct{})}
		j.jobs[uid] = job
		go func() {
			wctx, cancel := context.WithTimeout(context.Background(), j.timeout)
			defer cancel()
			job.inv, job.err = walk(wctx)
			close(job.done)
		}()
	}
	j.mu.Unlock()
	select {
	case <-job.done:
		j.mu.Lock()
		if j.jobs[uid] == job {
			delete(j.jobs, uid)
		}
		j.mu.Unlock()
		return job.inv, job.err
	case <-ctx.Done():
		return nil, nil
	}
}

// forget drops a server's walk (the server is gone).
func (j *inventoryJobs) forget(uid types.UID) {
	j.mu.Lock()
	delete(j.jobs, uid)
	j.mu.Unlock()
}

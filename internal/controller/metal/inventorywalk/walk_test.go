package inventorywalk

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
)

type refusingFence struct{}

func (refusingFence) Hold(time.Time) (func(), <-chan struct{}, error) {
	return nil, nil, errors.New("shard given up")
}

// An inventory walk runs beside the passes, past the pass that started it, and still holds that
// pass's shard fence: a replica partitioned from the API server sends no inventory request after
// the new owner may act (cmd/metalhub TestPartitionedShardOwnerEndsItsRequestsFirst saw one).
func TestInventoryWalkKeepsThePassFence(t *testing.T) {
	j := NewWalks(time.Minute)
	ctx, cancel := context.WithCancel(bmc.WithFence(context.Background(), refusingFence{}))
	cancel() // the pass is over before the walk starts its requests
	got := make(chan bmc.Fence, 1)
	j.Wait(ctx, "uid", func(wctx context.Context) (*bmc.Inventory, error) {
		got <- bmc.FenceOf(wctx)
		if wctx.Err() != nil {
			t.Errorf("the walk's context ended with the pass: %v", wctx.Err())
		}
		return nil, nil
	})
	if f := <-got; f == nil {
		t.Fatal("the inventory walk runs without the pass's fence")
	}
}

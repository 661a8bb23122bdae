// Package inventorywalk runs the Redfish inventory walks of servers beside the Server
// controller's passes, and fills a Server's status from what a walk found. It never writes an
// object.
package inventorywalk

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
)

// Walks runs Redfish inventory walks outside the passes that need them. A pass waits for
// its server's walk only as long as its own deadline allows; a slow walk goes on and the next
// pass picks its result up, so state and power are reported at once whatever the walk does.
type Walks struct {
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

func NewWalks(timeout time.Duration) *Walks {
	return &Walks{timeout: timeout, jobs: map[types.UID]*inventoryJob{}}
}

// Wait returns the server's inventory once a walk (started now if none runs) has it, or the walk's
// error, or (nil, nil) when ctx ends first and the walk goes on. A finished walk is handed out
// once: the status it fills is how later passes know it is done.
func (j *Walks) Wait(ctx context.Context, uid types.UID, walk func(context.Context) (*bmc.Inventory, error)) (*bmc.Inventory, error) {
	j.mu.Lock()
	job, ok := j.jobs[uid]
	if !ok {
		job = &inventoryJob{done: make(chan struct{})}
		j.jobs[uid] = job
		// The walk outlives the pass but keeps what its context carries: above all the shard's
		// fence, so that a replica that lost its shard sends no inventory request after the new
		// owner may act.
		walkCtx := context.WithoutCancel(ctx)
		go func() {
			wctx, cancel := context.WithTimeout(walkCtx, j.timeout)
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

// Forget drops a server's walk (the server is gone).
func (j *Walks) Forget(uid types.UID) {
	j.mu.Lock()
	delete(j.jobs, uid)
	j.mu.Unlock()
}

// Apply fills the hardware fields from Redfish where the discovery report has not
// already (the probe sees more than the BMC: IPs, LLDP neighbours).
func Apply(st *metalv1alpha1.ServerStatus, inv *bmc.Inventory) {
	st.Manufacturer, st.Model, st.SKU = inv.System.Manufacturer, inv.System.Model, inv.System.SKU
	st.SerialNumber, st.BIOSVersion = inv.System.SerialNumber, inv.System.BIOSVersion
	if led := metalv1alpha1.IndicatorLED(inv.System.IndicatorLED); led == "Lit" || led == "Blinking" || led == "Off" || led == "Unknown" {
		st.IndicatorLED = led
	}
	if inv.Memory.TotalMiB > 0 {
		q := resource.NewQuantity(inv.Memory.TotalMiB*1024*1024, resource.BinarySI)
		st.TotalSystemMemory = q
	}
	if len(st.Processors) == 0 {
		for _, c := range inv.Processors {
			st.Processors = append(st.Processors, metalv1alpha1.Processor{
				ID: c.ID, Manufacturer: c.Manufacturer, Model: c.Model, Architecture: c.Architecture,
				MaxSpeedMHz: int32(c.MaxSpeedMHz), TotalCores: int32(c.Cores), TotalThreads: int32(c.Threads),
			})
		}
	}
	if len(st.NetworkInterfaces) == 0 {
		for _, n := range inv.NICs {
			if n.MACAddress == "" {
				continue
			}
			ni := metalv1alpha1.NetworkInterface{Name: firstNonEmpty(n.Name, n.ID), MACAddress: n.MACAddress, IPs: append(append([]string{}, n.IPv4...), n.IPv6...)}
			if len(ni.IPs) > 0 {
				ni.IP = ni.IPs[0]
			}
			if n.Carrier {
				ni.CarrierStatus = "Up"
			} else if n.LinkStatus != "" {
				ni.CarrierStatus = n.LinkStatus
			}
			st.NetworkInterfaces = append(st.NetworkInterfaces, ni)
		}
	}
	if len(st.Storages) == 0 && (len(inv.Storage.Drives) > 0 || len(inv.Storage.Volumes) > 0) {
		stor := metalv1alpha1.Storage{Name: firstNonEmpty(inv.Storage.Source, "Storage")}
		for _, d := range inv.Storage.Drives {
			stor.Drives = append(stor.Drives, metalv1alpha1.StorageDrive{
				Name: firstNonEmpty(d.Name, d.ID), Model: d.Model, Vendor: d.Manufacturer, MediaType: d.MediaType,
				Type: d.Protocol, Capacity: resource.NewQuantity(d.CapacityBytes, resource.BinarySI),
			})
		}
		for _, v := range inv.Storage.Volumes {
			stor.Volumes = append(stor.Volumes, metalv1alpha1.StorageVolume{
				Name: firstNonEmpty(v.Name, v.ID), RAIDType: v.RAIDType, Capacity: resource.NewQuantity(v.CapacityBytes, resource.BinarySI),
			})
		}
		st.Storages = []metalv1alpha1.Storage{stor}
	}
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

package erase

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// sgIORequest is SG_IO (scsi/sg.h), which the sd driver takes on its block devices.
	sgIORequest = 0x2285
	// sgTimeoutMS bounds one command where its caller gives no bound: the sanitize commands
	// return once started (IMMED, or ATA's own), so none runs long; SECURITY ERASE UNIT does,
	// and says for how long.
	sgTimeoutMS = 60_000
	// sgSenseLen is the most sense data the kernel keeps (SCSI_SENSE_BUFFERSIZE).
	sgSenseLen = 96

	scsiStatusGood           = 0x00
	scsiStatusCheckCondition = 0x02
	sgDriverSense            = 0x08 // DRIVER_SENSE: sense data came back
)

// sgExec sends SCSI commands to the disk f is opened on, through the kernel's SG_IO.
func sgExec(f *os.File) scsiExec {
	return func(cdb []byte, dir int, data []byte, timeout time.Duration) ([]byte, error) {
		if len(cdb) == 0 || (dir == sgDxferNone) != (len(data) == 0) {
			return nil, errors.New("SG_IO: transfer direction and buffer disagree")
		}
		ms := uint32(sgTimeoutMS)
		if timeout > 0 {
			ms = uint32(min(timeout.Milliseconds(), math.MaxUint32))
		}
		sense := make([]byte, sgSenseLen)
		h := sgIOHdr{
			InterfaceID:    'S',
			DxferDirection: int32(dir),
			CmdLen:         uint8(len(cdb)),
			MxSbLen:        uint8(len(sense)),
			Cmdp:           unsafe.Pointer(&cdb[0]),
			Sbp:            unsafe.Pointer(&sense[0]),
			Timeout:        ms,
		}
		if len(data) > 0 {
			h.Dxferp, h.DxferLen = unsafe.Pointer(&data[0]), uint32(len(data))
		}
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), sgIORequest, uintptr(unsafe.Pointer(&h)))
		runtime.KeepAlive(cdb)
		runtime.KeepAlive(data)
		runtime.KeepAlive(sense)
		if errno != 0 {
			return nil, fmt.Errorf("SG_IO: %w", errno)
		}
		if h.HostStatus != 0 || h.DriverStatus&^sgDriverSense != 0 {
			return nil, fmt.Errorf("SG_IO: host status %#x, driver status %#x", h.HostStatus, h.DriverStatus)
		}
		switch h.Status {
		case scsiStatusGood:
			return nil, nil
		case scsiStatusCheckCondition:
			sense = sense[:min(int(h.SbLenWr), len(sense))]
			return sense, checkConditionError(sense)
		}
		return nil, fmt.Errorf("SCSI status %#02x", h.Status)
	}
}

package redfish

import (
	"strconv"

	"github.com/metalhub/metalhub/internal/emulator/redfish/faults"
)

// Faults is the per-BMC fault menu; each field mimics something real BMCs do.
// Set it with BMC.SetFaults or PUT /emulator/bmcs/{i}/faults.
type Faults = faults.Faults

// Duration is a time.Duration that reads "250ms" or nanoseconds from JSON.
type Duration = faults.Duration

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

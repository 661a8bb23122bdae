// Package faults is the emulated BMCs' fault menu: the per-BMC switches that make a BMC
// misbehave as real ones do (latency, error statuses, hangs, missing services, slow updates and
// erases), settable from tests and the control API. It is data only and must not import the
// emulator.
package faults

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Faults is the per-BMC fault menu; each field mimics something real BMCs do.
// Set it with BMC.SetFaults or PUT /emulator/bmcs/{i}/faults.
type Faults struct {
	// Latency delays every answer.
	Latency Duration `json:"latency,omitempty"`
	// Status answers every request with this HTTP status (e.g. 503).
	Status int `json:"status,omitempty"`
	// Unauthorized rejects every authenticated request and login with 401,
	// as after a password change on the BMC.
	Unauthorized bool `json:"unauthorized,omitempty"`
	// Hang accepts requests and never answers.
	Hang bool `json:"hang,omitempty"`
	// DropConnection closes the TCP connection without answering.
	DropConnection bool `json:"dropConnection,omitempty"`
	// CloseConnections answers with Connection: close (no keep-alive).
	CloseConnections bool `json:"closeConnections,omitempty"`
	// NoSessionService removes SessionService: only Basic auth works.
	NoSessionService bool `json:"noSessionService,omitempty"`
	// BrokenCollections answers a status for a collection and everything
	// below it, by collection name: {"Memory": 404, "Processors": 501,
	// "Storage": 500, "EthernetInterfaces": 500, "SimpleStorage": 501}.
	BrokenCollections map[string]int `json:"brokenCollections,omitempty"`
	// StrictETag answers 412 to a PATCH without If-Match (a mismatching
	// If-Match always gets 412).
	StrictETag bool `json:"strictETag,omitempty"`
	// IgnoreGracefulShutdown accepts GracefulShutdown/GracefulRestart but
	// never acts on them, like a host whose OS ignores ACPI.
	IgnoreGracefulShutdown bool `json:"ignoreGracefulShutdown,omitempty"`
	// FailPowerTransitions starts every power transition and lets it fail: the
	// system shows PoweringOn/PoweringOff, then falls back to where it was (a
	// PSU fault, a failed POST). The reset is answered and recorded as usual.
	FailPowerTransitions bool `json:"failPowerTransitions,omitempty"`
	// BootReadbackContinuous reads a Once override back as Continuous.
	BootReadbackContinuous bool `json:"bootReadbackContinuous,omitempty"`
	// ErrorAfterEffect carries out every action (a system's or the manager's Reset, a
	// SimpleUpdate, a SecureErase, a volume's Initialize or DELETE, a GenerateCSR or
	// ReplaceCertificate) and records it as usual,
	// then answers this HTTP status (e.g. 500, 502) instead of success: a BMC that fails after
	// acting, or a proxy whose upstream answer was lost. Other requests are served.
	ErrorAfterEffect int `json:"errorAfterEffect,omitempty"`
	// NoVirtualMedia removes the VirtualMedia collections (a BMC without the licence for it).
	NoVirtualMedia bool `json:"noVirtualMedia,omitempty"`
	// NoVolumes makes the storage controller one that makes no volumes (an HBA, or a RAID
	// controller without Redfish volume support): no SupportedRAIDTypes, POST refused.
	NoVolumes bool `json:"noVolumes,omitempty"`
	// NoSecureErase stops offering #Drive.SecureErase on the drives (a controller or firmware
	// that cannot erase them: the OS must): no Actions on a Drive, a POST to the action's URI
	// refused with 400 ActionNotSupported.
	NoSecureErase bool `json:"noSecureErase,omitempty"`
	// NoVolumeInitialize stops offering #Volume.Initialize on the volumes, as controllers that
	// make and delete volumes but cannot initialize one: a POST to it is refused with 400
	// ActionNotSupported. NoVolumes takes Initialize away as well.
	NoVolumeInitialize bool `json:"noVolumeInitialize,omitempty"`
	// EraseDuration is how long a drive's SecureErase or a volume's Initialize task runs
	// (default 500ms; real ones take minutes to hours, which a test need not wait for).
	EraseDuration Duration `json:"eraseDuration,omitempty"`
	// EraseFails ends every SecureErase and Initialize task begun while it is set in Exception
	// (TaskStatus Critical), erasing nothing: the drive refused the sanitize command.
	EraseFails bool `json:"eraseFails,omitempty"`
	// NoHTTPBoot stops advertising UefiHttp and HttpBootUri (older firmware); a UefiHttp
	// override is refused with 400.
	NoHTTPBoot bool `json:"noHttpBoot,omitempty"`
	// MediaMountFails refuses InsertMedia with 400, as a BMC does that cannot reach the image.
	MediaMountFails bool `json:"mediaMountFails,omitempty"`
	// UpdateDuration is how long a SimpleUpdate task runs (default 2s).
	UpdateDuration Duration `json:"updateDuration,omitempty"`
	// UpdateFails ends every SimpleUpdate task begun while it is set in Exception.
	UpdateFails bool `json:"updateFails,omitempty"`
	// UpdateChangesNothing completes every update task begun while it is set and installs
	// nothing: the version read back stays what it was, as a vendor's flash that silently
	// rejects an image does.
	UpdateChangesNothing bool `json:"updateChangesNothing,omitempty"`
	// TasksWithoutPayload serves update tasks without Payload and without the image in their
	// messages, as many vendors' tasks are: nothing in a task says which image it carries. An
	// erase or initialize task begun while it is set has no Payload either (its Name still
	// names the drive or volume).
	TasksWithoutPayload bool `json:"tasksWithoutPayload,omitempty"`
	// TaskPageSize pages the TaskService's Tasks collection (Members@odata.nextLink, $skip);
	// 0 lists every task on one page.
	TaskPageSize int `json:"taskPageSize,omitempty"`
	// TasksNewestFirst lists tasks newest first (the default is oldest first).
	TasksNewestFirst bool `json:"tasksNewestFirst,omitempty"`
	// UpdateAnswersWithoutTask answers an accepted update 200 with no task (no Location, no
	// task in the body); the update runs all the same, its task listed in the TaskService.
	UpdateAnswersWithoutTask bool `json:"updateAnswersWithoutTask,omitempty"`
	// NoSimpleUpdate stops offering UpdateService.SimpleUpdate: images must be pushed
	// (MultipartHttpPushUri), as on BMCs that cannot fetch them.
	NoSimpleUpdate bool `json:"noSimpleUpdate,omitempty"`
	// UpdateNeedsReset makes a BMC image wait for a manager reset (Manager.Reset) to take
	// effect, as some BMCs stage theirs, instead of the BMC restarting by itself.
	UpdateNeedsReset bool `json:"updateNeedsReset,omitempty"`
	// BMCRebootDuration is how long the BMC answers nothing after a BMC update (default 5s).
	BMCRebootDuration Duration `json:"bmcRebootDuration,omitempty"`
	// NoLogServices removes the systems' LogServices (a BMC that serves no event log there).
	NoLogServices bool `json:"noLogServices,omitempty"`
	// NoEventService removes the EventService: no subscriptions, no events.
	NoEventService bool `json:"noEventService,omitempty"`
	// NoCertificateService removes the CertificateService and the manager's HTTPS certificate
	// collection (404), as on older BMCs: the certificate can only be changed out of band.
	NoCertificateService bool `json:"noCertificateService,omitempty"`
	// GenerateCSRFailures answers that many GenerateCSR requests with 500, making nothing, after
	// each setting of the faults (1: the first one fails, the next succeeds).
	GenerateCSRFailures int `json:"generateCsrFailures,omitempty"`
	// CertificateNeedsReset makes a ReplaceCertificate answer 200 and install the certificate for
	// the BMC's next reset (Manager.Reset, or its restart after an update), as BMCs whose web
	// server only reads its certificate when it starts: until then the listener serves, and the
	// Certificate resource shows, the old one.
	CertificateNeedsReset bool `json:"certificateNeedsReset,omitempty"`
	// NoLegacyTelemetry removes the chassis' Power and Thermal resources (firmware that dropped
	// the deprecated ones); NoTelemetrySubsystems removes PowerSubsystem, ThermalSubsystem and
	// Sensors (older firmware). Both leave a chassis without readings.
	NoLegacyTelemetry     bool `json:"noLegacyTelemetry,omitempty"`
	NoTelemetrySubsystems bool `json:"noTelemetrySubsystems,omitempty"`
}

// Duration is a time.Duration that reads "250ms" or nanoseconds from JSON.
type Duration time.Duration

// MarshalJSON writes the duration as a string like "250ms".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON accepts "250ms" or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("parse duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("duration must be a string like \"250ms\" or nanoseconds: %w", err)
	}
	*d = Duration(n)
	return nil
}

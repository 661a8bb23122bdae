// Package sel is one emulated system's System Event Log: a bounded ring of entries that wraps
// when full, the health it drives, and its Redfish LogService (the SEL, its paged Entries and
// ClearLog).
//
// It holds no BMC state beyond the log; recording, ETags and event delivery are the caller's.
// It must not import the emulator package.
package sel

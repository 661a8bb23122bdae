// Package version holds the controllers that upgrade firmware: BIOSVersion (a server's BIOS,
// installed by a restart the Server carries out) and BMCVersion (a BMC's own firmware, activated
// by the BMC's reset). Each pass reads the record, does the one thing its phase asks through
// work and flash, writes at most once, and rebuilds status from the record. It must not import
// settings, rollout or the firmware assembly.
package version

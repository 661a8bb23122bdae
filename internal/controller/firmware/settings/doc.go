// Package settings holds the controllers that apply settings flows: BIOSSettings (a server's BIOS
// attributes, staged and installed by one restart per step) and BMCSettings (a BMC's manager
// attributes, in effect at once), and the flows they share: steps in priority order, variables
// resolved (Secrets through secretvalue), differences read against what is in effect. It must
// not import version, rollout or the firmware assembly.
package settings

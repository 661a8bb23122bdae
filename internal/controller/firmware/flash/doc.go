// Package flash sends a firmware image to a BMC exactly once and follows it: the claim written
// before the request, SimpleUpdate or a pushed image (MultipartHttpPushUri), a lost answer settled
// from the BMC's task list and firmware inventory, a busy BMC waited for, the task followed to
// its end; and the upgrade metrics. A Flasher says how one kind (BIOS or BMC) is flashed. It must
// not import the controllers (version, settings, rollout) nor the firmware assembly.
package flash

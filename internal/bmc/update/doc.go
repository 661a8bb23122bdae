// Package update installs firmware through a BMC's UpdateService (SimpleUpdate, where the BMC
// fetches the image, or a multipart push) and follows the tasks that carry updates out
// (TaskService): the firmware inventory, the update methods a BMC offers, one task's state and
// the list of all of them.
//
// It works over a wire.Conn the bmc facade passes; it must not import package bmc.
package update

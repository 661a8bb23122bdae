// Package update is one emulated BMC's UpdateService and TaskService: firmware updates by
// SimpleUpdate or a multipart push, each run as a task that completes, fails or installs
// nothing as the fault menu says; a BMC image reboots the BMC (or waits for its reset), a BIOS
// image is staged for the system's next reset. The TaskService runs other work as well (Job:
// a drive's secure erase, a volume's initialization), listed and served beside the updates.
//
// What it needs of its BMC comes through Host; it must not import the emulator package.
package update

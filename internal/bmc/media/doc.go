// Package media drives a system's virtual media: the system's own devices, else those of the
// manager that manages it alone, to list, insert an ISO into and eject.
//
// It works over a wire.Conn the bmc facade passes; it must not import package bmc.
package media

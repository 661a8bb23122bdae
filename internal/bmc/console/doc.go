// Package console says how a system's serial console is reached through its BMC: the system's
// SerialConsole where it has one, else its manager's SSH service.
//
// It works over a wire.Conn the bmc facade passes; it must not import package bmc.
package console

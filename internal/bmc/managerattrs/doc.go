// Package managerattrs reads and sets a BMC's own attributes: the Attributes resource under its
// first manager (OEM settings such as a Dell iDRAC's), each attribute checked against what the
// BMC has before it is sent.
//
// It works over a wire.Conn the bmc facade passes; it must not import package bmc.
package managerattrs

// Package accounts manages a BMC's user accounts through its AccountService: listing them,
// creating or updating one (by POST, or by filling a free slot on BMCs with fixed slots) and
// removing one.
//
// It works over a wire.Conn the bmc facade passes; it must not import package bmc.
package accounts

// Package bios drives a system's firmware settings through Redfish: its Bios resource (the
// attributes in effect, those staged in the settings object, the apply times it supports) and
// its boot order (BootOptions and Boot.BootOrder).
//
// It works over a wire.Conn the bmc facade passes; it must not import package bmc.
package bios

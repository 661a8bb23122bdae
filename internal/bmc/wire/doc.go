// Package wire holds what the bmc facade and its per-service packages (logs, update,
// accounts, certs, events, media, console) share about talking Redfish to one BMC: the typed Error
// and its stable Reasons, the classification of transport and HTTP failures, the service
// root's links, JSON reads through gofish, and Conn, the view of a connection a service
// package works through.
//
// It must not import package bmc or any service package: they all import it.
package wire

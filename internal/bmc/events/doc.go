// Package events manages a BMC's Redfish event subscriptions (EventService: read it, subscribe
// in the form the service takes, list, unsubscribe) and parses the events BMCs POST to a
// subscriber.
//
// It works over a wire.Conn the bmc facade passes; it must not import package bmc.
package events

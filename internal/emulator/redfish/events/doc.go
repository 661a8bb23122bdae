// Package events is one emulated BMC's EventService: subscriptions created and deleted as
// strictly as BMCs do, a bounded queue and a worker per subscription that POSTs events with
// retries, and the log of what became of each event.
//
// What it needs of its BMC (whether it is down, how to retry, where to record) comes through
// Host; it must not import the emulator package.
package events

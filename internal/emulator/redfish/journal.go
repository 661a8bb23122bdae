package redfish

import "github.com/metalhub/metalhub/internal/emulator/redfish/journal"

// RequestSpan is one request a BMC served (or dropped): when it arrived and when its handler
// returned, and who sent it.
type RequestSpan = journal.RequestSpan

// JournalRequests starts (or stops) recording the spans of the requests this BMC serves.
func (b *BMC) JournalRequests(on bool) { b.journal.On.Store(on) }

// RequestSpans are the spans recorded so far, in the order the requests ended.
func (b *BMC) RequestSpans() []RequestSpan { return b.journal.Spans() }

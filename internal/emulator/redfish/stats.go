package redfish

import (
	"fmt"
	"time"
)

// TotalStats sums the counters of every BMC and keeps the largest of their maxima, then starts
// each BMC's maxima over: the next call reports the peaks since this one. Benchmarks read the
// fleet with it, phase by phase.
func (e *Emulator) TotalStats() Stats {
	var s Stats
	for _, b := range e.bmcs {
		s = s.Add(b.Stats())
		b.ResetMaxima()
	}
	return s
}

// Add is s and o together: counters and gauges summed, maxima the larger.
func (s Stats) Add(o Stats) Stats {
	s.Requests += o.Requests
	s.InFlight += o.InFlight
	s.Queued += o.Queued
	s.Waited += o.Waited
	s.QueueWait += o.QueueWait
	s.SessionsCreated += o.SessionsCreated
	s.SessionsDeleted += o.SessionsDeleted
	s.ActiveSessions += o.ActiveSessions
	s.Unauthorized += o.Unauthorized
	return s.Peaks(o)
}

// Since is what happened between before and s: counters as differences; gauges and maxima as
// read in s (the maxima were started over at before's read).
func (s Stats) Since(before Stats) Stats {
	s.Requests -= before.Requests
	s.Waited -= before.Waited
	s.QueueWait -= before.QueueWait
	s.SessionsCreated -= before.SessionsCreated
	s.SessionsDeleted -= before.SessionsDeleted
	s.Unauthorized -= before.Unauthorized
	return s
}

// Peaks keeps the larger maxima of s and o: a phase read in two parts.
func (s Stats) Peaks(o Stats) Stats {
	s.MaxInFlight = max(s.MaxInFlight, o.MaxInFlight)
	s.MaxQueued = max(s.MaxQueued, o.MaxQueued)
	s.MaxQueueWait = max(s.MaxQueueWait, o.MaxQueueWait)
	return s
}

// QueueSummary says how the request slots held up: the requests that waited for one, their
// mean and longest wait, and the most served and queued at once at one BMC.
func (s Stats) QueueSummary() string {
	mean := time.Duration(0)
	if s.Waited > 0 {
		mean = s.QueueWait / time.Duration(s.Waited)
	}
	return fmt.Sprintf("%d of %d requests waited for a slot (mean %s, max %s), at most %d served and %d queued at once at one BMC",
		s.Waited, s.Requests, mean.Round(time.Millisecond), s.MaxQueueWait.Round(time.Millisecond), s.MaxInFlight, s.MaxQueued)
}

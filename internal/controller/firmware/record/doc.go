// Package record is the firmware objects' durable bookkeeping: the record annotation that says
// where an upgrade or a settings flow stands (its phases, its step, its attempts), how it parses,
// and the state metrics count from it. Every pass reads it and writes at most it, so a crash, a
// wiped status or a new leader resumes where the last write left off. It acts on nothing: no
// client, no BMC, no controller.
package record

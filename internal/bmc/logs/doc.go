// Package logs reads a system's hardware event log (SEL, HPE's IML, the EventLog of OpenBMC):
// it finds the log among the system's (or its sole manager's) LogServices, reads the entries
// newer than a cursor across the vendors' paging and ordering, and normalizes their severity
// and time stamps.
//
// It works over a gofish client the bmc facade passes; where each system's log is remembered
// and whether the system is proven is the facade's business. It must not import package bmc.
package logs

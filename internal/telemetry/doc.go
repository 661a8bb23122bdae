// Package telemetry exports the fleet's Redfish telemetry as Prometheus gauges, what operations
// teams ran redfish-exporter beside the operator for: each server's power draw, temperatures,
// fans, power supply health and memory and processor health rollups.
//
// A Collector (a manager Runnable, never a reconcile worker) reads every Server at an interval
// through the shared BMC pool: only Servers with an identity to prove (each read proves the
// system is the Server's machine, bmc.Expect), only those of the replica's shards, one server of
// a BMC at a time, a bounded number of BMCs at once, each read under a timeout, and a BMC the
// pool reports busy (breaker open, slots taken by reconciles) skipped for the round; while
// the manager's lifecycle work goes on (Collector.Yield: claims binding, the controllers'
// writes queueing) no read starts at all. Metrics
// holds each server's last good reading and exports it with bounded cardinality: a label for the
// server, normalised sensor names (lower snake case), at most MaxSensorsPerServer sensor series
// per server; the series of a server that is gone go with the next round. It also lends each
// server's last reading, summed up (power, hottest sensor, failed supplies and fans), to a view
// in the same process through latest.Source, so that the view never reads a BMC itself.
package telemetry

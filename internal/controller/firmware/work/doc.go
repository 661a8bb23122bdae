// Package work is what every firmware controller's pass runs on: the controllers' Options; the
// Actor (events, options, clock) and the Work of one pass (its target, record and maintenance),
// with the steps a per-server pass begins with and the watches every kind's controller begins
// with; reaching the box proven to be it; the restart asked, exactly once, through the Server's
// operation annotation; ServerMaintenance taken and handed back; and the finalizer let go only
// when nothing is under way. It must not import the controllers (version, settings, rollout) nor
// the firmware assembly.
package work

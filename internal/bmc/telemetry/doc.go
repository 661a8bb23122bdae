// Package telemetry reads a system's chassis telemetry through its BMC: power draw, the power
// supplies' health, temperatures, fans, and the memory and processor health rollups, as plain Go
// values. Real BMCs serve them in the legacy Power and Thermal resources of a chassis (deprecated,
// still the most common), in the newer PowerSubsystem, ThermalSubsystem and Sensors, or both;
// each part is read from the legacy resource where the chassis links it (two requests for
// everything, where the Sensors collection costs one per sensor), else from the newer one. A part
// the BMC does not serve is simply absent; one it fails to serve is absent and named in
// Telemetry.Failed.
//
// It works over a wire.Conn the bmc facade passes; it must not import package bmc.
package telemetry

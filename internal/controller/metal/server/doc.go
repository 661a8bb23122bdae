// Package server holds the Server controller: the lifecycle of one bare-metal server through
// its BMC (Initial, Discovery, Available, Reserved, Maintenance, Error, deletion), one file per
// concern of its steps. It owns the Server's power and boot, the discovery round, identity
// proofs before action, inventory, hardware health and one-off operations. It must not bind
// claims (package claim) nor act on a BMC as a whole (package bmccontroller); what it shares with
// them lives in the packages below it, never here.
package server

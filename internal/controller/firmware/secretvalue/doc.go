// Package secretvalue holds the values of settings that may come from Secrets: a value that
// never prints as itself (Value), the attributes to send built from them (Changes), the BMC's
// answers stripped when a request carried one (RedactBMC, WithoutBMCWords), and the one
// namespace firmware Secrets may be read from (RefAllowed). It reads no Secret itself and knows
// no controller.
package secretvalue

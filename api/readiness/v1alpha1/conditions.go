package v1alpha1

// ConditionNetworkReady is the condition the wiring controller sets on a Server named by
// ServerWirings: True when every wiring naming it matches its discovered NICs, False (with the
// reason of the gravest mismatch) when one does not or the Server has no discovered NICs yet. The
// reference operator's name, so that ServerReadinessRules written for it gate claims unchanged.
// It goes when the last wiring naming the server does.
const ConditionNetworkReady = "NetworkReady"

// ConditionReady on a ServerWiring says whether its comparison holds and, when not, why.
const ConditionReady = "Ready"

// Reasons of a mismatch (status.mismatches[].reason) and of the NetworkReady and Ready
// conditions. The mismatch reasons are the reference's tokens where it has one.
const (
	// ReasonMatch: every expected interface was seen as expected.
	ReasonMatch = "Match"
	// ReasonNoExpectedSpec: the wiring lists no interface; nothing to check, so ready.
	ReasonNoExpectedSpec = "NoExpectedSpec"
	// ReasonInterfaceMissing: no discovered NIC has the expected MAC address (or the server has
	// not been discovered yet).
	ReasonInterfaceMissing = "InterfaceMissing"
	// ReasonCarrierDown: the NIC's link is expected up and is not.
	ReasonCarrierDown = "CarrierDown"
	// ReasonCarrierMismatch: the NIC's link state differs from another expected state.
	ReasonCarrierMismatch = "CarrierMismatch"
	// ReasonNeighborMismatch: an expected LLDP neighbour is not seen on the NIC.
	ReasonNeighborMismatch = "NeighborMismatch"
	// ReasonServerNotFound: the Server the wiring names does not exist; nothing is compared.
	ReasonServerNotFound = "ServerNotFound"
)

// Event reasons of the wiring controller (on the ServerWiring).
const (
	// ReasonWiringVerified: the wiring became ready.
	ReasonWiringVerified = "WiringVerified"
	// ReasonWiringMismatch: the wiring stopped being ready, or its mismatches changed.
	ReasonWiringMismatch = "WiringMismatch"
)

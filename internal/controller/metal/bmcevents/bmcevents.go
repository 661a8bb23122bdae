// Package bmcevents names metalhub's Redfish event subscriptions: where BMCs deliver them and
// the Context that says which BMC object a delivery is for. The BMC controller keeps the
// subscriptions; the receiver beside the Server controller reads them.
//
// It holds names only: it makes no subscription, receives no delivery and imports no metalhub
// package, so that both sides can share it without importing each other.
package bmcevents

import "strings"

const (
	// EventsPath is where the manager receives the Redfish events BMCs deliver to their
	// subscription (on the discovery registry's listener).
	EventsPath = "/v1/events"
	// contextPrefix starts the Context of metalhub's subscriptions; the BMC's name follows.
	contextPrefix = "metalhub:"
)

// SubscriptionContext is the Context of the subscription metalhub keeps on a BMC.
func SubscriptionContext(bmcName string) string { return contextPrefix + bmcName }

// BMCOf is the BMC a subscription Context names, false when it is not one of ours.
func BMCOf(context string) (string, bool) {
	name, ok := strings.CutPrefix(context, contextPrefix)
	return name, ok && name != ""
}

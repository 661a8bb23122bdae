// Package discovery is the contract between the Server controller and discovery: how a discovery
// round is started, how the probe agent proves who it is, and how the controller learns that
// fresh hardware data has arrived.
//
// A round: the Server controller, entering Discovery, creates a round id and a token, stores the
// token in the round's Secret (with the rendered ignition that starts metalprobe), points a
// ServerBootConfiguration at it and records the round id in RoundAnnotation. The registry accepts
// a report only with that token, writes the hardware into the Server's status and sets
// ReportedAnnotation to the round id. An annotation change passes the lifecycle predicate, so the
// Server is reconciled at once, and both survive a manager restart. The controller moves the
// Server to Available when Fresh reports true.
//
// It holds names, tokens and the ignition's rendering, not the round's steps: it writes no object,
// talks to no BMC and imports no metalhub package, so that the Server controller, the registry and
// the emulators share it without importing each other.
package discovery

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// RoundAnnotation on a Server is the id of its current discovery round.
	RoundAnnotation = "discovery.metalhub.io/round"
	// ReportedAnnotation on a Server is the id of the round whose hardware report arrived.
	ReportedAnnotation = "discovery.metalhub.io/reported"
	// ServerLabel on a round's Secret and ServerBootConfiguration names the Server.
	ServerLabel = "discovery.metalhub.io/server"
	// RoundLabel on a round's Secret names the round.
	RoundLabel = "discovery.metalhub.io/round"
	// PurposeLabel on a round's Secret is PurposeCleaning for a cleaning round: the discovery
	// image booted to erase the disks of a released server. Its token is refused for hardware
	// reports, a discovery round's for cleaning reports. Absent: a discovery round.
	PurposeLabel    = "discovery.metalhub.io/purpose"
	PurposeCleaning = "cleaning"
	// CleaningPolicyLabel on a cleaning round's Secret is the policy its ignition cleans by.
	CleaningPolicyLabel = "discovery.metalhub.io/cleaning-policy"
	// CleanedAnnotation on a Server is the id of the cleaning round whose report the registry
	// stored in the server's cleaning record.
	CleanedAnnotation = "discovery.metalhub.io/cleaned"
	// SystemUUIDLabel on a round's Secret and ServerBootConfiguration is the server's system
	// UUID (lower case), so a boot server finds a booting machine's configuration directly.
	SystemUUIDLabel = "discovery.metalhub.io/system-uuid"

	// TokenKey holds the round's bearer token in the round's Secret.
	TokenKey = "token"
	// IgnitionKey holds the rendered ignition in the round's Secret (the key the boot-operator reads).
	IgnitionKey = "ignition"
)

// ObjectName is the name of the Secret and ServerBootConfiguration of a Server's discovery.
func ObjectName(serverName string) string { return "discovery-" + serverName }

// NewRound returns a fresh round id and bearer token.
func NewRound() (round, token string, err error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("generating discovery token: %w", err)
	}
	return hex.EncodeToString(b[:6]), hex.EncodeToString(b[6:]), nil
}

// Cleaned reports whether the cleaning report of round has arrived.
func Cleaned(server client.Object, round string) bool {
	return round != "" && server.GetAnnotations()[CleanedAnnotation] == round
}

// Fresh reports whether the hardware report of the Server's current round has arrived.
func Fresh(server client.Object) bool {
	a := server.GetAnnotations()
	round := a[RoundAnnotation]
	return round != "" && a[ReportedAnnotation] == round
}

package registry

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/discovery"
	"github.com/metalhub/metalhub/internal/probe"
)

// unchanged fails unless the Server is exactly as before (same resourceVersion).
func unchanged(t *testing.T, before *metalv1alpha1.Server) {
	t.Helper()
	after := get(t, before.Name)
	if after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("server %s was written: annotations %v, status %+v", before.Name, after.Annotations, after.Status)
	}
}

func TestSpoofing(t *testing.T) {
	r := startRegistry(t, nil)
	victim := newServerInDiscovery(t, r, "spoof-victim", "11111111-2222-3333-4444-555555555555")
	other := newServerInDiscovery(t, r, "spoof-other", "66666666-7777-8888-9999-000000000000")
	uuid := victim.server.Spec.SystemUUID
	good := encode(t, sampleReport(uuid))
	big := sampleReport(uuid)
	for i := range 2000 {
		big.PCIDevices = append(big.PCIDevices, probe.PCIDevice{Address: fmt.Sprintf("0000:%02x:%02x.0", i/256, i%256), Vendor: "8086", Device: "1234", Class: "020000"})
	}
	bad := sampleReport(uuid)
	bad.NICs[0].MAC = "not-a-mac"

	tests := []struct {
		name   string
		auth   string
		body   []byte
		code   int
		result string
	}{
		{"wrong token", "Bearer " + strings.Repeat("0", 36), good, http.StatusUnauthorized, resultUnauthorized},
		{"no token", "", good, http.StatusUnauthorized, resultUnauthorized},
		{"basic auth", "Basic YWRtaW46cGFzc3dvcmQ=", good, http.StatusUnauthorized, resultUnauthorized},
		{"another server's token", "Bearer " + other.token, good, http.StatusUnauthorized, resultUnauthorized},
		{"oversized body", "Bearer " + victim.token, encode(t, big), http.StatusRequestEntityTooLarge, resultTooLarge},
		{"oversized chunked body", "Bearer " + victim.token, nil, http.StatusRequestEntityTooLarge, resultTooLarge},
		{"malformed JSON", "Bearer " + victim.token, []byte(`{"version": 1, "systemUUID": `), http.StatusBadRequest, resultMalformed},
		{"two objects", "Bearer " + victim.token, append(append([]byte{}, good...), good...), http.StatusBadRequest, resultMalformed},
		{"invalid report", "Bearer " + victim.token, encode(t, bad), http.StatusBadRequest, resultMalformed},
		{"unknown UUID", "Bearer " + victim.token, encode(t, sampleReport("00000000-dead-beef-0000-000000000000")), http.StatusNotFound, resultUnknownServer},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, beforeOther := get(t, victim.server.Name), get(t, other.server.Name)
			n := count(tc.result)
			var code int
			var body string
			if tc.body == nil { // no Content-Length to refuse early: the limit must cut the stream
				code, body = postReader(t, r.url, tc.auth, io.MultiReader(bytes.NewReader(encode(t, big))))
			} else {
				code, body = post(t, r.url, tc.auth, tc.body)
			}
			if code != tc.code {
				t.Fatalf("got %d %s, want %d", code, body, tc.code)
			}
			if strings.Contains(body, victim.token) || strings.Contains(body, other.token) {
				t.Fatal("a token in the answer")
			}
			if count(tc.result)-n != 1 {
				t.Fatalf("%s not counted", tc.result)
			}
			unchanged(t, before)
			unchanged(t, beforeOther)
		})
	}

	t.Run("token of a previous round", func(t *testing.T) {
		// Round 1 is reported; the controller then starts round 2, and the agent of round 1
		// (still running on the server) reports again with its old token.
		if code, _ := post(t, r.url, "Bearer "+other.token, encode(t, sampleReport(other.server.Spec.SystemUUID))); code != http.StatusOK {
			t.Fatalf("round 1: %d", code)
		}
		round2 := startNewRound(t, other)
		before := get(t, other.server.Name)
		n := count(resultUnauthorized)
		if code, body := post(t, r.url, "Bearer "+other.token, encode(t, sampleReport(other.server.Spec.SystemUUID))); code != http.StatusUnauthorized {
			t.Fatalf("got %d %s", code, body)
		}
		unchanged(t, before)
		if discovery.Fresh(before) || count(resultUnauthorized)-n != 1 {
			t.Fatal("round 2 must not be reported by round 1's agent")
		}
		// Round 2's own agent gets through.
		if code, body := post(t, r.url, "Bearer "+round2.token, encode(t, sampleReport(other.server.Spec.SystemUUID))); code != http.StatusOK {
			t.Fatalf("round 2: %d %s", code, body)
		}
		if s := get(t, other.server.Name); s.Annotations[discovery.ReportedAnnotation] != round2.id {
			t.Fatalf("annotations %v", s.Annotations)
		}
	})

	t.Run("token of a round not started yet", func(t *testing.T) {
		// The controller has written the next round's Secret but not yet its round annotation.
		_, token := mustRound(t)
		setSecret(t, victim.server.Name, "next-round", token)
		before := get(t, victim.server.Name)
		if code, body := post(t, r.url, "Bearer "+token, good); code != http.StatusUnauthorized {
			t.Fatalf("got %d %s", code, body)
		}
		unchanged(t, before)
	})

	t.Run("GET is not a report", func(t *testing.T) {
		resp, err := http.Get(r.url + probe.RegisterPath)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("GET: %d", resp.StatusCode)
		}
	})
}

func mustRound(t *testing.T) (string, string) {
	t.Helper()
	id, token, err := discovery.NewRound()
	if err != nil {
		t.Fatal(err)
	}
	return id, token
}

// The ignition of one server (its token and --server-uuid) booted on another machine: that
// machine's report names the right server and carries the right token, but its DMI system UUID
// is its own. It is refused for good (403, which the agent does not retry), nothing is written,
// and the Server gets a Warning event naming both UUIDs. The right machine still gets through.
func TestReportFromWrongMachineRefused(t *testing.T) {
	r := startRegistry(t, nil)
	const serverUUID, otherUUID = "4C4C4544-0042-3510-8056-B2C04F4B3733", "9a9a9a9a-0000-0000-0000-00000000abcd"
	rd := newServerInDiscovery(t, r, "wrong-machine", serverUUID)
	wrong := sampleReport(serverUUID)
	wrong.System.UUID = otherUUID
	before := get(t, rd.server.Name)
	n := count(resultWrongMachine)
	code, body := post(t, r.url, "Bearer "+rd.token, encode(t, wrong))
	if code != http.StatusForbidden {
		t.Fatalf("got %d %s, want 403", code, body)
	}
	if !strings.Contains(body, otherUUID) || !strings.Contains(strings.ToLower(body), strings.ToLower(serverUUID)) {
		t.Errorf("answer %q does not name both UUIDs", body)
	}
	if (&probe.StatusError{Code: code}).Retryable() {
		t.Error("the agent would retry a refusal that cannot change")
	}
	if count(resultWrongMachine)-n != 1 {
		t.Error("refusal not counted")
	}
	unchanged(t, before)
	waitEvent(t, rd.server.Name, ReasonReportFromWrongMachine, func(note string) bool {
		return strings.Contains(note, otherUUID) && strings.Contains(note, strings.ToLower(serverUUID))
	})

	// A report without a DMI UUID cannot say which machine sent it.
	anonymous := sampleReport(serverUUID)
	anonymous.System.UUID = ""
	if code, body := post(t, r.url, "Bearer "+rd.token, encode(t, anonymous)); code != http.StatusBadRequest {
		t.Fatalf("without a DMI UUID: got %d %s, want 400", code, body)
	}
	unchanged(t, before)

	// The machine itself, its DMI UUID in another case than the Server's, is accepted.
	right := sampleReport(serverUUID)
	right.System.UUID = strings.ToLower(serverUUID)
	if code, body := post(t, r.url, "Bearer "+rd.token, encode(t, right)); code != http.StatusOK {
		t.Fatalf("the right machine: got %d %s", code, body)
	}
	if s := get(t, rd.server.Name); !discovery.Fresh(s) || len(s.Status.Processors) == 0 {
		t.Fatalf("the right machine's report was not written: %v", s.Annotations)
	}
}

func TestAmbiguousUUID(t *testing.T) {
	r := startRegistry(t, nil)
	a := newServerInDiscovery(t, r, "twin-a", "aaaaaaaa-0000-0000-0000-000000000001")
	newServerInDiscovery(t, r, "twin-b", "AAAAAAAA-0000-0000-0000-000000000001")
	before := get(t, a.server.Name)
	if code, body := post(t, r.url, "Bearer "+a.token, encode(t, sampleReport(a.server.Spec.SystemUUID))); code != http.StatusConflict {
		t.Fatalf("got %d %s", code, body)
	}
	unchanged(t, before)
}

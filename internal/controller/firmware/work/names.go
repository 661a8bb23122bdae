package work

import (
	"crypto/sha256"
	"encoding/hex"
)

// ChildName is the per-server object of set for server: readable, within the name limit.
func ChildName(set, server string) string {
	n := set + "-" + server
	if len(n) <= 253 {
		return n
	}
	h := sha256.Sum256([]byte(n))
	return n[:240] + "-" + hex.EncodeToString(h[:])[:12]
}

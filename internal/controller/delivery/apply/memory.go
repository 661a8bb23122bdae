package apply

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// AppliedMemory remembers, per VidraResource, what its last apply left in the cluster: the
// manifest applied, where, and each object's drift token. A pass that finds all of it unchanged
// writes nothing (an unchanged pass costs no API writes). It is a cache of observation: lost on
// restart, which only costs one re-apply per VidraResource.
type AppliedMemory struct {
	mu   sync.Mutex
	byVR map[string]*VRMemory // by VidraResource name (cluster-scoped, so unique)
}

type VRMemory struct {
	UID          types.UID
	ManifestHash string
	Target       string            // target id the objects were applied to (with the identity)
	Cluster      string            // the cluster's own target id, whose watches send events
	RequestedAt  string            // requested-at annotation the apply honoured
	Tokens       map[string]string // objectRef.key() -> drift token after our apply
	CheckedAt    time.Time         // last full pass: every object checked, restored if needed
	// DriftPolicy the apply followed: a change to Correct must restore what Warn left, so it
	// makes the next pass look at every object again.
	DriftPolicy string
	// Drift is what a Warn pass found and left, by objectRef.key: carried to the next pass
	// while the object's resourceVersion does not move (our drift token does not, once another
	// manager holds the fields).
	Drift map[string]DriftMemo
}

// DriftMemo is one object left as it is under driftPolicy Warn.
type DriftMemo struct {
	ResourceVersion string
	Fields          []string
}

func NewAppliedMemory() *AppliedMemory { return &AppliedMemory{byVR: map[string]*VRMemory{}} }

// Get returns a copy of the memory of a VidraResource, nil if none or of another incarnation.
func (m *AppliedMemory) Get(name string, uid types.UID) *VRMemory {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.byVR[name]
	if v == nil || v.UID != uid {
		return nil
	}
	cp := *v
	cp.Tokens = make(map[string]string, len(v.Tokens))
	for k, t := range v.Tokens {
		cp.Tokens[k] = t
	}
	cp.Drift = maps.Clone(v.Drift)
	return &cp
}

// Put replaces the memory of a VidraResource.
func (m *AppliedMemory) Put(name string, v *VRMemory) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byVR[name] = v
}

// Forget drops a VidraResource.
func (m *AppliedMemory) Forget(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byVR, name)
}

// Wants reports whether an event about one of owner's objects should start a pass: the object
// is not as our last apply left it (our own writes come back as events too; they must not cause
// a pass each). Outside event mode that pass only reports the drift (Stale); the periodic pass
// restores.
func (m *AppliedMemory) Wants(owner, targetID, objKey, token string, deleted bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.byVR[owner]
	if v == nil {
		return false
	}
	if deleted || v.Cluster != targetID {
		return true
	}
	return v.Tokens[objKey] != token
}

// mapDigest is an order-independent digest of a string map.
func mapDigest(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	h := sha256.New()
	for _, k := range keys {
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write([]byte(m[k]))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

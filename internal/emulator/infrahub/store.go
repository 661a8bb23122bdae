package infrahub

import (
	"crypto/md5" //nolint:gosec // Infrahub's artifact checksum is an MD5 hex digest, not a security control
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"time"
)

// MainBranch is the default branch every emulator has.
const MainBranch = "main"

// DefaultContentType is used for artifacts added without one.
const DefaultContentType = "application/yaml"

// DefaultTargetKind is the kind of the node an artifact is generated for when its change names none.
const DefaultTargetKind = "InfraDevice"

// Artifact is the state of one artifact on a branch at a point in time.
type Artifact struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	StorageID   string    `json:"storage_id"`
	Checksum    string    `json:"checksum"`
	ContentType string    `json:"content_type"`
	Content     []byte    `json:"content,omitempty"`
	Branch      string    `json:"branch"` // where this version was written (main when inherited)
	UpdatedAt   time.Time `json:"updated_at"`
	// What Infrahub's artifact events name besides the artifact: its definition (one per name,
	// as an artifact definition names its artifacts) and the node it was generated for.
	DefinitionID string `json:"artifact_definition_id,omitempty"`
	TargetID     string `json:"target_id,omitempty"`
	TargetKind   string `json:"target_kind,omitempty"`
}

// Change creates, updates or deletes an artifact. Every change is kept in the
// history so that reads `at` an earlier time see the earlier state.
type Change struct {
	Branch      string    `json:"branch,omitempty"`       // "" = main
	ID          string    `json:"id,omitempty"`           // "" creates a new artifact
	Name        string    `json:"name,omitempty"`         // required to create; "" keeps the name
	Content     []byte    `json:"content,omitempty"`      // the new content (updates always replace it)
	ContentType string    `json:"content_type,omitempty"` // "" keeps it, or DefaultContentType
	Delete      bool      `json:"delete,omitempty"`
	At          time.Time `json:"at,omitzero"` // zero = now; may lie in the past to build history
	// Checksum, when set, is claimed instead of the content's own: an Infrahub that is
	// compromised (or broken) and reports what it does not serve.
	Checksum string `json:"checksum,omitempty"`
	// TargetID and TargetKind name the node a new artifact is generated for; "" derives an id
	// from the artifact's and DefaultTargetKind. Ignored once the artifact exists.
	TargetID   string `json:"target_id,omitempty"`
	TargetKind string `json:"target_kind,omitempty"`
}

// ErrNotFound is returned for unknown branches and artifacts.
var ErrNotFound = errors.New("not found")

// version is one entry of an artifact's history on one branch.
type version struct {
	at  time.Time
	seq int // orders changes made at the same instant
	art *Artifact
}

type histKey struct{ branch, id string }

type target struct{ id, kind string }

// store is the versioned artifact database. Branches overlay main: an
// artifact never changed on a branch is read from main. Not goroutine-safe;
// the Emulator's lock guards it.
type store struct {
	branches map[string]bool
	order    []string          // artifact ids in creation order
	storage  map[string]string // artifact id -> storage id (stable across changes, as in Infrahub)
	targets  map[string]target // artifact id -> the node it is generated for
	history  map[histKey][]version
	seq      int
	proposed proposedStore // proposed changes and their comments (proposed.go)
}

func newStore() *store {
	return &store{
		branches: map[string]bool{MainBranch: true},
		storage:  map[string]string{},
		targets:  map[string]target{},
		history:  map[histKey][]version{},
	}
}

func (s *store) resolve(branch, id string, at time.Time) *Artifact {
	for _, b := range []string{branch, MainBranch} {
		vs := s.history[histKey{b, id}]
		i := sort.Search(len(vs), func(i int) bool { return vs[i].at.After(at) })
		if i > 0 {
			return vs[i-1].art // nil when deleted at that time
		}
		if b == MainBranch {
			break
		}
	}
	return nil
}

func (s *store) list(branch string, at time.Time) []Artifact {
	var out []Artifact
	for _, id := range s.order {
		if a := s.resolve(branch, id, at); a != nil {
			out = append(out, *a)
		}
	}
	return out
}

// apply records ch and returns the artifact after it and, for a create or update, the state it
// replaced on ch's branch (nil when there was none), from which its artifact event is made.
func (s *store) apply(ch Change, now time.Time) (Artifact, *Artifact, error) {
	if ch.Branch == "" {
		ch.Branch = MainBranch
	}
	if !s.branches[ch.Branch] {
		return Artifact{}, nil, fmt.Errorf("branch %q: %w", ch.Branch, ErrNotFound)
	}
	at := ch.At
	if at.IsZero() {
		at = now
	}
	at = at.UTC()
	_, known := s.storage[ch.ID]
	var cur *Artifact
	if known {
		cur = s.resolve(ch.Branch, ch.ID, at)
	}
	if ch.Delete {
		if cur == nil {
			return Artifact{}, nil, fmt.Errorf("artifact %q on branch %q: %w", ch.ID, ch.Branch, ErrNotFound)
		}
		s.record(ch.Branch, ch.ID, at, nil)
		return *cur, nil, nil
	}
	next := Artifact{ID: ch.ID, Name: ch.Name, ContentType: ch.ContentType, Branch: ch.Branch, UpdatedAt: at}
	switch {
	case cur != nil:
		if next.Name == "" {
			next.Name = cur.Name
		}
		if next.ContentType == "" {
			next.ContentType = cur.ContentType
		}
	case ch.Name == "":
		if ch.ID == "" {
			return Artifact{}, nil, errors.New("a new artifact needs a name")
		}
		return Artifact{}, nil, fmt.Errorf("artifact %q on branch %q: %w", ch.ID, ch.Branch, ErrNotFound)
	case !known:
		s.seq++
		if next.ID == "" {
			next.ID = uuidFrom(fmt.Sprintf("artifact|%d|%s", s.seq, ch.Name))
		}
		s.storage[next.ID] = uuidFrom("storage|" + next.ID)
		t := target{id: ch.TargetID, kind: ch.TargetKind}
		if t.id == "" {
			t.id = uuidFrom("target|" + next.ID)
		}
		if t.kind == "" {
			t.kind = DefaultTargetKind
		}
		s.targets[next.ID] = t
		s.order = append(s.order, next.ID)
	}
	if next.ContentType == "" {
		next.ContentType = DefaultContentType
	}
	next.StorageID = s.storage[next.ID]
	next.DefinitionID = uuidFrom("definition|" + next.Name)
	t := s.targets[next.ID]
	next.TargetID, next.TargetKind = t.id, t.kind
	next.Content = append([]byte(nil), ch.Content...)
	sum := md5.Sum(next.Content) //nolint:gosec // see import
	next.Checksum = hex.EncodeToString(sum[:])
	if ch.Checksum != "" {
		next.Checksum = ch.Checksum
	}
	s.record(ch.Branch, next.ID, at, &next)
	return next, cur, nil
}

func (s *store) record(branch, id string, at time.Time, a *Artifact) {
	s.seq++
	k := histKey{branch, id}
	vs := append(s.history[k], version{at: at, seq: s.seq, art: a})
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].at.Before(vs[j].at) })
	s.history[k] = vs
}

// uuidFrom derives a UUID-shaped id from a seed, so that loading the same
// data yields the same ids across restarts (VidraResources are named by them).
func uuidFrom(seed string) string {
	h := sha256.Sum256([]byte(seed))
	h[6] = h[6]&0x0f | 0x40
	h[8] = h[8]&0x3f | 0x80
	x := hex.EncodeToString(h[:16])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

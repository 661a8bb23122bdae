package apply

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/infrahub"
)

// DefaultPruneMaxFraction is --delivery-prune-max-fraction's default: a pass may delete at most
// half of a sync's VidraResources without a confirmation or a second agreeing answer.
const DefaultPruneMaxFraction = 0.5

// pruneToken names one prune exactly: how many VidraResources it deletes and a fingerprint of
// which ones, and of the artifacts that survive it. A confirmation of another prune (a smaller
// one, or the same count of other resources) never matches.
func pruneToken(doomed, survivors []string) string {
	d, s := slices.Sorted(slices.Values(doomed)), slices.Sorted(slices.Values(survivors))
	h := sha256.Sum256([]byte("delete:" + strings.Join(d, ",") + "\nkeep:" + strings.Join(s, ",")))
	return strconv.Itoa(len(d)) + "-" + hex.EncodeToString(h[:6])
}

// pendingPrune reads PrunePendingAnnotation: the token of the held prune and when it was first
// seen. A malformed value reads as none (it is rewritten).
func pendingPrune(v string) (token string, since time.Time, ok bool) {
	token, at, found := strings.Cut(v, "@")
	if !found || token == "" {
		return "", time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return "", time.Time{}, false
	}
	return token, t, true
}

// MaxFraction is the fraction of a sync's VidraResources one pass may delete: the flag, lowered
// (never raised) by the sync's PruneMaxFractionAnnotation.
func MaxFraction(flag float64, s *infrahubv1alpha1.InfrahubSync) float64 {
	if v, err := strconv.ParseFloat(s.Annotations[infrahubv1alpha1.PruneMaxFractionAnnotation], 64); err == nil && v >= 0 && v < flag {
		return v
	}
	return flag
}

// PruneDecision is what the guard says of a pass's deletions.
type PruneDecision struct {
	Hold  bool   // delete nothing
	Token string // the prune's token (set when it exceeds the fraction)
	// Record: write PrunePendingAnnotation=record before anything else (a first answer).
	Record string
	Reason string // why it proceeds or holds, for the log and the message
}

// PruneStake is what a pass's deletions would remove: VidraResources, and the objects they
// applied (from their inventories), so that a prune of few VidraResources holding most of the
// objects, or of none at all (artifacts re-issued under new ids without their objects, whose
// predecessors go as handed over), is a mass prune too.
type PruneStake struct {
	Doomed []string // VidraResources whose artifact left the result
	// Lossy: VidraResources handed over to a re-issued artifact that does not hold all of
	// their objects; their deletion removes the rest.
	Lossy        []string
	Total        int // the sync's VidraResources
	Objects      int // objects the deletions would remove
	ObjectsTotal int // objects the sync's VidraResources held before this answer
	// Unsettled: a successor has not recorded what it holds yet; lossy handovers wait.
	Unsettled bool
	// Shrunk: VidraResources whose new content (name@checksum) drops objects they applied;
	// shrunkObjects of them in all (counted in objects once weighed).
	Shrunk        []string
	ShrunkObjects int
}

// exceeds reports whether the stake is beyond the fraction, of VidraResources or of objects.
func (st PruneStake) exceeds(fraction float64) bool {
	return float64(len(st.Doomed)) > fraction*float64(st.Total) || float64(st.Objects) > fraction*float64(st.ObjectsTotal)
}

// DecidePrune applies the guard to a pass's deletions, keeping the survivors' artifacts. Within
// the fraction (of VidraResources and of objects) it proceeds. Beyond it, it proceeds only
// when the sync carries ConfirmPruneAnnotation with the exact token, or, with settle > 0, when
// the held record names the same token and is at least settle old (a second agreeing answer, a
// sync interval on); otherwise it holds, recording the answer when the record names another one.
func DecidePrune(s *infrahubv1alpha1.InfrahubSync, st PruneStake, survivors []string, fraction float64, now time.Time, settle time.Duration) PruneDecision {
	if (len(st.Doomed) == 0 && st.Objects == 0) || !st.exceeds(fraction) {
		return PruneDecision{}
	}
	token := pruneToken(append(append(slices.Clone(st.Doomed), st.Lossy...), st.Shrunk...), survivors)
	if s.Annotations[infrahubv1alpha1.ConfirmPruneAnnotation] == token {
		return PruneDecision{Token: token, Reason: "confirmed by " + infrahubv1alpha1.ConfirmPruneAnnotation}
	}
	held, since, ok := pendingPrune(s.Annotations[infrahubv1alpha1.PrunePendingAnnotation])
	switch {
	case ok && held == token && settle > 0 && now.Sub(since) >= settle:
		return PruneDecision{Token: token, Reason: "a second answer agreed, " + now.Sub(since).Round(time.Second).String() + " after the first"}
	case ok && held == token:
		return PruneDecision{Hold: true, Token: token}
	}
	return PruneDecision{Hold: true, Token: token, Record: token + "@" + now.UTC().Format(time.RFC3339)}
}

// HeldMessage explains a held prune and how to release it.
func HeldMessage(s *infrahubv1alpha1.InfrahubSync, d PruneDecision, st PruneStake, fraction float64, settle time.Duration) string {
	list := func(names []string) string {
		names = slices.Sorted(slices.Values(names))
		if len(names) > 10 {
			names = append(names[:10], "…")
		}
		return strings.Join(names, ", ")
	}
	var which []string
	if len(st.Doomed) > 0 {
		which = append(which, "deleting "+list(st.Doomed))
	}
	if len(st.Lossy) > 0 {
		which = append(which, "handing over to re-issued artifacts that no longer hold their objects "+list(st.Lossy))
	}
	if len(st.Shrunk) > 0 {
		names := make([]string, len(st.Shrunk))
		for i, v := range st.Shrunk {
			names[i], _, _ = strings.Cut(v, "@")
		}
		which = append(which, fmt.Sprintf("new content dropping %d objects from %s", st.ShrunkObjects, list(names)))
	}
	release := "it does not proceed on its own (--delivery-prune-auto-release)"
	if settle > 0 {
		release = "or it proceeds when a query at least " + settle.Round(time.Second).String() + " later returns the same answer"
	}
	return fmt.Sprintf("prune held: this answer would delete %d of %d VidraResources and remove %d of %d objects (more than %g%% of either): %s; nothing deleted. "+
		"Confirm with: kubectl annotate infrahubsync %s %s=%s --overwrite; %s",
		len(st.Doomed), st.Total, st.Objects, st.ObjectsTotal, fraction*100, strings.Join(which, "; "),
		s.Name, infrahubv1alpha1.ConfirmPruneAnnotation, d.Token, release)
}

// PairRenamed finds, for artifacts that have no VidraResource yet, the VidraResource of an
// artifact that left the result and is the same artifact under a new id: same name and same
// checksum, or the only one of that name on both sides. Its objects are handed over rather
// than deleted and recreated. The result maps the new artifact id to the old VidraResource.
func PairRenamed(arts []infrahub.Artifact, owned map[string]*infrahubv1alpha1.VidraResource) map[string]*infrahubv1alpha1.VidraResource {
	inResult := map[string]bool{}
	for _, a := range arts {
		inResult[a.ID] = true
	}
	var fresh []infrahub.Artifact
	for _, a := range arts {
		if _, ok := owned[a.ID]; !ok && !slices.ContainsFunc(fresh, func(f infrahub.Artifact) bool { return f.ID == a.ID }) {
			fresh = append(fresh, a)
		}
	}
	var left []*infrahubv1alpha1.VidraResource
	for name, vr := range owned {
		if !inResult[name] && vr.DeletionTimestamp.IsZero() {
			left = append(left, vr)
		}
	}
	sort.Slice(left, func(i, j int) bool { return left[i].Name < left[j].Name })
	out := map[string]*infrahubv1alpha1.VidraResource{}
	used := map[string]bool{}
	take := func(match func(a infrahub.Artifact, vr *infrahubv1alpha1.VidraResource) bool) {
		for _, a := range fresh {
			if out[a.ID] != nil {
				continue
			}
			var cands []*infrahubv1alpha1.VidraResource
			for _, vr := range left {
				if !used[vr.Name] && match(a, vr) {
					cands = append(cands, vr)
				}
			}
			if len(cands) == 1 {
				out[a.ID], used[cands[0].Name] = cands[0], true
			}
		}
	}
	sameName := func(a infrahub.Artifact, vr *infrahubv1alpha1.VidraResource) bool {
		return vr.Annotations[manifests.ArtifactNameAnnotation] == a.Name
	}
	take(func(a infrahub.Artifact, vr *infrahubv1alpha1.VidraResource) bool {
		return sameName(a, vr) && vr.Annotations[manifests.ChecksumAnnotation] == a.Checksum
	})
	// By name alone only when one artifact of that name is new and one left.
	freshByName := map[string]int{}
	for _, a := range fresh {
		if out[a.ID] == nil {
			freshByName[a.Name]++
		}
	}
	take(func(a infrahub.Artifact, vr *infrahubv1alpha1.VidraResource) bool {
		return sameName(a, vr) && freshByName[a.Name] == 1
	})
	return out
}

// HandoverOf reads HandoverAnnotation: the name and UID of the VidraResource whose objects vr
// takes over.
func HandoverOf(vr *infrahubv1alpha1.VidraResource) (name, uid string, ok bool) {
	name, uid, ok = strings.Cut(vr.Annotations[infrahubv1alpha1.HandoverAnnotation], ":")
	return name, uid, ok && name != "" && uid != ""
}

// TookOver reports whether next, which takes over old's objects, has applied its manifest:
// old can be deleted without its finalizer removing anything next now holds.
func TookOver(next, old *infrahubv1alpha1.VidraResource) bool {
	name, uid, ok := HandoverOf(next)
	return ok && name == old.Name && uid == string(old.UID) &&
		next.Status.DeployState == infrahubv1alpha1.StateSucceeded && next.Status.ObservedGeneration == next.Generation
}

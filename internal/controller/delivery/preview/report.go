package preview

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/apply"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/policy"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	"github.com/metalhub/metalhub/internal/infrahub"
)

// Source is the part of the Infrahub client a preview reads through.
type Source interface {
	QueryArtifacts(ctx context.Context, query, artifactName string, t infrahub.Target) ([]infrahub.Artifact, error)
	DownloadArtifact(ctx context.Context, id string, t infrahub.Target) (*infrahub.Content, error)
}

// Input is what a preview of one sync on one branch needs.
type Input struct {
	Sync   *infrahubv1alpha1.InfrahubSync
	Branch string
	Query  string // the stored query; "" for Infrahub's default
	Source Source
	// Target is the sync's destination as the identity its VidraResources apply as.
	Target *target.Target
	Policy policy.Policy
	// Current are the sync's VidraResources (named by artifact id) as they are: what is applied.
	Current []infrahubv1alpha1.VidraResource
}

// Report is a preview of one sync on one branch.
type Report struct {
	Sync    string  `json:"sync"`
	Branch  string  `json:"branch"`
	Base    string  `json:"base"`
	As      string  `json:"as,omitempty"`
	Entries []Entry `json:"entries"`
	// Artifacts counts the branch's artifacts; Changed those whose checksum differs from what
	// is applied (new ones included), Removed the applied ones the branch no longer has.
	Artifacts, Changed, Removed int
}

// Counts are the report's objects by action.
func (r Report) Counts() map[Action]int {
	c := map[Action]int{}
	for _, e := range r.Entries {
		c[e.Action]++
	}
	return c
}

// Run previews in.Sync's artifacts of in.Branch against what its VidraResources applied.
// An artifact whose checksum is what is applied is not looked at again: its objects are what the
// sync already keeps.
func Run(ctx context.Context, in Input) (Report, error) {
	s := in.Sync
	rep := Report{Sync: s.Name, Branch: in.Branch, Base: s.Spec.Source.TargetBranch, As: in.Target.As}
	at := infrahub.Target{Branch: in.Branch}
	arts, err := in.Source.QueryArtifacts(ctx, in.Query, s.Spec.Source.ArtefactName, at)
	if err != nil {
		return rep, fmt.Errorf("querying the artifacts of branch %q: %w", in.Branch, err)
	}
	rep.Artifacts = len(arts)
	current := map[string]*infrahubv1alpha1.VidraResource{}
	for i := range in.Current {
		current[in.Current[i].Name] = &in.Current[i]
	}
	inBranch := map[string]bool{}
	for _, a := range arts {
		inBranch[a.ID] = true
		vr := current[a.ID]
		if vr != nil && vr.Annotations[manifests.ChecksumAnnotation] == a.Checksum {
			continue
		}
		rep.Changed++
		entries, kept, err := artifact(ctx, in, a, at, vr)
		if err != nil {
			e := Entry{Object: "artifact " + a.Name + " (" + a.ID + ")", Action: Refused, Message: err.Error()}
			rep.Entries = append(rep.Entries, e)
			continue
		}
		rep.Entries = append(rep.Entries, entries...)
		if vr != nil {
			rep.Entries = append(rep.Entries, Deletions(ctx, in.Target, apply.ManagedRefs(vr.Status.ManagedResources), kept)...)
		}
	}
	for name, vr := range current {
		if !inBranch[name] {
			rep.Removed++
			rep.Entries = append(rep.Entries, Deletions(ctx, in.Target, apply.ManagedRefs(vr.Status.ManagedResources), nil)...)
		}
	}
	slices.SortStableFunc(rep.Entries, func(a, b Entry) int { return strings.Compare(a.Object, b.Object) })
	return rep, nil
}

func artifact(ctx context.Context, in Input, a infrahub.Artifact, at infrahub.Target, vr *infrahubv1alpha1.VidraResource) ([]Entry, map[string]bool, error) {
	c, err := in.Source.DownloadArtifact(ctx, a.ID, at)
	if err != nil {
		return nil, nil, fmt.Errorf("downloading: %w", err)
	}
	objs, err := manifests.Decode(string(c.Data))
	if err != nil {
		return nil, nil, fmt.Errorf("invalid manifest: %w", err)
	}
	planned, err := apply.Plan(in.Target, objs, in.Sync.Spec.Destination.Namespace, in.Policy)
	if err != nil {
		return nil, nil, err
	}
	owner := apply.OwnerMark{Name: a.ID}
	if vr != nil {
		owner = apply.MarkOf(vr)
	}
	kept := map[string]bool{}
	owned := make([]*unstructured.Unstructured, len(planned))
	for i, po := range planned {
		owned[i] = apply.Owned(po, []apply.OwnerMark{owner})
		kept[po.Ref.Key()] = true
	}
	return Apply(ctx, in.Target, planned, owned), kept, nil
}

// Markdown renders the report for a proposed change's comment.
func (r Report) Markdown() string {
	var b strings.Builder
	c := r.Counts()
	fmt.Fprintf(&b, "### metalhub preview: InfrahubSync `%s`\n\n", r.Sync)
	fmt.Fprintf(&b, "Branch `%s` against `%s` as applied", r.Branch, r.Base)
	if r.As != "" {
		fmt.Fprintf(&b, ", dry-run as `%s`", r.As)
	}
	fmt.Fprintf(&b, ": %d to create, %d to change, %d to delete, %d refused.\n\n",
		c[Create], c[Change], c[Delete], c[Refused])
	if len(r.Entries) == 0 {
		b.WriteString("No object changes.\n")
		return b.String()
	}
	b.WriteString("| Action | Object | Detail |\n|---|---|---|\n")
	for _, e := range r.Entries {
		if e.Action == Unchanged {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", e.Action, cell(e.Object), cell(e.Message))
	}
	for _, e := range r.Entries {
		if len(e.Fields) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n**%s**\n\n```diff\n", e.Object)
		for _, f := range e.Fields {
			if f.Old != "" {
				fmt.Fprintf(&b, "- %s: %s\n", f.Path, oneLine(f.Old))
			}
			if f.New != "" {
				fmt.Fprintf(&b, "+ %s: %s\n", f.Path, oneLine(f.New))
			}
		}
		if e.More > 0 {
			fmt.Fprintf(&b, "  … and %d more fields\n", e.More)
		}
		b.WriteString("```\n")
	}
	return b.String()
}

// Text writes the report for a terminal.
func (r Report) Text(w io.Writer) {
	c := r.Counts()
	fmt.Fprintf(w, "InfrahubSync %s: branch %s against %s as applied", r.Sync, r.Branch, r.Base)
	if r.As != "" {
		fmt.Fprintf(w, " (dry-run as %s)", r.As)
	}
	fmt.Fprintf(w, "\n%d to create, %d to change, %d to delete, %d refused\n", c[Create], c[Change], c[Delete], c[Refused])
	for _, e := range r.Entries {
		if e.Action == Unchanged {
			continue
		}
		fmt.Fprintf(w, "%-9s %s", e.Action, e.Object)
		if e.Message != "" {
			fmt.Fprintf(w, ": %s", e.Message)
		}
		fmt.Fprintln(w)
		for _, f := range e.Fields {
			if f.Old != "" {
				fmt.Fprintf(w, "  - %s: %s\n", f.Path, oneLine(f.Old))
			}
			if f.New != "" {
				fmt.Fprintf(w, "  + %s: %s\n", f.Path, oneLine(f.New))
			}
		}
		if e.More > 0 {
			fmt.Fprintf(w, "  … and %d more fields\n", e.More)
		}
	}
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", `\n`) }

func cell(s string) string { return strings.ReplaceAll(oneLine(s), "|", `\|`) }

package server

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// bootRequest is one boot of an image: how (the boot configuration's method) and from where.
type bootRequest struct {
	method metalv1alpha1.BootMethod
	uri    string
	// what names the boot for events: "boot configuration ns/name", "discovery round r".
	what string
	// regarding is the object the boot is for (events), nil for discovery.
	regarding *metalv1alpha1.ServerBootConfiguration
}

func bootOf(sbc *metalv1alpha1.ServerBootConfiguration) bootRequest {
	return bootRequest{method: sbc.Spec.BootMethod, uri: sbc.Spec.BootURI, regarding: sbc,
		what: fmt.Sprintf("boot configuration %s/%s", sbc.Namespace, sbc.Name)}
}

// bootProblem is why a boot could not be prepared: the condition's reason and message.
type bootProblem struct{ reason, message string }

// noteBootProblem records err (if any) as the pass's BootMethod problem: a reasoned failure is
// the user's to fix; any other (the BMC not answering, a 5xx) is BootPreparationFailed and
// retried as an error.
func (p *serverPass) noteBootProblem(err error) {
	if err == nil {
		return
	}
	reason, ok := lifecycle.ReasonOf(err)
	if !ok {
		reason = metalv1alpha1.ReasonBootPreparationFailed
	}
	p.bootProblem = &bootProblem{reason: reason, message: err.Error()}
}

// errBootUnsupported: the BMC does not advertise the boot method; nothing was sent.
var errBootUnsupported = errors.New("boot method not supported by the BMC")

// overrideSet reports whether a one-time (or, read back, continuous) override to target is set.
// Read-back lies on some BMCs (Continuous after Once): any enabled override counts.
func overrideSet(b bmc.BootOverride, target bmc.BootTarget) bool {
	return b.Target == string(target) && b.Enabled != "" && b.Enabled != "Disabled"
}

// prepareBoot makes the system's next power-on boot req, or says which virtual media record
// must be written first. Every action it takes is observed before it is taken (an override
// already set, a medium already in the drive), so a pass that repeats it after a lost write or
// a crash sends nothing again.
//
// For virtual media the record (MediaAnnotation) comes first: when it does not name req's image,
// prepareBoot ejects the medium it names (another boot's), sends nothing else and returns
// record=true with the value to write (want, "" to remove); the caller writes it and ends the
// pass. A method the BMC does not advertise fails with errBootUnsupported before anything is
// sent; the failure is the pass's BootMethod condition. What the user must fix (a method the BMC
// lacks, an image it refuses to mount) fails with a lifecycle.ReasonError carrying the
// condition's reason: stateStep makes that a calm look again, not an error retried with backoff.
func (r *Reconciler) prepareBoot(bctx context.Context, p *serverPass, req bootRequest) (want string, record bool, err error) {
	defer func() {
		switch {
		case err != nil:
			if errors.Is(err, errBootUnsupported) {
				err = lifecycle.WithReason(metalv1alpha1.ReasonBootMethodUnsupported, err)
			}
			p.noteBootProblem(err)
		case !record:
			p.bootPrepared = true
		}
	}()
	method := req.method
	if method == "" {
		method = metalv1alpha1.BootMethodPXE
	}
	have := p.Obj.Annotations[serverstate.MediaAnnotation]
	if method != metalv1alpha1.BootMethodVirtualMedia && have != "" {
		// A medium of an earlier boot: out before this boot, so it cannot boot it.
		if err := p.conn.EjectMedia(bctx, p.sysID, have); err != nil {
			return "", false, fmt.Errorf("ejecting virtual media %s: %w", have, err)
		}
		return "", true, nil
	}
	switch method {
	case metalv1alpha1.BootMethodPXE:
		if overrideSet(p.sys.Boot, bmc.BootPxe) {
			return "", false, nil
		}
		if err := p.conn.SetBootOnce(bctx, p.sysID, bmc.BootPxe); err != nil {
			return "", false, fmt.Errorf("setting one-time PXE boot for %s: %w", req.what, unsupported(err))
		}
		r.bootEvent(p, req, "one-time PXE boot set for %s", req.what)
	case metalv1alpha1.BootMethodHTTP:
		if !p.sys.HTTPBoot {
			return "", false, fmt.Errorf("%w: %s asks for UEFI HTTP boot, which the BMC does not advertise", errBootUnsupported, req.what)
		}
		if overrideSet(p.sys.Boot, bmc.BootUefiHttp) && (req.uri == "" || p.sys.Boot.HTTPBootURI == req.uri) {
			return "", false, nil
		}
		var opts []bmc.BootOption
		if req.uri != "" {
			opts = append(opts, bmc.WithHTTPBootURI(req.uri))
		}
		if err := p.conn.SetBootOnce(bctx, p.sysID, bmc.BootUefiHttp, opts...); err != nil {
			return "", false, fmt.Errorf("setting one-time UEFI HTTP boot for %s: %w", req.what, unsupported(err))
		}
		r.bootEvent(p, req, "one-time UEFI HTTP boot from %q set for %s", req.uri, req.what)
	case metalv1alpha1.BootMethodVirtualMedia:
		if len(p.sys.BootTargets) > 0 && !slices.Contains(p.sys.BootTargets, string(bmc.BootCd)) {
			return "", false, fmt.Errorf("%w: %s asks for a virtual media boot; the BMC offers no Cd boot target", errBootUnsupported, req.what)
		}
		if have != req.uri {
			slots, err := p.conn.VirtualMedia(bctx, p.sysID)
			if err != nil {
				return "", false, fmt.Errorf("listing virtual media for %s: %w", req.what, err)
			}
			if !slices.ContainsFunc(slots, bmc.MediaSlot.TakesCD) {
				return "", false, fmt.Errorf("%w: %s asks for a virtual media boot; the BMC has no virtual CD", errBootUnsupported, req.what)
			}
			if have != "" {
				if err := p.conn.EjectMedia(bctx, p.sysID, have); err != nil {
					return "", false, fmt.Errorf("ejecting virtual media %s: %w", have, err)
				}
			}
			return req.uri, true, nil
		}
		if err := p.conn.InsertMedia(bctx, p.sysID, req.uri); err != nil {
			err = fmt.Errorf("inserting virtual media %s for %s: %w", req.uri, req.what, err)
			if bmc.ReasonOf(err) == bmc.ReasonUnsupported {
				// A 400 to a BMC that has the virtual CD: it cannot mount this image (the URI,
				// the share's reachability or credentials), which is the user's to fix.
				err = lifecycle.WithReason(metalv1alpha1.ReasonBootPreparationFailed,
					fmt.Errorf("%w; check that the BMC can reach the image at bootURI", err))
			}
			return "", false, err
		}
		if overrideSet(p.sys.Boot, bmc.BootCd) {
			return "", false, nil
		}
		if err := p.conn.SetBootOnce(bctx, p.sysID, bmc.BootCd); err != nil {
			return "", false, fmt.Errorf("setting one-time Cd boot for %s: %w", req.what, unsupported(err))
		}
		r.bootEvent(p, req, "virtual media %q inserted and one-time Cd boot set for %s", req.uri, req.what)
	default:
		return "", false, fmt.Errorf("%w: unknown boot method %q in %s", errBootUnsupported, method, req.what)
	}
	return "", false, nil
}

// unsupported marks a BMC's refusal of an unadvertised request as errBootUnsupported.
func unsupported(err error) error {
	if bmc.ReasonOf(err) == bmc.ReasonUnsupported {
		return fmt.Errorf("%w: %w", errBootUnsupported, err)
	}
	return err
}

func (r *Reconciler) bootEvent(p *serverPass, req bootRequest, format string, args ...any) {
	var related runtime.Object
	if req.regarding != nil {
		related = req.regarding
	}
	r.actionEvent(p, related, "BootOnce", "SetBootOnce", format, args...)
}

// writeMediaRecord writes the virtual media record prepareBoot asked for and ends the pass.
func (r *Reconciler) writeMediaRecord(ctx context.Context, p *serverPass, want string) (lifecycle.Result, error) {
	return lifecycle.Wrote("virtual media recorded"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		setMediaRecord(s, want)
	})
}

func setMediaRecord(s *metalv1alpha1.Server, want string) {
	if want == "" {
		lifecycle.RemoveAnnotation(s, serverstate.MediaAnnotation)
		return
	}
	lifecycle.SetAnnotation(s, serverstate.MediaAnnotation, want)
}

// ejectRecorded ejects the medium the record names (nothing inserted, nothing sent) and
// reports whether there was a record: the caller removes it in its next write.
func (r *Reconciler) ejectRecorded(bctx context.Context, p *serverPass) (bool, error) {
	have := p.Obj.Annotations[serverstate.MediaAnnotation]
	if have == "" {
		return false, nil
	}
	if err := p.conn.EjectMedia(bctx, p.sysID, have); err != nil {
		return true, fmt.Errorf("ejecting virtual media %s: %w", have, err)
	}
	return true, nil
}

// reportBoot sets or ends the BootMethod condition from what the pass found. The pass that
// prepares a boot writes the power action, not status; so the condition also ends once the box
// runs (it booted, nothing is being prepared) or no boot is owed (Available, Released).
func (r *Reconciler) reportBoot(p *serverPass, st *metalv1alpha1.ServerStatus) {
	switch {
	case p.bootProblem != nil:
		before := apimeta.FindStatusCondition(p.Obj.Status.Conditions, metalv1alpha1.ConditionBootMethod)
		lifecycle.SetCondition(&st.Conditions, p.Obj.Generation, metalv1alpha1.ConditionBootMethod, metav1.ConditionFalse, p.bootProblem.reason, p.bootProblem.message)
		if before == nil || before.Reason != p.bootProblem.reason {
			r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, p.bootProblem.reason, "Boot", "%s", p.bootProblem.message)
		}
	case p.bootPrepared, p.sys.PowerState == bmc.PowerStateOn,
		p.state == metalv1alpha1.ServerStateAvailable, p.state == metalv1alpha1.ServerStateReleased:
		apimeta.RemoveStatusCondition(&st.Conditions, metalv1alpha1.ConditionBootMethod)
	}
}

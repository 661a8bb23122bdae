package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/apilimit"
	"github.com/metalhub/metalhub/internal/discovery"
	"github.com/metalhub/metalhub/internal/inventory"
	"github.com/metalhub/metalhub/internal/probe"
)

// writeAttempts bounds the re-read-and-retry loop when a write meets a newer Server.
const writeAttempts = 5

// outcome is the answer to one report.
type outcome struct {
	code   int
	result string // reportsTotal label
	msg    string // told to the client: never a token, nothing about other servers
	server string
	round  string
	err    error // logged only
}

func reject(code int, result, msg string, err error) *outcome {
	return &outcome{code: code, result: result, msg: msg, err: err}
}

func (r *Registry) serveRegister(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	out, uuid := r.register(w, req)
	r.answer(w, req, "discovery report", reportsTotal, start, out, uuid)
}

// answer counts, logs and answers one report of either kind (what names it in the log).
func (r *Registry) answer(w http.ResponseWriter, req *http.Request, what string, total *prometheus.CounterVec, start time.Time, out *outcome, uuid string) {
	total.WithLabelValues(out.result).Inc()
	kv := []any{"result", out.result, "code", out.code, "systemUUID", uuid, "server", out.server,
		"round", out.round, "remote", req.RemoteAddr, "duration", time.Since(start).String()}
	switch {
	case out.code == http.StatusOK:
		r.log.Info(what, kv...)
	case out.code >= 500:
		r.log.Error(out.err, what+" failed", kv...)
	default:
		if out.err != nil {
			kv = append(kv, "reason", out.err.Error())
		}
		r.log.Info(what+" rejected", kv...)
	}
	if out.code == http.StatusOK {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(probe.Answer{Done: true})
		return
	}
	if out.code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "5")
	}
	http.Error(w, out.msg, out.code)
}

// readReport reads a report's bearer token and body, bounded by MaxBodyBytes.
func (r *Registry) readReport(w http.ResponseWriter, req *http.Request) (string, []byte, *outcome) {
	token, ok := bearerToken(req.Header.Get("Authorization"))
	if !ok {
		return "", nil, reject(http.StatusUnauthorized, resultUnauthorized, "a bearer token is required", errors.New("no bearer token"))
	}
	tooLarge := reject(http.StatusRequestEntityTooLarge, resultTooLarge, fmt.Sprintf("report larger than %d bytes", r.opts.MaxBodyBytes), nil)
	if req.ContentLength > r.opts.MaxBodyBytes {
		return "", nil, tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return "", nil, tooLarge
		}
		return "", nil, reject(http.StatusBadRequest, resultMalformed, "reading the report failed", err)
	}
	return token, body, nil
}

// admit takes one of the MaxConcurrent slots for a report's API calls; release frees it.
func (r *Registry) admit(req *http.Request) (release func(), out *outcome) {
	select {
	case r.sem <- struct{}{}:
		return func() { <-r.sem }, nil
	case <-req.Context().Done():
		return nil, reject(http.StatusServiceUnavailable, resultError, "registry busy", req.Context().Err())
	}
}

// register reads, checks and applies one report. Nothing is written unless the token is the
// current round's and the report is valid.
func (r *Registry) register(w http.ResponseWriter, req *http.Request) (*outcome, string) {
	token, body, out := r.readReport(w, req)
	if out != nil {
		return out, ""
	}
	rep, err := decodeReport(body)
	if err != nil {
		return reject(http.StatusBadRequest, resultMalformed, err.Error(), err), ""
	}
	if err := rep.Validate(); err != nil {
		return reject(http.StatusBadRequest, resultMalformed, "invalid report: "+err.Error(), err), rep.SystemUUID
	}
	if NormalizeUUID(rep.System.UUID) == "" {
		// The DMI UUID is the only thing in a report that says which machine sent it; real
		// hardware always has one and the probe runs privileged, so its absence is refused
		// rather than trusted.
		return reject(http.StatusBadRequest, resultMalformed, "invalid report: system.uuid (the DMI system UUID) is empty",
			errors.New("report without a DMI system UUID")), rep.SystemUUID
	}

	r.awaitRound(req.Context(), rep.SystemUUID)
	release, out := r.admit(req)
	if out != nil {
		return out, rep.SystemUUID
	}
	defer release()
	// The machine waits for the answer with a deadline of its own: its writes go ahead of the
	// controllers' (a report that outwaits its caller is sent again and all of it redone).
	ctx, cancel := context.WithTimeout(apilimit.Prompt(req.Context()), r.opts.RequestTimeout)
	defer cancel()
	return r.accept(ctx, rep, token), rep.SystemUUID
}

func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// decodeReport decodes exactly one JSON object. Unknown fields are allowed so that a newer agent
// can add information an older registry ignores.
func decodeReport(body []byte) (*probe.Report, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var rep probe.Report
	if err := dec.Decode(&rep); err != nil {
		return nil, fmt.Errorf("report is not valid JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("report is not valid JSON: data after the object")
	}
	return &rep, nil
}

// accept authenticates the report against the Server's current round and writes it: status
// first, then ReportedAnnotation, so that the annotation always means "status holds this
// round's hardware". Both writes carry the resourceVersion the authentication was made
// against, so a round that changed in between (or any other write) makes them fail with a
// conflict; then the Server is read again and everything is checked afresh.
func (r *Registry) accept(ctx context.Context, rep *probe.Report, token string) *outcome {
	srv, out := r.lookup(ctx, rep.SystemUUID)
	if out != nil {
		return out
	}
	fromCache := true
	for attempt := 1; ; attempt++ {
		round, out := r.authenticate(ctx, srv, token, "", &fromCache)
		if out != nil {
			out.server = srv.Name
			return out
		}
		if out := r.sameMachine(srv, rep, round); out != nil {
			return out
		}
		if discovery.Fresh(srv) {
			return &outcome{code: http.StatusOK, result: resultDuplicate, server: srv.Name, round: round}
		}
		err := r.write(ctx, srv, rep, round)
		if err == nil {
			return &outcome{code: http.StatusOK, result: resultAccepted, server: srv.Name, round: round}
		}
		if apierrors.IsNotFound(err) {
			return reject(http.StatusNotFound, resultUnknownServer, "no server with this UUID", err)
		}
		if apierrors.IsInvalid(err) {
			// The API server's schema refused what Validate let through: sending it again
			// will not help, so say so instead of asking the agent to retry forever.
			return &outcome{code: http.StatusBadRequest, result: resultMalformed, msg: "report refused by the Server schema",
				server: srv.Name, round: round, err: err}
		}
		if !apierrors.IsConflict(err) || attempt == writeAttempts {
			return &outcome{code: http.StatusServiceUnavailable, result: resultError, msg: "could not store the report, retry later",
				server: srv.Name, round: round, err: err}
		}
		name := srv.Name
		srv = &metalv1alpha1.Server{}
		if err := r.reader.Get(ctx, client.ObjectKey{Name: name}, srv); err != nil {
			if apierrors.IsNotFound(err) {
				return reject(http.StatusNotFound, resultUnknownServer, "no server with this UUID", err)
			}
			return &outcome{code: http.StatusServiceUnavailable, result: resultError, msg: "could not read the server, retry later", server: name, err: err}
		}
		fromCache = false
	}
}

// sameMachine refuses a report whose DMI system UUID is not the Server's: the ignition (token
// and --server-uuid) reached another machine, e.g. a mis-cabled or mis-assigned PXE boot, and
// that machine's hardware must not be written onto this Server. It runs after authentication,
// so only a holder of the round's token can cause the Warning event.
func (r *Registry) sameMachine(srv *metalv1alpha1.Server, rep *probe.Report, round string) *outcome {
	if NormalizeUUID(rep.System.UUID) == NormalizeUUID(srv.Spec.SystemUUID) {
		return nil
	}
	// Named as written (lower-cased), dashes and all: the form people compare with dmidecode.
	got, want := strings.ToLower(strings.TrimSpace(rep.System.UUID)), strings.ToLower(strings.TrimSpace(srv.Spec.SystemUUID))
	if r.opts.Recorder != nil {
		r.opts.Recorder.Eventf(srv, nil, corev1.EventTypeWarning, ReasonReportFromWrongMachine, "Discover",
			"refused a discovery report from the machine with DMI system UUID %s: this server's system UUID is %s", got, want)
	}
	return &outcome{code: http.StatusForbidden, result: resultWrongMachine, server: srv.Name, round: round,
		msg: fmt.Sprintf("this machine's DMI system UUID %s is not the server's system UUID %s: the report is for another machine", got, want),
		err: fmt.Errorf("DMI system UUID %s in the report, server %s has system UUID %s", got, srv.Name, want)}
}

// lookup finds the one Server with the UUID through the cache index.
func (r *Registry) lookup(ctx context.Context, uuid string) (*metalv1alpha1.Server, *outcome) {
	var list metalv1alpha1.ServerList
	if err := r.client.List(ctx, &list, client.MatchingFields{ServerUUIDIndex: NormalizeUUID(uuid)}); err != nil {
		return nil, &outcome{code: http.StatusServiceUnavailable, result: resultError, msg: "could not look up the server, retry later",
			err: fmt.Errorf("listing Servers by UUID (is the %s index registered?): %w", ServerUUIDIndex, err)}
	}
	switch len(list.Items) {
	case 0:
		return nil, reject(http.StatusNotFound, resultUnknownServer, "no server with this UUID", nil)
	case 1:
		return &list.Items[0], nil
	default:
		names := make([]string, len(list.Items))
		for i := range list.Items {
			names[i] = list.Items[i].Name
		}
		return nil, reject(http.StatusConflict, resultAmbiguous, "several servers have this UUID", fmt.Errorf("servers %v share the UUID", names))
	}
}

// authenticate checks the token against the Server's current round Secret and returns the
// round. A Secret labelled with another round than the Server's is refused even with the right
// token (a Secret without RoundLabel is judged by its token alone). A Server read from the cache
// may be behind the Secret (the controller writes the Secret before the round annotation); then
// it is read once more from the API server before refusing.
//
// purpose is the round's kind the endpoint serves ("" discovery, discovery.PurposeCleaning): a
// cleaning round's token cannot post hardware, nor a discovery round's a cleaning.
func (r *Registry) authenticate(ctx context.Context, srv *metalv1alpha1.Server, token, purpose string, fromCache *bool) (string, *outcome) {
	unauthorized := func(err error) (string, *outcome) {
		return "", reject(http.StatusUnauthorized, resultUnauthorized, "token not valid for this server's discovery round", err)
	}
	// A server without a round is refused on what the cache says, after the report waited for
	// it (awaitRound), before anything is read from the API server: its box powers on before
	// the write that records the round, and on a busy API server that write waits while the
	// probe reports again and again (at 10,000 servers, tens of thousands of refusals in one
	// bring-up, each of which read the Server from the API server).
	if srv.Annotations[discovery.RoundAnnotation] == "" {
		return unauthorized(errors.New("server has no discovery round"))
	}
	var secret corev1.Secret
	key := client.ObjectKey{Namespace: r.opts.DiscoveryNamespace, Name: discovery.ObjectName(srv.Name)}
	if err := r.reader.Get(ctx, key, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return unauthorized(fmt.Errorf("no round secret %s", key))
		}
		return "", &outcome{code: http.StatusServiceUnavailable, result: resultError, msg: "could not read the discovery round, retry later", err: err}
	}
	if !tokenEqual(secret.Data[discovery.TokenKey], token) {
		return unauthorized(errors.New("token does not match the round secret"))
	}
	if owner := secret.Labels[discovery.ServerLabel]; owner != "" && owner != srv.Name {
		return unauthorized(fmt.Errorf("round secret %s belongs to server %q", key, owner))
	}
	if got := secret.Labels[discovery.PurposeLabel]; got != purpose {
		return unauthorized(fmt.Errorf("round secret %s is of purpose %q, the report is for %q", key, got, purpose))
	}
	for {
		round := srv.Annotations[discovery.RoundAnnotation]
		secretRound, labelled := secret.Labels[discovery.RoundLabel]
		var err error
		switch {
		case round == "":
			err = errors.New("server has no discovery round")
		case labelled && secretRound != round:
			// The Secret is of another round than the Server: a previous round's leftover or a
			// round the controller has not finished starting. Its token is not this round's.
			err = fmt.Errorf("round secret is of round %q, server is in round %q", secretRound, round)
		default:
			return round, nil
		}
		if !*fromCache {
			return unauthorized(err)
		}
		*fromCache = false
		fresh := &metalv1alpha1.Server{}
		if gerr := r.reader.Get(ctx, client.ObjectKey{Name: srv.Name}, fresh); gerr != nil {
			return unauthorized(err)
		}
		*srv = *fresh
	}
}

// tokenEqual compares in constant time; hashing first hides the expected token's length too.
func tokenEqual(want []byte, got string) bool {
	if len(want) == 0 {
		return false
	}
	a := sha256.Sum256(bytes.TrimSpace(want))
	b := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// write stores the report in status, then in the server's inventory record, then marks the
// round reported, each with an optimistic lock. The status write is skipped when status already
// holds the report (a retry after a later write lost a race); the record of a round is written
// once, so a retry compares with the same baseline and finds the same drift.
func (r *Registry) write(ctx context.Context, srv *metalv1alpha1.Server, rep *probe.Report, round string) error {
	before := srv.DeepCopy()
	// A status without processors has never held a report (or was wiped): its record most
	// likely does not exist yet.
	first := len(srv.Status.Processors) == 0
	applyReport(&srv.Status, rep)
	if !equality.Semantic.DeepEqual(before.Status, srv.Status) {
		if err := r.client.Status().Patch(ctx, srv, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("writing hardware into the status of server %s: %w", srv.Name, err)
		}
	}
	drift, err := r.record(ctx, srv, rep, round, first)
	if err != nil {
		return err
	}
	before = srv.DeepCopy()
	if srv.Annotations == nil {
		srv.Annotations = map[string]string{}
	}
	srv.Annotations[discovery.ReportedAnnotation] = round
	prevDrift := srv.Annotations[metalv1alpha1.InventoryDriftAnnotation]
	if drift != "" {
		srv.Annotations[metalv1alpha1.InventoryDriftAnnotation] = drift
	} else {
		delete(srv.Annotations, metalv1alpha1.InventoryDriftAnnotation)
	}
	// The labels claims select on go with the mark, in the same write.
	for k, v := range inventoryLabels(rep) {
		if v == "" {
			delete(srv.Labels, k)
			continue
		}
		if srv.Labels == nil {
			srv.Labels = map[string]string{}
		}
		srv.Labels[k] = v
	}
	if err := r.client.Patch(ctx, srv, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("marking round %s of server %s reported: %w", round, srv.Name, err)
	}
	if r.opts.Recorder != nil {
		switch {
		case drift != "" && drift != prevDrift:
			r.opts.Recorder.Eventf(srv, nil, corev1.EventTypeWarning, metalv1alpha1.ReasonHardwareMissing, "Discover",
				"discovery round %s found less hardware than the baseline: %s", round, drift)
		case drift == "" && prevDrift != "":
			r.opts.Recorder.Eventf(srv, nil, corev1.EventTypeNormal, metalv1alpha1.ReasonInventoryRestored, "Discover",
				"discovery round %s found all of the baseline hardware again", round)
		}
	}
	return nil
}

// record writes the round's inventory into the server's record and returns the drift from its
// baseline. The record is read past the cache and written with its resourceVersion: two reports
// racing (a retry) cannot both move the baseline. A record already of this round is not
// written again. first (a server that most likely has no record) creates the record before
// reading anything, as a bring-up's servers do: a create the API server refuses because there
// is a record falls back to the read.
func (r *Registry) record(ctx context.Context, srv *metalv1alpha1.Server, rep *probe.Report, round string, first bool) (string, error) {
	var st metalv1alpha1.ServerStatus
	applyReport(&st, rep)
	now := inventory.FromStatus(&st)
	now.BIOSVersion = rep.System.BIOSVersion
	key := client.ObjectKey{Namespace: r.opts.DiscoveryNamespace, Name: inventory.ObjectName(srv.Name)}
	if first {
		next, drift := inventory.Next(nil, now, round)
		cm, err := r.recordObject(srv, next)
		if err != nil {
			return "", err
		}
		switch err := r.client.Create(ctx, cm); {
		case err == nil:
			return drift, nil
		case !apierrors.IsAlreadyExists(err):
			return "", fmt.Errorf("creating the inventory record of server %s: %w", srv.Name, err)
		}
	}
	cur := &corev1.ConfigMap{}
	var prev *inventory.Record
	switch err := r.reader.Get(ctx, key, cur); {
	case apierrors.IsNotFound(err):
		cur = nil
	case err != nil:
		return "", fmt.Errorf("reading the inventory record of server %s: %w", srv.Name, err)
	default:
		if !ownedBy(cur, srv) {
			// A record of an earlier server of this name: not this one's baseline.
			if err := r.client.Delete(ctx, cur, client.Preconditions{UID: &cur.UID, ResourceVersion: &cur.ResourceVersion}); err != nil && !apierrors.IsNotFound(err) {
				return "", fmt.Errorf("deleting the inventory record of a former server %s: %w", srv.Name, err)
			}
			return "", apierrors.NewConflict(corev1.Resource("configmaps"), key.Name, errors.New("a former server's record was removed"))
		}
		if prev, err = inventory.Decode(cur); err != nil {
			// Unreadable: this discovery starts a new baseline rather than blocking the server.
			prev = nil
		}
	}
	if prev != nil && prev.Baseline.BIOSVersion != "" && now.BIOSVersion != "" && prev.Baseline.BIOSVersion != now.BIOSVersion {
		// A firmware change is drift unless an upgrade of ours asked for this version.
		asked, err := r.biosVersionsAsked(ctx, srv.Name)
		if err != nil {
			return "", err
		}
		if inventory.FirmwareExplained(now.BIOSVersion, asked) {
			prev.Baseline.BIOSVersion = now.BIOSVersion
		}
	}
	if prev != nil && prev.Round == round {
		_, drift := inventory.Next(&inventory.Record{Baseline: prev.Baseline}, now, round)
		return drift, nil
	}
	next, drift := inventory.Next(prev, now, round)
	cm, err := r.recordObject(srv, next)
	if err != nil {
		return "", err
	}
	if cur == nil {
		if err := r.client.Create(ctx, cm); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return "", apierrors.NewConflict(corev1.Resource("configmaps"), key.Name, err)
			}
			return "", fmt.Errorf("creating the inventory record of server %s: %w", srv.Name, err)
		}
		return drift, nil
	}
	cm.ResourceVersion = cur.ResourceVersion
	if err := r.client.Update(ctx, cm); err != nil {
		return "", fmt.Errorf("updating the inventory record of server %s: %w", srv.Name, err)
	}
	return drift, nil
}

// recordObject is the inventory record rec of srv, owned by it.
func (r *Registry) recordObject(srv *metalv1alpha1.Server, rec inventory.Record) (*corev1.ConfigMap, error) {
	cm, err := inventory.ConfigMap(r.opts.DiscoveryNamespace, srv.Name, rec)
	if err != nil {
		return nil, err
	}
	if err := controllerutil.SetOwnerReference(srv, cm, r.client.Scheme()); err != nil {
		return nil, fmt.Errorf("owning the inventory record of server %s: %w", srv.Name, err)
	}
	return cm, nil
}

// biosVersionsAsked lists the versions BIOSVersion objects ask for on the server (read past the
// cache, and only when a discovery finds another BIOS version, which is rare).
func (r *Registry) biosVersionsAsked(ctx context.Context, server string) ([]string, error) {
	list := &systemv1alpha1.BIOSVersionList{}
	if err := r.reader.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing BIOS versions: %w", err)
	}
	var out []string
	for _, v := range list.Items {
		if v.Spec.ServerRef != nil && v.Spec.ServerRef.Name == server {
			out = append(out, v.Spec.Version)
		}
	}
	return out, nil
}

// ownedBy reports whether o is owned by srv (the same object, not an earlier one of its name).
func ownedBy(o metav1.Object, srv *metalv1alpha1.Server) bool {
	for _, ref := range o.GetOwnerReferences() {
		if ref.UID == srv.UID {
			return true
		}
	}
	return false
}

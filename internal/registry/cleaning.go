package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/apilimit"
	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/discovery"
	"github.com/metalhub/metalhub/internal/probe"
)

// serveCleaning accepts a cleaning agent's report: with the token of the server's current
// cleaning round and from the server's own machine, it is appended to the server's cleaning
// record, then the round is marked cleaned (discovery.CleanedAnnotation), which brings the
// Server controller's verdict. The registry judges nothing: a report of failed disks is stored
// as faithfully as one of erased disks.
func (r *Registry) serveCleaning(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	out, uuid := r.clean(w, req)
	r.answer(w, req, "cleaning report", cleaningReportsTotal, start, out, uuid)
}

func (r *Registry) clean(w http.ResponseWriter, req *http.Request) (*outcome, string) {
	token, body, out := r.readReport(w, req)
	if out != nil {
		return out, ""
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var rep probe.CleaningReport
	if err := dec.Decode(&rep); err != nil {
		return reject(http.StatusBadRequest, resultMalformed, "report is not valid JSON", err), ""
	}
	if _, err := dec.Token(); err != io.EOF {
		return reject(http.StatusBadRequest, resultMalformed, "report is not valid JSON: data after the object", nil), ""
	}
	if err := rep.Validate(); err != nil {
		return reject(http.StatusBadRequest, resultMalformed, "invalid report: "+err.Error(), err), rep.SystemUUID
	}
	if NormalizeUUID(rep.DMIUUID) == "" {
		return reject(http.StatusBadRequest, resultMalformed, "invalid report: dmiUUID (the DMI system UUID) is empty",
			errors.New("cleaning report without a DMI system UUID")), rep.SystemUUID
	}
	release, out := r.admit(req)
	if out != nil {
		return out, rep.SystemUUID
	}
	defer release()
	// The machine waits for the answer with a deadline of its own: its writes go ahead of the
	// controllers' (a report that outwaits its caller is sent again and all of it redone).
	ctx, cancel := context.WithTimeout(apilimit.Prompt(req.Context()), r.opts.RequestTimeout)
	defer cancel()
	return r.acceptCleaning(ctx, &rep, token), rep.SystemUUID
}

// acceptCleaning authenticates the report against the server's cleaning round, stores it in the
// record and marks the round cleaned, retrying on a newer Server as accept does.
func (r *Registry) acceptCleaning(ctx context.Context, rep *probe.CleaningReport, token string) *outcome {
	srv, out := r.lookup(ctx, rep.SystemUUID)
	if out != nil {
		return out
	}
	fromCache := true
	for attempt := 1; ; attempt++ {
		round, out := r.authenticate(ctx, srv, token, discovery.PurposeCleaning, &fromCache)
		if out != nil {
			out.server = srv.Name
			return out
		}
		if NormalizeUUID(rep.DMIUUID) != NormalizeUUID(srv.Spec.SystemUUID) {
			got, want := strings.ToLower(strings.TrimSpace(rep.DMIUUID)), strings.ToLower(strings.TrimSpace(srv.Spec.SystemUUID))
			if r.opts.Recorder != nil {
				r.opts.Recorder.Eventf(srv, nil, corev1.EventTypeWarning, ReasonReportFromWrongMachine, "Clean",
					"refused a cleaning report from the machine with DMI system UUID %s: this server's system UUID is %s", got, want)
			}
			return &outcome{code: http.StatusForbidden, result: resultWrongMachine, server: srv.Name, round: round,
				msg: fmt.Sprintf("this machine's DMI system UUID %s is not the server's system UUID %s", got, want),
				err: fmt.Errorf("DMI system UUID %s in the cleaning report, server %s has system UUID %s", got, srv.Name, want)}
		}
		if discovery.Cleaned(srv, round) {
			return &outcome{code: http.StatusOK, result: resultDuplicate, server: srv.Name, round: round}
		}
		err := r.writeCleaning(ctx, srv, rep, round)
		if err == nil {
			return &outcome{code: http.StatusOK, result: resultAccepted, server: srv.Name, round: round}
		}
		if apierrors.IsNotFound(err) {
			return reject(http.StatusNotFound, resultUnknownServer, "no server with this UUID", err)
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

// writeCleaning appends the report to the server's record (read past the cache, written with
// its resourceVersion) and then marks the round cleaned with an optimistic lock on the Server,
// so the mark always means "the record holds this round's report".
func (r *Registry) writeCleaning(ctx context.Context, srv *metalv1alpha1.Server, rep *probe.CleaningReport, round string) error {
	key := client.ObjectKey{Namespace: r.opts.DiscoveryNamespace, Name: cleaning.ObjectName(srv.Name)}
	cur := &corev1.ConfigMap{}
	rec := &cleaning.Record{}
	switch err := r.reader.Get(ctx, key, cur); {
	case apierrors.IsNotFound(err):
		cur = nil
	case err != nil:
		return fmt.Errorf("reading the cleaning record of server %s: %w", srv.Name, err)
	case !ownedBy(cur, srv):
		// A former server's of this name: its history is not this one's.
		if err := r.client.Delete(ctx, cur, client.Preconditions{UID: &cur.UID, ResourceVersion: &cur.ResourceVersion}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the cleaning record of a former server %s: %w", srv.Name, err)
		}
		return apierrors.NewConflict(corev1.Resource("configmaps"), key.Name, errors.New("a former server's record was removed"))
	default:
		if rec, err = cleaning.Decode(cur); err != nil {
			// Unreadable history is kept aside in the event log only; the new entry starts afresh.
			r.log.Info("cleaning record unreadable, starting it again", "server", srv.Name, "error", err.Error())
			rec = &cleaning.Record{}
		}
	}
	rec.Server, rec.SystemUUID = srv.Name, srv.Spec.SystemUUID
	if _, ok := rec.Of(round); !ok {
		rec.Add(cleaning.Entry{Round: round, Policy: rep.Policy, Reported: time.Now().UTC().Truncate(time.Second), DMIUUID: strings.ToLower(rep.DMIUUID), Disks: rep.Disks})
		cm, err := cleaning.ConfigMap(r.opts.DiscoveryNamespace, *rec)
		if err != nil {
			return err
		}
		if err := controllerutil.SetOwnerReference(srv, cm, r.client.Scheme()); err != nil {
			return fmt.Errorf("owning the cleaning record of server %s: %w", srv.Name, err)
		}
		if cur == nil {
			if err := r.client.Create(ctx, cm); err != nil {
				if apierrors.IsAlreadyExists(err) {
					return apierrors.NewConflict(corev1.Resource("configmaps"), key.Name, err)
				}
				return fmt.Errorf("creating the cleaning record of server %s: %w", srv.Name, err)
			}
		} else {
			cm.ResourceVersion = cur.ResourceVersion
			if err := r.client.Update(ctx, cm); err != nil {
				return fmt.Errorf("updating the cleaning record of server %s: %w", srv.Name, err)
			}
		}
	}
	before := srv.DeepCopy()
	if srv.Annotations == nil {
		srv.Annotations = map[string]string{}
	}
	srv.Annotations[discovery.CleanedAnnotation] = round
	if err := r.client.Patch(ctx, srv, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("marking cleaning round %s of server %s reported: %w", round, srv.Name, err)
	}
	return nil
}

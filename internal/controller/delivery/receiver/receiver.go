// Package receiver serves the endpoint Infrahub's standard webhooks call: a signed artifact event
// wakes the InfrahubSyncs that deliver that artifact now instead of at their next poll.
//
// A delivery only wakes: the sync still queries Infrahub with its own credentials and applies
// what Infrahub answers, so a forged or replayed event can at worst cost a pass, and even that is
// refused (signature, timestamp, message id) and bounded (one wake per sync per interval).
// Polling stays the safety net for an event that never came.
//
// The wake is the requested-at annotation on the sync, written with the operator's identity:
// every replica serves the endpoint, and whichever leads reconciles.
package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/infrahub/webhook"
)

// Path is where the receiver takes deliveries.
const Path = "/v1/infrahub/webhook"

// Defaults.
const (
	DefaultInterval  = 10 * time.Second
	DefaultTolerance = 5 * time.Minute
	// maxBody bounds a delivery; Infrahub's artifact events are well under a kilobyte.
	maxBody = 1 << 20
	// keysFresh is how long keys read from the Secret are used before it is read again; a
	// delivery no key verifies reads it at once, but at most every keysRetry.
	keysFresh = time.Minute
	keysRetry = 5 * time.Second
)

// Options configure the receiver.
type Options struct {
	// Listener is where it serves; nil turns it off.
	Listener net.Listener
	// Secret holds the shared keys: every data entry is one (two while Infrahub's key rotates).
	Secret types.NamespacedName
	// Interval is the least time between two wakes of one sync.
	Interval time.Duration
	// Tolerance is how far a delivery's timestamp may be from now.
	Tolerance time.Duration
}

func (o Options) withDefaults() Options {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Tolerance <= 0 {
		o.Tolerance = DefaultTolerance
	}
	return o
}

// Receiver verifies deliveries and wakes the syncs they concern.
type Receiver struct {
	opts   Options
	reader client.Reader // the manager's cache: syncs and VidraResources
	secret client.Reader // the Secret, read directly: the caches hold no unlabelled Secrets
	log    logr.Logger
	now    func() time.Time

	keysMu   sync.Mutex
	keys     [][]byte
	keysAt   time.Time
	keysTry  time.Time
	replays  *seen
	wakes    *waker
	learnt   *definitions
	handlerF http.Handler
}

// Setup adds the receiver to mgr when o has a listener. Its index of syncs by branch is
// registered with mgr's cache here, before the cache starts.
func Setup(mgr manager.Manager, w client.Writer, o Options) (*Receiver, error) {
	if o.Listener == nil {
		return nil, nil
	}
	o = o.withDefaults()
	if o.Secret.Name == "" {
		return nil, errors.New("the Infrahub webhook receiver needs the Secret holding its shared key")
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &infrahubv1alpha1.InfrahubSync{}, BranchIndex, branchKeys); err != nil {
		return nil, fmt.Errorf("indexing InfrahubSyncs by branch: %w", err)
	}
	r := New(mgr.GetCache(), mgr.GetAPIReader(), w, mgr.GetLogger().WithName("infrahub-receiver"), o)
	if err := mgr.Add(r); err != nil {
		return nil, err
	}
	return r, nil
}

// New builds a receiver; Start serves it.
func New(reader, secret client.Reader, w client.Writer, log logr.Logger, o Options) *Receiver {
	o = o.withDefaults()
	r := &Receiver{opts: o, reader: reader, secret: secret, log: log, now: time.Now,
		replays: newSeen(o.Tolerance), learnt: newDefinitions()}
	r.wakes = newWaker(reader, w, o.Interval, log, r.now)
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+Path, r.serve)
	r.handlerF = mux
	return r
}

// Handler is the receiver's HTTP handler.
func (r *Receiver) Handler() http.Handler { return r.handlerF }

// NeedLeaderElection is false: every replica takes deliveries; the wake is an API write.
func (r *Receiver) NeedLeaderElection() bool { return false }

// Start serves on the listener until ctx ends.
func (r *Receiver) Start(ctx context.Context) error {
	srv := &http.Server{Handler: r.handlerF, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		MaxHeaderBytes: 64 << 10, IdleTimeout: 90 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(r.opts.Listener) }()
	go r.wakes.run(ctx)
	select {
	case err := <-errc:
		return fmt.Errorf("Infrahub webhook receiver: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}

// event is the part of Infrahub's webhook payload the receiver reads.
type event struct {
	Event  string  `json:"event"`
	Branch *string `json:"branch"`
	Data   struct {
		NodeID               string `json:"node_id"`
		ArtifactDefinitionID string `json:"artifact_definition_id"`
		Checksum             string `json:"checksum"`
	} `json:"data"`
}

func refuse(w http.ResponseWriter, code int, result, msg string) {
	deliveries.WithLabelValues(result).Inc()
	http.Error(w, msg, code)
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody))
	if err != nil {
		refuse(w, http.StatusRequestEntityTooLarge, "malformed", "delivery too large")
		return
	}
	if req.Header.Get(webhook.HeaderSignature) == "" {
		// Unsigned: refused before the key is even read.
		refuse(w, http.StatusUnauthorized, "unsigned", "delivery is not signed")
		return
	}
	keys, err := r.currentKeys(req.Context(), false)
	if err != nil {
		r.log.Error(err, "No shared key to verify Infrahub webhook deliveries", "secret", r.opts.Secret.String())
		refuse(w, http.StatusServiceUnavailable, "no_key", "no shared key configured")
		return
	}
	now := r.now()
	d, err := webhook.Verify(req.Header, body, keys, now, r.opts.Tolerance)
	if errors.Is(err, webhook.ErrBadSignature) {
		// The Secret may have a new key Infrahub already uses.
		if fresh, kerr := r.currentKeys(req.Context(), true); kerr == nil {
			d, err = webhook.Verify(req.Header, body, fresh, now, r.opts.Tolerance)
		}
	}
	switch {
	case errors.Is(err, webhook.ErrUnsigned):
		refuse(w, http.StatusUnauthorized, "unsigned", "delivery is not signed")
		return
	case errors.Is(err, webhook.ErrStale):
		refuse(w, http.StatusUnauthorized, "stale", "delivery is stale")
		return
	case errors.Is(err, webhook.ErrBadSignature):
		refuse(w, http.StatusUnauthorized, "bad_signature", "signature does not verify")
		return
	case err != nil:
		refuse(w, http.StatusBadRequest, "malformed", "malformed delivery")
		return
	}
	if !r.replays.first(d.ID, d.Timestamp, now) {
		refuse(w, http.StatusUnauthorized, "replayed", "delivery already received")
		return
	}
	var ev event
	if err := json.Unmarshal(body, &ev); err != nil {
		refuse(w, http.StatusBadRequest, "malformed", "payload is not an event")
		return
	}
	if !strings.HasPrefix(ev.Event, "infrahub.artifact.") || ev.Data.NodeID == "" {
		deliveries.WithLabelValues("ignored").Inc()
		w.WriteHeader(http.StatusAccepted)
		return
	}
	n, err := r.route(req.Context(), ev, now)
	if err != nil {
		// Accepted all the same: Infrahub retrying would not help, polling will.
		r.log.Error(err, "Routing an Infrahub artifact event", "artifact", ev.Data.NodeID)
	}
	deliveries.WithLabelValues("accepted").Inc()
	r.log.V(1).Info("Infrahub artifact event", "event", ev.Event, "artifact", ev.Data.NodeID,
		"checksum", ev.Data.Checksum, "syncs", n, "signed", d.Style)
	w.WriteHeader(http.StatusAccepted)
}

// currentKeys returns the shared keys, read from the Secret when they are old, or when force
// (a delivery no cached key verified) and the last read is not too recent.
func (r *Receiver) currentKeys(ctx context.Context, force bool) ([][]byte, error) {
	r.keysMu.Lock()
	defer r.keysMu.Unlock()
	now := r.now()
	fresh := len(r.keys) > 0 && now.Sub(r.keysAt) < keysFresh
	if fresh && !force || force && now.Sub(r.keysTry) < keysRetry {
		if len(r.keys) == 0 {
			return nil, errors.New("the Secret holds no key")
		}
		return r.keys, nil
	}
	r.keysTry = now
	var s corev1.Secret
	if err := r.secret.Get(ctx, r.opts.Secret, &s); err != nil {
		if apierrors.IsNotFound(err) {
			r.keys = nil
		}
		if len(r.keys) > 0 {
			return r.keys, nil // a transient failure: the keys read before still hold
		}
		return nil, fmt.Errorf("reading Secret %s: %w", r.opts.Secret, err)
	}
	keys := make([][]byte, 0, len(s.Data))
	for _, v := range s.Data {
		if k := []byte(strings.TrimSpace(string(v))); len(k) > 0 {
			keys = append(keys, k)
		}
	}
	r.keys, r.keysAt = keys, now
	if len(keys) == 0 {
		return nil, fmt.Errorf("Secret %s holds no key", r.opts.Secret)
	}
	return keys, nil
}

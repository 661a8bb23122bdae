package sealing

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// The seal (SealAnnotation) is how the controllers know that what an object asks of them was
// judged by admission with its writer's rights. Both kinds are cluster-scoped and the webhook is
// not always in the path (an object written before it was installed, or while its configuration
// was missing), so an admitted-* annotation or a ServiceAccount in the spec proves nothing on
// its own. The webhook seals an object only after the writer was found to have every right it
// needs (Admission.SealSync, SealResource); the operator seals the VidraResources it writes
// for a sync. The key is a Secret in the operator's namespace that only the operator reads.
//
// A mutating webhook sees no UID on create, so a seal written on create is bound to the
// object's name and its creation time (sealCreateWindow) instead, and one written on update to
// its UID: copied onto a namesake created later, neither verifies.

// KeySecret is the Secret, in the operator's namespace, that holds the seal key (data
// "key", 32 random bytes, created by the operator when absent). Deleting it rotates the key:
// every seal stops verifying until the objects are re-admitted (ReadmitAnnotation).
const KeySecret = "metalhub-delivery-seal"

const (
	sealKeyField = "key"
	KeyBytes     = 32
	sealVersion  = "v1"
	// sealCreateWindow bounds the difference between a create-time seal's time and the object's
	// creationTimestamp: the webhook's clock and the API server's, a request apart.
	sealCreateWindow = 5 * time.Minute
	// sealKeyTTL is how long a key read is used before it is read again (a rotation reaches
	// every replica within it).
	sealKeyTTL = time.Minute
)

// Level is what a seal vouches for.
type Level byte

const (
	// Unsealed: no seal, or one that does not verify.
	Unsealed Level = iota
	// Owned: the operator wrote the VidraResource for its controlling sync, a sync admission
	// did not seal: it belongs to that sync, and asks for nothing only admission grants.
	Owned
	// Admitted: admission found the writer had the rights for everything the object asks
	// (or the operator wrote it for a sync that was so sealed).
	Admitted
)

func (l Level) code() string {
	switch l {
	case Owned:
		return "o"
	case Admitted:
		return "a"
	}
	return ""
}

func levelOf(code string) Level {
	switch code {
	case "o":
		return Owned
	case "a":
		return Admitted
	}
	return Unsealed
}

// sealKeys reads (and the first time creates) the seal key.
type sealKeys struct {
	client    client.Client // creates the Secret
	reader    client.Reader // live reads: the manager's cache holds no Secret of this name
	namespace string
	now       func() time.Time

	mu     sync.Mutex
	key    []byte
	loaded time.Time
}

func NewKeys(c client.Client, r client.Reader, namespace string) *sealKeys {
	return &sealKeys{client: c, reader: r, namespace: namespace, now: time.Now}
}

// Get returns the key, read again after sealKeyTTL. A failed read keeps the key it had.
func (k *sealKeys) Get(ctx context.Context) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.key != nil && k.now().Sub(k.loaded) < sealKeyTTL {
		return k.key, nil
	}
	key, err := k.read(ctx)
	if err != nil {
		if k.key != nil && !errors.Is(err, errBadSealKey) {
			return k.key, nil
		}
		return nil, err
	}
	k.key, k.loaded = key, k.now()
	return key, nil
}

var errBadSealKey = errors.New("bad seal key")

func (k *sealKeys) read(ctx context.Context) ([]byte, error) {
	ref := client.ObjectKey{Namespace: k.namespace, Name: KeySecret}
	sec := &corev1.Secret{}
	err := k.reader.Get(ctx, ref, sec)
	if apierrors.IsNotFound(err) {
		key := make([]byte, KeyBytes)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("generating the seal key: %w", err)
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: k.namespace, Name: KeySecret,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "metalhub"}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{sealKeyField: key},
		}
		err = k.client.Create(ctx, sec)
		if apierrors.IsAlreadyExists(err) { // another replica was first
			sec = &corev1.Secret{}
			err = k.reader.Get(ctx, ref, sec)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the seal key Secret %s: %w", ref, err)
	}
	key := sec.Data[sealKeyField]
	if len(key) < KeyBytes {
		return nil, fmt.Errorf("%w: Secret %s holds no %q of %d bytes or more (delete it and the operator makes one)", errBadSealKey, ref, sealKeyField, KeyBytes)
	}
	return key, nil
}

// Sealer writes and verifies seals.
type Sealer struct {
	Keys *sealKeys
	Now  func() time.Time
	// AssumeSealed treats every object as sealed by admission: tests of this package, which
	// run no webhook, stand for a cluster where it sealed what they write.
	AssumeSealed bool
}

// sealedFields is what a seal covers of an object: what it makes the operator do.
type sealedFields struct {
	kind, name string
	fields     []string // "key=value", in a fixed order
}

func field(k, v string) string { return k + "=" + strconv.Quote(v) }

func destinationFields(d infrahubv1alpha1.Destination) []string {
	return []string{field("server", d.Server), field("namespace", d.Namespace),
		field("serviceAccountName", d.ServiceAccountName), field("serviceAccountNamespace", d.ServiceAccountNamespace)}
}

func syncFields(s *infrahubv1alpha1.InfrahubSync) sealedFields {
	src := s.Spec.Source
	f := destinationFields(s.Spec.Destination)
	f = append(f, field("infrahubAPIURL", src.InfrahubAPIURL), field("targetBranch", src.TargetBranch),
		field("targetDate", src.TargetDate), field("artefactName", src.ArtefactName), field("allowEmpty", strconv.FormatBool(src.AllowEmpty)),
		field("admittedCredentials", strings.TrimSpace(s.Annotations[infrahubv1alpha1.AdmittedCredentialsAnnotation])))
	return sealedFields{kind: "InfrahubSync", name: s.Name, fields: f}
}

func resourceFields(vr *infrahubv1alpha1.VidraResource) sealedFields {
	f := destinationFields(vr.Spec.Destination)
	ctrl := ""
	if ref := metav1.GetControllerOf(vr); ref != nil {
		ctrl = strings.Join([]string{ref.APIVersion, ref.Kind, ref.Name, string(ref.UID)}, "/")
	}
	hash, _ := manifests.Digest(vr)
	f = append(f, field("controller", ctrl), field("manifestSHA256", hash),
		field("admittedKubeconfig", strings.TrimSpace(vr.Annotations[infrahubv1alpha1.AdmittedKubeconfigAnnotation])))
	return sealedFields{kind: "VidraResource", name: vr.Name, fields: f}
}

func fieldsOf(obj client.Object) (sealedFields, error) {
	switch o := obj.(type) {
	case *infrahubv1alpha1.InfrahubSync:
		return syncFields(o), nil
	case *infrahubv1alpha1.VidraResource:
		return resourceFields(o), nil
	}
	return sealedFields{}, fmt.Errorf("no seal for a %T", obj)
}

// mac is the seal's HMAC over its level, time, UID and the object's sealed fields.
func mac(key []byte, level Level, at int64, uid types.UID, f sealedFields) string {
	h := hmac.New(sha256.New, key)
	_, _ = fmt.Fprintf(h, "metalhub-delivery-seal %s\nlevel=%s\nat=%d\nuid=%s\nkind=%s\nname=%s\n%s",
		sealVersion, level.code(), at, uid, f.kind, f.name, strings.Join(f.fields, "\n"))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// Seal writes obj's seal at level: bound to its UID once it has one, else to now (a create).
func (s *Sealer) Seal(ctx context.Context, obj client.Object, level Level) error {
	if level == Unsealed {
		Unseal(obj)
		return nil
	}
	key, err := s.Keys.Get(ctx)
	if err != nil {
		return err
	}
	f, err := fieldsOf(obj)
	if err != nil {
		return err
	}
	at := s.Now().Unix()
	uid := obj.GetUID()
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[infrahubv1alpha1.SealAnnotation] = strings.Join([]string{sealVersion, level.code(), strconv.FormatInt(at, 10), string(uid), mac(key, level, at, uid, f)}, ".")
	obj.SetAnnotations(ann)
	return nil
}

// Unseal removes obj's seal.
func Unseal(obj client.Object) {
	ann := obj.GetAnnotations()
	if _, ok := ann[infrahubv1alpha1.SealAnnotation]; ok {
		delete(ann, infrahubv1alpha1.SealAnnotation)
		obj.SetAnnotations(ann)
	}
}

// Level says what obj's seal vouches for, and why it vouches for nothing (for the report).
func (s *Sealer) Level(ctx context.Context, obj client.Object) (Level, string) {
	if s.AssumeSealed {
		return Admitted, ""
	}
	v := obj.GetAnnotations()[infrahubv1alpha1.SealAnnotation]
	if v == "" {
		return Unsealed, "it carries no seal"
	}
	parts := strings.SplitN(v, ".", 5)
	if len(parts) != 5 || parts[0] != sealVersion || levelOf(parts[1]) == Unsealed {
		return Unsealed, "its seal is malformed"
	}
	at, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return Unsealed, "its seal is malformed"
	}
	key, err := s.Keys.Get(ctx)
	if err != nil {
		return Unsealed, fmt.Sprintf("the seal key cannot be read: %v", err)
	}
	f, err := fieldsOf(obj)
	if err != nil {
		return Unsealed, err.Error()
	}
	level, uid := levelOf(parts[1]), types.UID(parts[3])
	if !hmac.Equal([]byte(mac(key, level, at, uid, f)), []byte(parts[4])) {
		return Unsealed, "its seal does not match it (changed since it was sealed, or sealed with another key)"
	}
	switch {
	case uid != "" && uid != obj.GetUID():
		return Unsealed, "its seal is another object's"
	case uid == "":
		created := obj.GetCreationTimestamp().Unix()
		if d := time.Duration(created-at) * time.Second; d > sealCreateWindow || d < -sealCreateWindow {
			return Unsealed, "its seal was written for an earlier object of its name"
		}
	}
	return level, ""
}

// UnsealedError is the report of an object that asks what only admission grants, unsealed.
func UnsealedError(kind, name, asks, why string) error {
	return lifecycle.Reasonf(infrahubv1alpha1.ReasonUnsealed,
		"%s, which the operator honours only on a %s its admission webhook sealed, and %s: nothing applied. "+
			"Re-admit it as someone with the rights it needs: kubectl annotate %s %s %s=\"$(date +%%s)\" --overwrite",
		asks, kind, why, strings.ToLower(kind), name, infrahubv1alpha1.ReadmitAnnotation)
}

// VerifySeal says what obj's seal vouches for — "admitted" (admission judged it with its
// writer's rights, or the operator wrote it for a sync so judged), "owned" (the operator wrote it
// for a sync admission did not seal) — or, as an error, why it vouches for nothing. The key is
// read from (or, when absent, made in) the seal Secret of namespace, the operator's.
func VerifySeal(ctx context.Context, c client.Client, namespace string, obj client.Object) (string, error) {
	s := &Sealer{Keys: NewKeys(c, c, namespace), Now: time.Now}
	switch level, why := s.Level(ctx, obj); level {
	case Admitted:
		return "admitted", nil
	case Owned:
		return "owned", nil
	default:
		return "", errors.New(why)
	}
}

// View is what an object's seal says, for the decisions that need admission.
type View struct {
	Kind, Name string
	Level      Level
	Why        string // why it vouches for nothing
}

// Admitted: admission judged what the object asks with its writer's rights.
func (v View) Admitted() bool { return v.Level == Admitted }

// View reads obj's seal.
func (s *Sealer) View(ctx context.Context, kind string, obj client.Object) View {
	level, why := s.Level(ctx, obj)
	return View{Kind: kind, Name: obj.GetName(), Level: level, Why: why}
}

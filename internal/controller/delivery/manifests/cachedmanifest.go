package manifests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

// The manager's cache holds every VidraResource of the cluster, and a manifest may be 1 MiB: a
// few hundred of them put the manager, metal family included, past its memory limit. So the
// cache keeps no manifest. It records the manifest's sha256 and length instead (all the sync
// compares), and a pass reads the manifest live when it applies (Of).

// CachedManifestAnnotation carries, in the cache only, "<sha256> <length> <nonce>" of the
// manifest the cache dropped. The nonce is this process's: the annotation, written to the API
// server by anyone, cannot pass for the cache's record.
const CachedManifestAnnotation = "cache.infrahub.operators.com/manifest"

// cacheNonce tells the cache's records from annotations written on the API server.
var cacheNonce = func() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// CacheByObject is what the delivery family needs of the manager's cache (ctrl.Options
// Cache.ByObject): VidraResources without their manifest. The manager and every cache that
// holds VidraResources in the operator's process use it.
func CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{&infrahubv1alpha1.VidraResource{}: {Transform: Strip}}
}

var stripManagedFields = cache.TransformStripManagedFields()

// Strip drops a VidraResource's manifest (and, as the cache's default transform does,
// its managed fields), recording the manifest's digest.
func Strip(obj any) (any, error) {
	obj, err := stripManagedFields(obj)
	if err != nil {
		return obj, err
	}
	vr, ok := obj.(*infrahubv1alpha1.VidraResource)
	if !ok {
		return obj, nil
	}
	if vr.Annotations == nil {
		vr.Annotations = map[string]string{}
	}
	vr.Annotations[CachedManifestAnnotation] = fmt.Sprintf("%s %d %s", Hash(vr.Spec.Manifest), len(vr.Spec.Manifest), cacheNonce)
	vr.Spec.Manifest = ""
	return vr, nil
}

// Digest is the sha256 and length of vr's manifest: the cache's record when the cache
// dropped it, else computed from the manifest vr holds.
func Digest(vr *infrahubv1alpha1.VidraResource) (hash string, size int) {
	if f := strings.Fields(vr.Annotations[CachedManifestAnnotation]); vr.Spec.Manifest == "" && len(f) == 3 && f[2] == cacheNonce {
		if n, err := strconv.Atoi(f[1]); err == nil {
			return f[0], n
		}
	}
	return Hash(vr.Spec.Manifest), len(vr.Spec.Manifest)
}

// Of reads vr's manifest from the API server: the cache holds none. current is false
// when the cache is behind (the live object is of another generation, or gone: the event that
// brings the cache up to date brings the next pass); the manifest is the live generation's.
func Of(ctx context.Context, r client.Reader, vr *infrahubv1alpha1.VidraResource) (manifest string, current bool, err error) {
	live := &infrahubv1alpha1.VidraResource{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(vr), live); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return "", false, nil
		}
		return "", false, fmt.Errorf("reading the manifest of VidraResource %s: %w", vr.Name, err)
	}
	if live.UID != vr.UID {
		return "", false, nil // another VidraResource of the name
	}
	return live.Spec.Manifest, live.Generation == vr.Generation, nil
}

package claim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/metadata"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;delete

// A claim's metadata token is what identifies its machine to the metadata service
// (internal/metadata): random, one per claim, kept in a Secret the claim owns (its boot
// configuration names it, so a boot provider can hand it to the machine) and recorded as a
// hash, with the claim's UID, on the Server it holds. The Secret is the truth; the Server's
// record is made from it, and remade when it differs. Deleting the Secret rotates the token.

// metadataToken returns the token of claim c: the one in its token Secret, else a new one
// that is not stored yet (stored false). A Secret of that name that is not the claim's is a
// conflict, reported by message. live looks past the cache when it has no Secret.
func (r *Reconciler) metadataToken(ctx context.Context, cl client.Reader, c *metalv1alpha1.ServerClaim, live bool) (token string, stored bool, conflict string, err error) {
	key := client.ObjectKey{Namespace: c.Namespace, Name: metadata.TokenSecretName(c.Name)}
	sec := &corev1.Secret{}
	err = cl.Get(ctx, key, sec)
	if apierrors.IsNotFound(err) && live && r.APIReader != nil {
		// Made moments ago by this replica's binding pass and not cached yet: a new token now
		// would only be refused by the API server and the record made twice.
		err = r.APIReader.Get(ctx, key, sec)
	}
	switch {
	case apierrors.IsNotFound(err):
		token, err = metadata.NewToken()
		return token, false, "", err
	case err != nil:
		return "", false, "", fmt.Errorf("reading metadata token Secret %s: %w", key, err)
	case !metav1.IsControlledBy(sec, c) && leftOfEarlierClaim(sec, c):
		// A gone claim of the same name left it (its finalizer was skipped, or the garbage
		// collector has not come by): it is no one's, and its token must not carry over.
		uid := sec.UID
		if err := r.Client.Delete(ctx, sec, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return "", false, "", fmt.Errorf("deleting the metadata token Secret %s of an earlier claim: %w", key, err)
		}
		token, err = metadata.NewToken()
		return token, false, "", err
	case !metav1.IsControlledBy(sec, c):
		return "", false, fmt.Sprintf("Secret %s exists and belongs to someone else: no metadata token for the server", key), nil
	case len(sec.Data[metadata.TokenKey]) == 0:
		return "", false, fmt.Sprintf("metadata token Secret %s has no key %q; delete it for a new token", key, metadata.TokenKey), nil
	}
	return string(sec.Data[metadata.TokenKey]), true, "", nil
}

// storeMetadataToken creates claim c's token Secret with token. One made meanwhile (by an
// earlier pass) is kept (exists true): the server must carry its token's record instead.
func storeMetadataToken(ctx context.Context, cl client.Client, c *metalv1alpha1.ServerClaim, token string) (exists bool, err error) {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: metadata.TokenSecretName(c.Name)},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{metadata.TokenKey: []byte(token)},
	}
	if err := controllerutil.SetControllerReference(c, sec, cl.Scheme()); err != nil {
		return false, err
	}
	err = cl.Create(ctx, sec)
	switch {
	case apierrors.IsAlreadyExists(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("creating metadata token Secret %s/%s: %w", sec.Namespace, sec.Name, err)
	}
	return false, nil
}

// ensureMetadataToken makes sure claim c has its token Secret and returns the record the
// server it holds must carry ("" with a conflict message when the claim has no token).
func (r *Reconciler) ensureMetadataToken(ctx context.Context, cl client.Client, c *metalv1alpha1.ServerClaim) (record, conflict string, err error) {
	token, stored, conflict, err := r.metadataToken(ctx, cl, c, true)
	if err != nil || conflict != "" {
		return "", conflict, err
	}
	if !stored {
		exists, err := storeMetadataToken(ctx, cl, c, token)
		if err != nil {
			return "", "", err
		}
		if exists {
			// Made by a pass running at the same time: its token is the one.
			if token, _, conflict, err = r.metadataToken(ctx, cl, c, true); err != nil || conflict != "" {
				return "", conflict, err
			}
		}
	}
	return metadata.TokenRecord(c.UID, token), "", nil
}

// leftOfEarlierClaim reports whether sec is controlled by another ServerClaim of c's name: an
// earlier claim, since two claims never share a namespace and name at once.
func leftOfEarlierClaim(sec *corev1.Secret, c *metalv1alpha1.ServerClaim) bool {
	ref := metav1.GetControllerOf(sec)
	return ref != nil && ref.Kind == "ServerClaim" && ref.Name == c.Name && ref.UID != c.UID &&
		ref.APIVersion == metalv1alpha1.GroupVersion.String()
}

// deleteMetadataToken deletes claim c's token Secret when the claim lets its server go; one
// that is not c's is left alone.
func deleteMetadataToken(ctx context.Context, cl client.Client, c *metalv1alpha1.ServerClaim) error {
	sec := &corev1.Secret{}
	key := client.ObjectKey{Namespace: c.Namespace, Name: metadata.TokenSecretName(c.Name)}
	err := cl.Get(ctx, key, sec)
	switch {
	case err == nil && metav1.IsControlledBy(sec, c) && sec.DeletionTimestamp.IsZero():
		uid := sec.UID
		if err := cl.Delete(ctx, sec, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting metadata token Secret %s: %w", key, err)
		}
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("reading metadata token Secret %s: %w", key, err)
	}
	return nil
}

package metal

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

// +kubebuilder:rbac:groups="",resources=secrets,verbs=create

// A claim's metadata token is what identifies its machine to the metadata service
// (internal/metadata): random, one per claim, kept in a Secret the claim owns (its boot
// configuration names it, so a boot provider can hand it to the machine) and recorded as a
// hash, with the claim's UID, on the Server it holds. The Secret is the truth; the Server's
// record is made from it, and remade when it differs. Deleting the Secret rotates the token.

// metadataToken returns the token of claim c: the one in its token Secret, else a new one
// that is not stored yet (stored false). A Secret of that name that is not the claim's is a
// conflict, reported by message. live looks past the cache when it has no Secret.
func (r *ServerClaimReconciler) metadataToken(ctx context.Context, cl client.Reader, c *metalv1alpha1.ServerClaim, live bool) (token string, stored bool, conflict string, err error) {
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
func (r *ServerClaimReconciler) ensureMetadataToken(ctx context.Context, cl client.Client, c *metalv1alpha1.ServerClaim) (record, conflict string, err error) {
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

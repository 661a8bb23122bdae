// Package bootrequest holds what a claim or a maintenance asks to boot: the
// ServerBootConfiguration it owns (created, kept to the spec it wants, deleted by it, always with
// its controller reference, one owner for both so that they behave alike) and the check of the
// user's boot input (an image, the ignition Secret).
//
// It writes no object but that ServerBootConfiguration, never its status (the provider's) and
// never a Server. It imports no controller package nor the assembly (hack/layers.sh).
package bootrequest

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

// errBootConfigurationTaken says the name is used by someone else's boot configuration: a
// user's mistake, reported rather than retried.
type errBootConfigurationTaken struct{ msg string }

func (e errBootConfigurationTaken) Error() string { return e.msg }

// EnsureOwned creates the boot configuration key with spec, owned by owner, or
// brings an existing one of owner's to spec. One that belongs to someone else is left alone:
// errBootConfigurationTaken.
func EnsureOwned(ctx context.Context, cl client.Client, owner client.Object, key client.ObjectKey, spec metalv1alpha1.ServerBootConfigurationSpec) error {
	sbc := &metalv1alpha1.ServerBootConfiguration{}
	err := cl.Get(ctx, key, sbc)
	switch {
	case apierrors.IsNotFound(err):
		sbc = &metalv1alpha1.ServerBootConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Spec: spec}
		if err := controllerutil.SetControllerReference(owner, sbc, cl.Scheme()); err != nil {
			return err
		}
		if err := cl.Create(ctx, sbc); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating boot configuration %s: %w", key, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading boot configuration %s: %w", key, err)
	case !metav1.IsControlledBy(sbc, owner):
		return errBootConfigurationTaken{fmt.Sprintf("ServerBootConfiguration %s exists and belongs to someone else", key)}
	case !equality.Semantic.DeepEqual(sbc.Spec, spec):
		sbc.Spec = spec
		if err := cl.Update(ctx, sbc); err != nil {
			return fmt.Errorf("updating boot configuration %s: %w", key, err)
		}
	}
	return nil
}

// DeleteOwned deletes the boot configuration key if owner owns it (and it is
// not already going); someone else's, or none, is no error.
func DeleteOwned(ctx context.Context, cl client.Client, owner client.Object, key client.ObjectKey) error {
	sbc := &metalv1alpha1.ServerBootConfiguration{}
	err := cl.Get(ctx, key, sbc)
	switch {
	case err == nil && metav1.IsControlledBy(sbc, owner) && sbc.DeletionTimestamp.IsZero():
		if err := cl.Delete(ctx, sbc); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting boot configuration %s: %w", key, err)
		}
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("reading boot configuration %s: %w", key, err)
	}
	return nil
}

// Taken returns the message of an errBootConfigurationTaken.
func Taken(err error) (string, bool) {
	var taken errBootConfigurationTaken
	if errors.As(err, &taken) {
		return taken.msg, true
	}
	return "", false
}

// Problem is what is wrong with a user's input, as a condition reason and message.
type Problem struct{ Reason, Msg string }

// InputProblem checks what a boot needs from the user, for a claim (before it binds) and
// for the built-in boot provider alike: an image, and the ignition Secret if one is named. It
// returns the first problem, nil when there is none.
func InputProblem(ctx context.Context, c client.Reader, namespace, image string, ignition *corev1.LocalObjectReference) (*Problem, error) {
	if strings.TrimSpace(image) == "" {
		return &Problem{Reason: metalv1alpha1.ReasonImageMissing, Msg: "spec.image is empty: nothing to boot"}, nil
	}
	if ignition != nil && ignition.Name != "" {
		err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ignition.Name}, &corev1.Secret{})
		if apierrors.IsNotFound(err) {
			return &Problem{Reason: metalv1alpha1.ReasonIgnitionSecretNotFound, Msg: fmt.Sprintf("ignition Secret %s/%s not found", namespace, ignition.Name)}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading ignition Secret: %w", err)
		}
	}
	return nil, nil
}

package setup

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/pkg/rollout"
)

// The hub's revision key: a Secret in its own namespace, never anywhere
// else.
//
// The hub may read that one Secret and create Secrets there (RBAC cannot
// limit create by name); it cannot read any other Secret, its own
// certificates' included.
//
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get,resourceNames=flotilla-revision-key,namespace=flotilla-system
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create,namespace=flotilla-system

// RevisionKeySecretName is the Secret, in the hub's namespace, whose
// RevisionKeyField holds the key that signs rollout revision templates.
const (
	RevisionKeySecretName = "flotilla-revision-key"
	RevisionKeyField      = "key"
)

// EnsureRevisionKey returns the hub's revision key (see pkg/rollout: it
// signs the revision templates kept in MyApp status), creating the Secret
// with 32 random bytes the first time. reader must not be a cache. A new key
// (the Secret deleted, or a hub restored without its Secrets) makes the
// templates of rollouts under way unverifiable: those apps go straight to
// their desired revision, as if no rollout had been under way.
func EnsureRevisionKey(ctx context.Context, reader client.Reader, writer client.Client, namespace string) ([]byte, error) {
	key := make([]byte, rollout.MinKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generating a revision key: %w", err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: RevisionKeySecretName},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{RevisionKeyField: key},
	}
	if err := getOrCreate(ctx, reader, writer, secret, "the revision key"); err != nil {
		return nil, err
	}
	got := secret.Data[RevisionKeyField]
	if len(got) < rollout.MinKeyBytes {
		return nil, fmt.Errorf("secret %s/%s: %q holds %d bytes; a revision key needs at least %d (delete the Secret and the hub makes a new one)",
			namespace, RevisionKeySecretName, RevisionKeyField, len(got), rollout.MinKeyBytes)
	}
	return got, nil
}

package setup

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// The hub's fleet identity object.
//
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create

// hubNamespace is where the hub keeps its fleet identity.
func hubNamespace(opts Options) string {
	for _, ns := range []string{opts.Namespace, opts.LeaderElectionNamespace, os.Getenv("POD_NAMESPACE")} {
		if ns != "" {
			return ns
		}
	}
	return flotillav1.SystemNamespace
}

// EnsureFleetID returns the hub's fleet id: the UID of ConfigMap
// flotilla-fleet in namespace, which it creates (and the namespace, if
// missing) the first time. The UID is the apiserver's, so a hub restored
// from a backup of its objects, or installed again after an uninstall,
// gets a new fleet id, and the agents that served the old one refuse it
// rather than prune their members to its Works. It reads with reader,
// which must not be a cache (a cold cache would make it create a second
// object).
func EnsureFleetID(ctx context.Context, reader client.Reader, writer client.Client, namespace string) (string, error) {
	key := client.ObjectKey{Namespace: namespace, Name: flotillav1.FleetConfigMapName}
	cm := &corev1.ConfigMap{}
	err := reader.Get(ctx, key, cm)
	if err == nil {
		return string(cm.UID), nil
	}
	if !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("reading the fleet identity %s: %w", key, err)
	}
	cm = &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: flotillav1.FleetConfigMapName},
		Data: map[string]string{
			"README": "The UID of this ConfigMap is this hub's fleet id. Agents record it and refuse a hub with another one. " +
				"Deleting this ConfigMap gives the hub a new fleet id: every agent then refuses it until re-pointed with --accept-fleet-id.",
		},
	}
	err = writer.Create(ctx, cm)
	if apierrors.IsNotFound(err) {
		// The namespace is missing (a hub run as a local process).
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
		if err := writer.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("creating namespace %s for the fleet identity: %w", namespace, err)
		}
		err = writer.Create(ctx, cm)
	}
	if apierrors.IsAlreadyExists(err) {
		// Another replica created it first.
		if err := reader.Get(ctx, key, cm); err != nil {
			return "", fmt.Errorf("reading the fleet identity %s: %w", key, err)
		}
		return string(cm.UID), nil
	}
	if err != nil {
		return "", fmt.Errorf("creating the fleet identity %s: %w", key, err)
	}
	return string(cm.UID), nil
}

// ensureFleetID is EnsureFleetID retried while the apiserver fails, until
// ctx ends.
func ensureFleetID(ctx context.Context, reader client.Reader, writer client.Client, namespace string) (string, error) {
	delay := 500 * time.Millisecond
	for {
		id, err := EnsureFleetID(ctx, reader, writer, namespace)
		if err == nil || ctx.Err() != nil {
			return id, err
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
	}
}

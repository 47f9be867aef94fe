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

// The hub's fleet identity object, in the hub's own namespace: the
// namespaced Role there grants it, not a cluster-wide rule.
//
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create,namespace=flotilla-system

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
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: flotillav1.FleetConfigMapName},
		Data: map[string]string{
			"README": "The UID of this ConfigMap is this hub's fleet id. Agents record it and refuse a hub with another one. " +
				"Deleting this ConfigMap gives the hub a new fleet id: every agent then refuses it until re-pointed with --accept-fleet-id.",
		},
	}
	if err := getOrCreate(ctx, reader, writer, cm, "the fleet identity"); err != nil {
		return "", err
	}
	return string(cm.UID), nil
}

// getOrCreate reads obj (by its namespace and name) into obj, or creates it
// as given (and its namespace, when missing) the first time; when another
// replica created it first, it reads theirs. what names it in errors.
func getOrCreate(ctx context.Context, reader client.Reader, writer client.Client, obj client.Object, what string) error {
	key := client.ObjectKeyFromObject(obj)
	err := reader.Get(ctx, key, obj)
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading %s %s: %w", what, key, err)
	}
	err = writer.Create(ctx, obj)
	if apierrors.IsNotFound(err) {
		// The namespace is missing (a hub run as a local process).
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: key.Namespace}}
		if err := writer.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s for %s: %w", key.Namespace, what, err)
		}
		err = writer.Create(ctx, obj)
	}
	if apierrors.IsAlreadyExists(err) {
		// Another replica created it first.
		if err := reader.Get(ctx, key, obj); err != nil {
			return fmt.Errorf("reading %s %s: %w", what, key, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating %s %s: %w", what, key, err)
	}
	return nil
}

// ensureFleetID is EnsureFleetID retried while the apiserver fails, until
// ctx ends.
func ensureFleetID(ctx context.Context, reader client.Reader, writer client.Client, namespace string) (string, error) {
	return ensureFleetIDReporting(ctx, reader, writer, namespace, nil)
}

// ensureFleetIDReporting is ensureFleetID telling failed (when not nil)
// of each failure it retries, for the leader's readiness check.
func ensureFleetIDReporting(ctx context.Context, reader client.Reader, writer client.Client, namespace string, failed func(error)) (string, error) {
	delay := 500 * time.Millisecond
	for {
		id, err := EnsureFleetID(ctx, reader, writer, namespace)
		if err == nil || ctx.Err() != nil {
			return id, err
		}
		if failed != nil {
			failed(err)
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
	}
}

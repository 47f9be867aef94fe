package setup

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// The hub reports its version in its status ConfigMap.
//
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update,namespace=flotilla-system

// Version is the hub's version, set at link time
// (-ldflags "-X github.com/flotilla-dev/flotilla/hub/setup.Version=v0.2.0").
var Version = "dev"

// HubStatusVersionKey is the key of the hub status ConfigMap
// (flotilla-hub-status) that holds the version of the hub that leads:
// `kubectl flotilla version` reads it.
const HubStatusVersionKey = "version"

// ReportVersion writes version into the hub status ConfigMap in
// namespace, creating it when missing, and leaves its other keys (the
// partition brake's) as they are. It writes nothing when the version is
// already there.
func ReportVersion(ctx context.Context, reader client.Reader, writer client.Client, namespace, version string) error {
	cm := &corev1.ConfigMap{}
	err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: flotillav1.HubStatusConfigMapName}, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: flotillav1.HubStatusConfigMapName,
				Labels: map[string]string{"app.kubernetes.io/part-of": "flotilla"}},
			Data: map[string]string{HubStatusVersionKey: version},
		}
		err = writer.Create(ctx, cm)
	case err != nil:
	case cm.Data[HubStatusVersionKey] == version:
		return nil
	default:
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[HubStatusVersionKey] = version
		// The resourceVersion read above guards the update: a concurrent
		// write of the partition brake makes it fail, and it is retried.
		err = writer.Update(ctx, cm)
	}
	if err != nil {
		return fmt.Errorf("writing the hub version to ConfigMap %s/%s: %w", namespace, flotillav1.HubStatusConfigMapName, err)
	}
	return nil
}

// versionReporter writes the leader's version once it leads, retrying
// while the apiserver fails.
type versionReporter struct {
	reader    client.Reader
	writer    client.Client
	namespace string
	log       logr.Logger
}

func (r *versionReporter) NeedLeaderElection() bool { return true }

func (r *versionReporter) Start(ctx context.Context) error {
	delay := 500 * time.Millisecond
	for {
		err := ReportVersion(ctx, r.reader, r.writer, r.namespace, Version)
		if err == nil {
			return nil
		}
		r.log.Info("retrying", "error", err.Error())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
}

package syncbridge

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

// +kubebuilder:rbac:groups=flotilla.dev,resources=works,verbs=get;list;watch;update;patch

// Finalizer completes the deletion of a Work once its member's agent is
// done with it: it removes the Work's finalizer flotilla.dev/member-cleanup
// (a DeletionSink of the sync server).
type Finalizer struct {
	// Client removes the finalizer (and reads a Work again on a conflict).
	Client client.Client
	// Reader reads Works (the cache).
	Reader client.Reader
}

var _ syncserver.DeletionSink = (*Finalizer)(nil)

// WorkGone implements DeletionSink. Only a Work being deleted loses its
// finalizer: a Work of the same name that is not (a new one) is left
// alone. Errors are logged; the agent's next hello (which no longer lists
// the Work) confirms it again, and the MyApp controller's cleanup timeout
// bounds the wait.
func (f *Finalizer) WorkGone(ctx context.Context, cluster, name string) {
	key := client.ObjectKey{Namespace: flotillav1.ClusterNamespace(cluster), Name: name}
	if err := f.release(ctx, key); err != nil {
		log.FromContext(ctx).Error(err, "completing the deletion of a Work its member is done with", "work", key.String())
	}
}

func (f *Finalizer) release(ctx context.Context, key client.ObjectKey) error {
	w := &flotillav1.Work{}
	reader := f.Reader
	for attempt := 0; attempt < 3; attempt++ {
		if err := reader.Get(ctx, key, w); err != nil {
			return client.IgnoreNotFound(err)
		}
		if w.DeletionTimestamp.IsZero() || !slices.Contains(w.Finalizers, flotillav1.WorkFinalizer) {
			return nil
		}
		before := w.DeepCopy()
		controllerutil.RemoveFinalizer(w, flotillav1.WorkFinalizer)
		err := f.Client.Patch(ctx, w, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		switch {
		case err == nil:
			log.FromContext(ctx).V(1).Info("member confirmed; the Work's deletion completes", "work", key.String())
			return nil
		case apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err):
			// Read the live object: the cache is behind.
			reader = f.Client
		default:
			return err
		}
	}
	return fmt.Errorf("removing finalizer %s: conflicts on every attempt", flotillav1.WorkFinalizer)
}

// TerminatingWorks implements syncserver.TerminatingLister: the Works of
// cluster being deleted and held by the member-cleanup finalizer.
func (s *WorkSource) TerminatingWorks(cluster string) ([]string, error) {
	var list flotillav1.WorkList
	if err := s.cache.List(context.Background(), &list, client.InNamespace(flotillav1.ClusterNamespace(cluster)), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	var out []string
	for i := range list.Items {
		w := &list.Items[i]
		if !w.DeletionTimestamp.IsZero() && slices.Contains(w.Finalizers, flotillav1.WorkFinalizer) {
			out = append(out, w.Name)
		}
	}
	return out, nil
}

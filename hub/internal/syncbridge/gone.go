package syncbridge

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/finalizer"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

// +kubebuilder:rbac:groups=flotilla.dev,resources=works,verbs=get;list;watch;update;patch

// Finalizer completes the deletion of a Work once its member's agent is
// done with it: it removes the Work's finalizer flotilla.dev/member-cleanup
// (a DeletionSink of the sync server).
type Finalizer struct {
	// Client removes the finalizer.
	Client client.Client
	// Reader reads Works (the cache).
	Reader client.Reader
	// APIReader reads a Work live when the cache is behind (nil: Reader).
	APIReader client.Reader
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

// release removes the finalizer with a JSON patch that tests the entry it
// removes (finalizer.RemovePatch), so the agents' status writes to the
// same Work cannot make it fail; a finalizer list that changed meanwhile
// is read again, live.
func (f *Finalizer) release(ctx context.Context, key client.ObjectKey) error {
	reader := f.Reader
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		w := &flotillav1.Work{}
		if err := reader.Get(ctx, key, w); err != nil {
			return client.IgnoreNotFound(err)
		}
		if w.DeletionTimestamp.IsZero() {
			return nil
		}
		patch, ok, perr := finalizer.RemovePatch(w, flotillav1.WorkFinalizer)
		if perr != nil || !ok {
			return perr
		}
		err = f.Client.Patch(ctx, w, patch)
		switch {
		case err == nil:
			log.FromContext(ctx).V(1).Info("member confirmed; the Work's deletion completes", "work", key.String())
			return nil
		case apierrors.IsNotFound(err):
			return nil
		case apierrors.IsInvalid(err) || apierrors.IsConflict(err):
			// The finalizers changed since the read: read them live.
			if f.APIReader != nil {
				reader = f.APIReader
			}
		default:
			return err
		}
	}
	return fmt.Errorf("removing finalizer %s: the finalizer list kept changing: %w", flotillav1.WorkFinalizer, err)
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

package syncbridge

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

// WorkSource serves the sync server from the manager's Work informer.
type WorkSource struct {
	cache    cache.Cache
	informer cache.Informer
	// notify is the server's WorkChanged, set once the server exists.
	notify atomic.Pointer[func(cluster, name string)]
}

var _ syncserver.WorkSource = (*WorkSource)(nil)

// NewWorkSource gets (and so starts, with the cache) the Work informer and
// forwards its events to the function set with Notify.
func NewWorkSource(ctx context.Context, c cache.Cache) (*WorkSource, error) {
	inf, err := c.GetInformer(ctx, &flotillav1.Work{})
	if err != nil {
		return nil, fmt.Errorf("getting the Work informer: %w", err)
	}
	s := &WorkSource{cache: c, informer: inf}
	changed := func(obj any) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		w, ok := obj.(*flotillav1.Work)
		if !ok || !strings.HasPrefix(w.Namespace, flotillav1.ClusterNamespacePrefix) {
			return
		}
		if f := s.notify.Load(); f != nil {
			(*f)(strings.TrimPrefix(w.Namespace, flotillav1.ClusterNamespacePrefix), w.Name)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: changed,
		UpdateFunc: func(oldObj, newObj any) {
			// Status writes from agents' own reports need not go back to
			// them: only spec (generation) and deletion changes do.
			o, ok1 := oldObj.(*flotillav1.Work)
			n, ok2 := newObj.(*flotillav1.Work)
			if ok1 && ok2 && o.Generation == n.Generation && o.DeletionTimestamp.Equal(n.DeletionTimestamp) {
				return
			}
			changed(newObj)
		},
		DeleteFunc: changed,
	}); err != nil {
		return nil, fmt.Errorf("watching Works: %w", err)
	}
	return s, nil
}

// Notify sets the function told about every changed Work.
func (s *WorkSource) Notify(f func(cluster, name string)) { s.notify.Store(&f) }

// HasSynced implements WorkSource.
func (s *WorkSource) HasSynced() bool { return s.informer.HasSynced() }

// ListWorks implements WorkSource.
func (s *WorkSource) ListWorks(cluster string) ([]*flotillav1.Work, error) {
	var list flotillav1.WorkList
	// The server never modifies what it gets, so skip the deep copy: a
	// snapshot of a thousand Works is then no thousand allocations.
	if err := s.cache.List(context.Background(), &list, client.InNamespace(flotillav1.ClusterNamespace(cluster)), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	out := make([]*flotillav1.Work, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp.IsZero() {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// GetWork implements WorkSource.
func (s *WorkSource) GetWork(cluster, name string) (*flotillav1.Work, error) {
	w := &flotillav1.Work{}
	err := s.cache.Get(context.Background(), client.ObjectKey{Namespace: flotillav1.ClusterNamespace(cluster), Name: name}, w)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !w.DeletionTimestamp.IsZero() {
		return nil, nil
	}
	return w, nil
}

// Registry answers ClusterKnown from the MemberCluster cache.
type Registry struct{ Reader client.Reader }

var _ syncserver.ClusterRegistry = Registry{}

// ClusterKnown implements ClusterRegistry.
func (r Registry) ClusterKnown(ctx context.Context, cluster string) (bool, error) {
	err := r.Reader.Get(ctx, client.ObjectKey{Name: cluster}, &flotillav1.MemberCluster{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

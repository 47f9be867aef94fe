package syncbridge

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	// notify are told of every changed Work: the sync server's WorkChanged
	// and the push engine's, set once they exist.
	notify atomic.Pointer[[]func(cluster, name string)]
	// intents remembers, for Works that vanished, whether they carried
	// the deletion-intent annotation.
	intents intents
}

var _ syncserver.WorkSource = (*WorkSource)(nil)

// NewWorkSource gets (and so starts, with the cache) the Work informer and
// forwards its events to the function set with Notify.
func NewWorkSource(ctx context.Context, c cache.Cache) (*WorkSource, error) {
	inf, err := c.GetInformer(ctx, &flotillav1.Work{})
	if err != nil {
		return nil, fmt.Errorf("getting the Work informer: %w", err)
	}
	s := &WorkSource{cache: c, informer: inf, intents: intents{entries: make(map[string]intent)}}
	changed := func(obj any, deleted bool) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			// The informer missed the deletion and gives the last state it
			// saw: its annotations decide, so a mark it never saw counts
			// as none (and the Work is orphaned, the safe way to err).
			obj = d.Obj
		}
		w, ok := obj.(*flotillav1.Work)
		if !ok || !strings.HasPrefix(w.Namespace, flotillav1.ClusterNamespacePrefix) {
			return
		}
		// The intent is recorded before the server hears of the change,
		// since that is when it asks.
		key := w.Namespace + "/" + w.Name
		if deleted || !w.DeletionTimestamp.IsZero() {
			s.intents.record(key, w.Annotations[flotillav1.AnnotationDeletionIntent], time.Now())
		} else {
			s.intents.forget(key)
		}
		if fs := s.notify.Load(); fs != nil {
			for _, f := range *fs {
				f(strings.TrimPrefix(w.Namespace, flotillav1.ClusterNamespacePrefix), w.Name)
			}
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { changed(obj, false) },
		UpdateFunc: func(oldObj, newObj any) {
			// Status writes from agents' own reports need not go back to
			// them: only spec (generation) and deletion changes do.
			o, ok1 := oldObj.(*flotillav1.Work)
			n, ok2 := newObj.(*flotillav1.Work)
			if ok1 && ok2 && o.Generation == n.Generation && o.DeletionTimestamp.Equal(n.DeletionTimestamp) {
				return
			}
			changed(newObj, false)
		},
		DeleteFunc: func(obj any) { changed(obj, true) },
	}); err != nil {
		return nil, fmt.Errorf("watching Works: %w", err)
	}
	return s, nil
}

// Notify adds a function told about every changed Work (after its
// deletion intent is recorded). Call it before the informer starts: a
// function added later misses what came before.
func (s *WorkSource) Notify(f func(cluster, name string)) {
	for {
		old := s.notify.Load()
		var fs []func(cluster, name string)
		if old != nil {
			fs = append(fs, *old...)
		}
		fs = append(fs, f)
		if s.notify.CompareAndSwap(old, &fs) {
			return
		}
	}
}

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

// DeletionIntent implements WorkSource. A Work still held by its
// member-cleanup finalizer answers from its own annotation, which survives
// a hub restart; a Work gone answers from memory.
func (s *WorkSource) DeletionIntent(cluster, name string) (reason string, known bool) {
	w := &flotillav1.Work{}
	key := client.ObjectKey{Namespace: flotillav1.ClusterNamespace(cluster), Name: name}
	if err := s.cache.Get(context.Background(), key, w); err == nil && !w.DeletionTimestamp.IsZero() {
		return w.Annotations[flotillav1.AnnotationDeletionIntent], true
	}
	return s.intents.get(key.Namespace+"/"+name, time.Now())
}

// Bounds on what intents remembers. A Work's vanishing is asked about right
// after it (the server's queue sends it within seconds) or in the snapshot
// of an agent that was away; an agent away for longer than intentTTL, or a
// vanishing the hub did not see (it was down), is left to the snapshot's
// prune and the agent's deletion brake. When maxIntents Works vanished
// within intentTTL, further vanishings are not remembered: unknown, they
// are orphaned, never deleted.
const (
	intentTTL  = 24 * time.Hour
	maxIntents = 100_000
)

// intent is what a Work carried when it vanished.
type intent struct {
	reason string
	at     time.Time
}

// intents maps "namespace/name" of vanished Works to their intent.
type intents struct {
	mu        sync.Mutex
	entries   map[string]intent
	lastSweep time.Time
}

func (in *intents) record(key, reason string, now time.Time) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if _, ok := in.entries[key]; !ok && len(in.entries) >= maxIntents {
		in.sweepLocked(now)
		if len(in.entries) >= maxIntents {
			return
		}
	}
	in.entries[key] = intent{reason: reason, at: now}
	if now.Sub(in.lastSweep) > time.Minute {
		in.sweepLocked(now)
	}
}

func (in *intents) forget(key string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.entries, key)
}

func (in *intents) get(key string, now time.Time) (string, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	e, ok := in.entries[key]
	if !ok || now.Sub(e.at) > intentTTL {
		return "", false
	}
	return e.reason, true
}

func (in *intents) sweepLocked(now time.Time) {
	in.lastSweep = now
	for k, e := range in.entries {
		if now.Sub(e.at) > intentTTL {
			delete(in.entries, k)
		}
	}
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

package syncbridge

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/resourceversion"
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
	// written holds Works the hub wrote whose informer event has not come
	// yet (see Written).
	written written
}

// written maps "namespace/name" to the Work as the apiserver answered the
// hub's write, until the informer shows that state or a later one.
type written struct {
	mu      sync.Mutex
	entries map[string]*flotillav1.Work
}

var _ syncserver.WorkSource = (*WorkSource)(nil)

// NewWorkSource gets (and so starts, with the cache) the Work informer and
// forwards its events to the function set with Notify.
func NewWorkSource(ctx context.Context, c cache.Cache) (*WorkSource, error) {
	inf, err := c.GetInformer(ctx, &flotillav1.Work{})
	if err != nil {
		return nil, fmt.Errorf("getting the Work informer: %w", err)
	}
	s := &WorkSource{cache: c, informer: inf, intents: intents{entries: make(map[string]intent)}, written: written{entries: map[string]*flotillav1.Work{}}}
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
		s.written.caughtUp(key, w, deleted)
		s.notifyAll(w.Namespace, w.Name)
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

// notifyAll tells every function added with Notify that Work
// namespace/name changed.
func (s *WorkSource) notifyAll(namespace, name string) {
	if fs := s.notify.Load(); fs != nil {
		for _, f := range *fs {
			f(strings.TrimPrefix(namespace, flotillav1.ClusterNamespacePrefix), name)
		}
	}
}

// Written tells the sync server and the push engine of Work w, as the
// apiserver answered the hub's write of it, without waiting for the
// informer's event of that write: GetWork and ListWorks give w until the
// cache holds w's resourceVersion or a later one. Only what the apiserver
// stored is ever given out, so nothing is sent that a restarted hub would
// not send too. w is kept, not copied; the caller must not modify it.
//
// A Work whose vanishing the informer has shown (its deletion intent is
// remembered and no later creation was seen) is not taken: the answer
// could be older than the deletion, and then would bring back a Work that
// is gone. It is then the informer's event, as before, that tells.
func (s *WorkSource) Written(w *flotillav1.Work) {
	if w == nil || !strings.HasPrefix(w.Namespace, flotillav1.ClusterNamespacePrefix) || w.ResourceVersion == "" || !w.DeletionTimestamp.IsZero() {
		return
	}
	key := w.Namespace + "/" + w.Name
	if !s.written.put(key, w) {
		return
	}
	// Checked after the entry is in place: a deletion the informer shows
	// from now on drops the entry itself (caughtUp), one it showed before
	// is remembered in intents.
	if _, gone := s.intents.get(key, time.Now()); gone {
		s.written.drop(key, w)
		return
	}
	cached := &flotillav1.Work{}
	err := s.cache.Get(context.Background(), client.ObjectKey{Namespace: w.Namespace, Name: w.Name}, cached)
	switch {
	case err == nil && !newer(w, cached):
		// The informer was first: its event told already.
		s.written.drop(key, w)
		return
	case err != nil && !apierrors.IsNotFound(err):
		s.written.drop(key, w)
		return
	}
	s.notifyAll(w.Namespace, w.Name)
}

// Fresher returns the Work written for namespace/name (Written) when it
// is newer than cached (nil: the cache does not hold the Work), else nil,
// dropping an entry the cache has caught up with. The caller must not
// modify what it returns.
func (s *WorkSource) Fresher(namespace, name string, cached *flotillav1.Work) *flotillav1.Work {
	key := namespace + "/" + name
	w := s.written.get(key)
	if w == nil {
		return nil
	}
	if cached != nil && !newer(w, cached) {
		s.written.drop(key, w)
		return nil
	}
	return w
}

// newer says whether w is a later state of the Work than cached: the same
// Work (UID) at a later resourceVersion, or a Work created after cached
// (another UID and a later resourceVersion). A resourceVersion that does
// not compare counts as not newer, so the cache wins.
func newer(w, cached *flotillav1.Work) bool {
	c, err := resourceversion.CompareResourceVersion(w.ResourceVersion, cached.ResourceVersion)
	return err == nil && c > 0
}

// put records w for key unless a Work at w's resourceVersion or later is
// recorded; it says whether it recorded w.
func (wr *written) put(key string, w *flotillav1.Work) bool {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	if old := wr.entries[key]; old != nil && !newer(w, old) {
		return false
	}
	wr.entries[key] = w
	return true
}

func (wr *written) get(key string) *flotillav1.Work {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return wr.entries[key]
}

// drop removes key's entry if it still is w.
func (wr *written) drop(key string, w *flotillav1.Work) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	if wr.entries[key] == w {
		delete(wr.entries, key)
	}
}

// caughtUp is told of each informer event of Work w (key; deleted for a
// deletion). It drops key's entry once the informer shows a deletion, the
// entry's state or a later one.
func (wr *written) caughtUp(key string, w *flotillav1.Work, deleted bool) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	old := wr.entries[key]
	if old == nil {
		return
	}
	if deleted || !w.DeletionTimestamp.IsZero() || !newer(old, w) {
		delete(wr.entries, key)
	}
}

// inNamespace returns the written Works in namespace ns.
func (wr *written) inNamespace(ns string) []*flotillav1.Work {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	var out []*flotillav1.Work
	for _, w := range wr.entries {
		if w.Namespace == ns {
			out = append(out, w)
		}
	}
	return out
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
	// Works the hub wrote that the cache does not show yet: an agent may
	// hold them already (Written), and a snapshot without them would
	// prune them.
	ns := flotillav1.ClusterNamespace(cluster)
	for _, w := range s.written.inNamespace(ns) {
		i := slices.IndexFunc(list.Items, func(c flotillav1.Work) bool { return c.Name == w.Name })
		switch {
		case i < 0:
			out = append(out, w)
		case !newer(w, &list.Items[i]):
		case list.Items[i].DeletionTimestamp.IsZero():
			out[slices.Index(out, &list.Items[i])] = w
		}
	}
	return out, nil
}

// GetWork implements WorkSource.
func (s *WorkSource) GetWork(cluster, name string) (*flotillav1.Work, error) {
	ns := flotillav1.ClusterNamespace(cluster)
	w := &flotillav1.Work{}
	err := s.cache.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, w)
	switch {
	case apierrors.IsNotFound(err):
		w = nil
	case err != nil:
		return nil, err
	}
	if f := s.Fresher(ns, name, w); f != nil {
		return f.DeepCopy(), nil
	}
	if w == nil || !w.DeletionTimestamp.IsZero() {
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

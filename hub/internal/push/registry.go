package push

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// registry holds the engaged Push members' clusters: each runs until it
// is removed, and the field indexes the multicluster manager asks for are
// set on every cluster, also those engaged later.
//
// It is the provider's own rather than multicluster-runtime's
// clusters.Clusters for two reasons. A cluster that stops removes itself
// only while it is still the one registered under its name, so an
// engagement that replaces another (a changed kubeconfig, a member
// engaged afresh after Disengage) is not removed by the old one's exit.
// And it links no go-cmp, whose reflection on method names would keep
// every exported method of the hub's types in its executable (docs/
// architecture.md, "Executable size").
type registry struct {
	// onError hears of a cluster whose Start failed.
	onError func(err error, msg string, kv ...any)
	// waitCache bounds the wait for a new cluster's cache.
	waitCache time.Duration

	mu       sync.RWMutex
	clusters map[multicluster.ClusterName]*registered
	indexes  []fieldIndex
}

// registered is one engaged cluster and what stops it.
type registered struct {
	cl   cluster.Cluster
	stop context.CancelFunc
}

// fieldIndex is one IndexField call, kept for the clusters engaged later.
type fieldIndex struct {
	obj     client.Object
	field   string
	extract client.IndexerFunc
}

func newRegistry(waitCache time.Duration, onError func(err error, msg string, kv ...any)) *registry {
	return &registry{onError: onError, waitCache: waitCache, clusters: map[multicluster.ClusterName]*registered{}}
}

// add starts cl under name, waits for its cache, sets the field indexes
// on it and engages it with aware (when not nil). It fails, leaving
// nothing registered, if name is already taken, the cache does not sync
// within waitCache, an index or the engagement fails.
func (r *registry) add(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, aware multicluster.Aware) error {
	ctx, stop := context.WithCancel(ctx)
	entry := &registered{cl: cl, stop: stop}
	r.mu.Lock()
	if _, taken := r.clusters[name]; taken {
		r.mu.Unlock()
		stop()
		return fmt.Errorf("cluster %s is already engaged", name)
	}
	r.clusters[name] = entry
	indexes := slices.Clone(r.indexes)
	r.mu.Unlock()

	go func() {
		defer r.removeEntry(name, entry)
		if err := cl.Start(ctx); err != nil && r.onError != nil {
			r.onError(err, "a Push member's cluster stopped", "member", name)
		}
	}()
	fail := func(err error) error {
		r.removeEntry(name, entry)
		return err
	}
	wait, cancel := context.WithTimeout(ctx, r.waitCache)
	defer cancel()
	if !cl.GetCache().WaitForCacheSync(wait) {
		return fail(fmt.Errorf("the cache of cluster %s did not sync within %s", name, r.waitCache))
	}
	for _, ix := range indexes {
		if err := cl.GetFieldIndexer().IndexField(ctx, ix.obj, ix.field, ix.extract); err != nil {
			return fail(fmt.Errorf("indexing %s on cluster %s: %w", ix.field, name, err))
		}
	}
	if aware != nil {
		if err := aware.Engage(ctx, name, cl); err != nil {
			return fail(err)
		}
	}
	return nil
}

// remove stops and forgets the cluster under name, if any.
func (r *registry) remove(name multicluster.ClusterName) {
	r.mu.Lock()
	entry := r.clusters[name]
	delete(r.clusters, name)
	r.mu.Unlock()
	if entry != nil {
		entry.stop()
	}
}

// removeEntry stops entry and forgets it if it is still the cluster under
// name: a cluster replaced since stays.
func (r *registry) removeEntry(name multicluster.ClusterName, entry *registered) {
	r.mu.Lock()
	if r.clusters[name] == entry {
		delete(r.clusters, name)
	}
	r.mu.Unlock()
	entry.stop()
}

// get returns the cluster under name, or an error wrapping
// multicluster.ErrClusterNotFound.
func (r *registry) get(name multicluster.ClusterName) (cluster.Cluster, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	entry := r.clusters[name]
	if entry == nil {
		return nil, fmt.Errorf("cluster %s: %w", name, multicluster.ErrClusterNotFound)
	}
	return entry.cl, nil
}

// names lists the registered clusters, sorted.
func (r *registry) names() []multicluster.ClusterName {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.clusters))
}

// indexField sets a field index on every registered cluster and keeps it
// for those added later.
func (r *registry) indexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	r.mu.Lock()
	r.indexes = append(r.indexes, fieldIndex{obj: obj, field: field, extract: extract})
	now := maps.Clone(r.clusters)
	r.mu.Unlock()
	var errs []error
	for name, entry := range now {
		if err := entry.cl.GetFieldIndexer().IndexField(ctx, obj, field, extract); err != nil {
			errs = append(errs, fmt.Errorf("indexing %s on cluster %s: %w", field, name, err))
		}
	}
	return errors.Join(errs...)
}

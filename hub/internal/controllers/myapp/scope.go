package myapp

import (
	"context"
	"fmt"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// scope is everything one reconcile reads, read once at its start. The
// compute step only reads it; the write step patches against app.
type scope struct {
	// app is the MyApp as the cache has it.
	app *flotillav1.MyApp
	// clusters are the MemberClusters.
	clusters clusterSet
	// works are the app's Works by cluster name.
	works map[string]*flotillav1.Work
	// now is the reconcile's one reading of the clock.
	now time.Time
	// cleanupTimeout is the Reconciler's WorkCleanupTimeout.
	cleanupTimeout time.Duration
}

// clusterSet is the MemberClusters from the cache, as a list and by name.
type clusterSet struct {
	list   []flotillav1.MemberCluster
	byName map[string]*flotillav1.MemberCluster
}

// read reads the MemberClusters and app's Works from the cache.
func (r *Reconciler) read(ctx context.Context, app *flotillav1.MyApp) (*scope, error) {
	var list flotillav1.MemberClusterList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing MemberClusters: %w", err)
	}
	cs := clusterSet{list: list.Items, byName: make(map[string]*flotillav1.MemberCluster, len(list.Items))}
	for i := range cs.list {
		cs.byName[cs.list[i].Name] = &cs.list[i]
	}
	works, err := r.works(ctx, app.Namespace, app.Name)
	if err != nil {
		return nil, err
	}
	return &scope{app: app, clusters: cs, works: works, now: r.Clock.Now(), cleanupTimeout: r.cleanupTimeout()}, nil
}

// works returns the Works of MyApp namespace/name by cluster name.
func (r *Reconciler) works(ctx context.Context, namespace, name string) (map[string]*flotillav1.Work, error) {
	var list flotillav1.WorkList
	if err := r.Client.List(ctx, &list, client.MatchingLabels{
		flotillav1.LabelMyAppNamespace: namespace,
		flotillav1.LabelMyAppName:      name,
	}); err != nil {
		return nil, fmt.Errorf("listing Works of MyApp %s/%s: %w", namespace, name, err)
	}
	out := make(map[string]*flotillav1.Work, len(list.Items))
	for i := range list.Items {
		w := &list.Items[i]
		out[strings.TrimPrefix(w.Namespace, flotillav1.ClusterNamespacePrefix)] = w
	}
	return out, nil
}

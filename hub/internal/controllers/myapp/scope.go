package myapp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/render"
	"github.com/flotilla-dev/flotilla/pkg/rollout"
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
	// reported are the app's Works as their status is about to be written
	// (Reconciler.Reports), by cluster name, for those whose newest
	// status the cache does not hold yet. Only the app's status is
	// computed from them (see withReports).
	reported map[string]*flotillav1.Work
	// policies are the FleetNamespacePolicies: they decide whether the
	// app may place into its target namespace, and its Pod Security level.
	policies []flotillav1.FleetNamespacePolicy
	// now is the reconcile's one reading of the clock.
	now time.Time
	// cleanupTimeout is the Reconciler's WorkCleanupTimeout.
	cleanupTimeout time.Duration
	// revisionKey signs and verifies rollout revision templates; read only
	// for a Progressive app.
	revisionKey []byte
	// maxWorkBytes is the Reconciler's MaxWorkBytes.
	maxWorkBytes int
	// deps gives the ConfigMaps, Secrets and ServiceAccounts of the app's
	// namespace that its pods use, read as the rendering asks for them.
	deps render.DependencySource
}

// clusterSet is the MemberClusters from the cache, as a list and by name.
type clusterSet struct {
	list   []flotillav1.MemberCluster
	byName map[string]*flotillav1.MemberCluster
}

// read reads the MemberClusters, the FleetNamespacePolicies and app's
// Works from the cache.
func (r *Reconciler) read(ctx context.Context, app *flotillav1.MyApp) (*scope, error) {
	var list flotillav1.MemberClusterList
	// Not deep-copied: every reconcile reads every MemberCluster, and
	// copying 1,000 of them was a quarter of the hub's CPU at scale
	// (docs/benchmarks.md, Scale). The items share their maps and slices
	// with the cache, so nothing in the reconcile may modify them; the
	// scheduler and the status aggregation only read them.
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing MemberClusters: %w", err)
	}
	cs := clusterSet{list: list.Items, byName: make(map[string]*flotillav1.MemberCluster, len(list.Items))}
	for i := range cs.list {
		cs.byName[cs.list[i].Name] = &cs.list[i]
	}
	var policies flotillav1.FleetNamespacePolicyList
	if err := r.Client.List(ctx, &policies); err != nil {
		return nil, fmt.Errorf("listing FleetNamespacePolicies: %w", err)
	}
	works, err := r.works(ctx, app.Namespace, app.Name)
	if err != nil {
		return nil, err
	}
	s := &scope{app: app, clusters: cs, works: works, reported: r.reportedWorks(works), policies: policies.Items, now: r.Clock.Now(), cleanupTimeout: r.cleanupTimeout(), maxWorkBytes: r.maxWorkBytes(),
		deps: &hubDependencies{ctx: ctx, metadata: r.Client, content: r.APIReader, cache: &r.deps, namespace: app.Namespace}}
	if rollout.Enabled(&app.Spec) {
		if s.revisionKey, err = r.revisionKey(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// revisionKey returns the hub's revision key, read through RevisionKey the
// first time it is needed and kept from then on.
func (r *Reconciler) revisionKey(ctx context.Context) ([]byte, error) {
	r.keyMu.Lock()
	defer r.keyMu.Unlock()
	if r.key != nil {
		return r.key, nil
	}
	if r.RevisionKey == nil {
		return nil, errors.New("reading the revision key: the MyApp controller has no RevisionKey source, so it cannot run Progressive rollouts")
	}
	key, err := r.RevisionKey(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the revision key: %w", err)
	}
	if len(key) < rollout.MinKeyBytes {
		return nil, reconcile.TerminalError(fmt.Errorf("the revision key has %d bytes; at least %d are needed", len(key), rollout.MinKeyBytes))
	}
	r.key = key
	return key, nil
}

// works returns the Works of MyApp namespace/name by cluster name.
func (r *Reconciler) works(ctx context.Context, namespace, name string) (map[string]*flotillav1.Work, error) {
	var list flotillav1.WorkList
	// By the index, not the labels: a label selector on the cache looks at
	// every Work of the fleet, which at 30,000 Works was a fifth of the
	// hub's CPU (docs/benchmarks.md, Scale).
	if err := r.Client.List(ctx, &list, client.MatchingFields{workAppIndex: namespace + "/" + name}); err != nil {
		return nil, fmt.Errorf("listing Works of MyApp %s/%s: %w", namespace, name, err)
	}
	out := make(map[string]*flotillav1.Work, len(list.Items))
	for i := range list.Items {
		w := &list.Items[i]
		out[strings.TrimPrefix(w.Namespace, flotillav1.ClusterNamespacePrefix)] = w
	}
	return out, nil
}

// reportedWorks returns, for each of works whose status the status writer
// is about to change, a copy with that status (see scope.reported).
func (r *Reconciler) reportedWorks(works map[string]*flotillav1.Work) map[string]*flotillav1.Work {
	if r.Reports == nil {
		return nil
	}
	var out map[string]*flotillav1.Work
	for cluster, w := range works {
		st := r.Reports.Reported(w)
		if st == nil {
			continue
		}
		if out == nil {
			out = map[string]*flotillav1.Work{}
		}
		// A shallow copy: the status aggregation reads it and nothing
		// writes it.
		cp := *w
		cp.Status = *st
		out[cluster] = &cp
	}
	return out
}

// workAppIndex indexes Works by the MyApp they belong to
// (<namespace>/<name>, from their labels).
const workAppIndex = "flotilla.dev/myapp"

func workAppKeys(o client.Object) []string {
	l := o.GetLabels()
	ns, name := l[flotillav1.LabelMyAppNamespace], l[flotillav1.LabelMyAppName]
	if ns == "" || name == "" {
		return nil
	}
	return []string{ns + "/" + name}
}

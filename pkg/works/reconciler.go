package works

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/apply"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// Reconciler keeps held Works applied and reported. Its requests are Work
// names (the Name of the request; Namespace is empty), mapped from the
// flotilla.dev/work annotation of the Deployments it watches.
type Reconciler struct {
	// Reader reads the owned Deployments (a label-selected cache).
	Reader client.Reader
	Store  *Store
	// Resync re-examines every held Work this often, a backstop for
	// missed events (default 5 minutes).
	Resync time.Duration
}

var _ reconcile.Reconciler = &Reconciler{}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Resync == 0 {
		r.Resync = 5 * time.Minute
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("work").
		WatchesRawSource(source.Kind(mgr.GetCache(), &appsv1.Deployment{},
			handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, d *appsv1.Deployment) []reconcile.Request {
				return WorkOf(d)
			}))).
		WatchesRawSource(source.Kind(mgr.GetCache(), &corev1.Service{},
			handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, s *corev1.Service) []reconcile.Request {
				return WorkOf(s)
			}))).
		WatchesRawSource(source.Kind(mgr.GetCache(), &discoveryv1.EndpointSlice{},
			handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, s *discoveryv1.EndpointSlice) []reconcile.Request {
				return r.Store.WorkOfLabel(s.Labels[flotillav1.LabelWork])
			}))).
		WatchesRawSource(source.Kind(mgr.GetCache(), &corev1.ConfigMap{},
			handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o *corev1.ConfigMap) []reconcile.Request {
				return DependencyWorks(r.Store.applier.Holders, apply.ConfigMapKind, o)
			}))).
		WatchesRawSource(source.Kind(mgr.GetCache(), &corev1.Secret{},
			handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o *corev1.Secret) []reconcile.Request {
				return DependencyWorks(r.Store.applier.Holders, apply.SecretKind, o)
			}))).
		WatchesRawSource(source.Kind(mgr.GetCache(), &corev1.ServiceAccount{},
			handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o *corev1.ServiceAccount) []reconcile.Request {
				return DependencyWorks(r.Store.applier.Holders, apply.ServiceAccountKind, o)
			}))).
		WatchesRawSource(source.Channel(r.Store.events, handler.EnqueueRequestsFromMapFunc(
			func(_ context.Context, o client.Object) []reconcile.Request {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
			}))).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
}

// Reconcile re-applies Work req.Name when its objects drifted and reports
// its status.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if err := r.Store.Reconcile(ctx, req.Name, r.live); err != nil {
		return reconcile.Result{}, err
	}
	if r.Store.get(req.Name) == nil {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{RequeueAfter: r.Resync}, nil
}

// WorkOf is the request for the Work whose object o is (by Flotilla's
// annotation); none for an object without it.
func WorkOf(o client.Object) []reconcile.Request {
	name := o.GetAnnotations()[flotillav1.AnnotationWork]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
}

// DependencyWorks are the requests for the Works whose applied sets hold
// o, a shared dependency of kind gvk (holders is an Applier's Holders).
func DependencyWorks(holders func(flotillav1.ResourceIdentifier) []string, gvk schema.GroupVersionKind, o client.Object) []reconcile.Request {
	if o.GetLabels()[flotillav1.LabelDependency] != "true" {
		return nil
	}
	names := holders(flotillav1.ResourceIdentifier{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: o.GetNamespace(), Name: o.GetName()})
	out := make([]reconcile.Request, len(names))
	for i, n := range names {
		out[i] = reconcile.Request{NamespacedName: types.NamespacedName{Name: n}}
	}
	return out
}

// live lists work's objects from the cache.
func (r *Reconciler) live(work *flotillav1.Work) ([]kclient.Object, error) {
	return LiveObjects(context.Background(), r.Reader, work)
}

// liveList is one list LiveObjects makes: of which kind, selected how.
type liveList struct {
	list client.ObjectList
	gvk  schema.GroupVersionKind
	sel  client.MatchingLabels
}

// LiveObjects lists work's objects of every kind a Work carries
// (apply.WorkKinds) from reader, a cache that holds the objects carrying
// the flotilla.dev/work label (Deployments, Services) or, for shared
// dependencies (ConfigMaps, Secrets, ServiceAccounts), the
// flotilla.dev/dependency label, as NeedsApply and Store.Reconcile take
// them. (A kind left out here would look deleted to NeedsApply, and its
// Work would be applied again on every event.) Shared dependencies carry
// the hub namespace, not the Work: all of that namespace's are listed,
// and NeedsApply picks the ones the Work applied by UID.
func LiveObjects(ctx context.Context, reader client.Reader, work *flotillav1.Work) ([]kclient.Object, error) {
	owned := client.MatchingLabels{flotillav1.LabelWork: flotillav1.WorkLabelValue(work.Name)}
	lists := []liveList{
		{&appsv1.DeploymentList{}, apply.DeploymentKind, owned},
		{&corev1.ServiceList{}, apply.ServiceKind, owned},
	}
	if ns := work.Labels[flotillav1.LabelMyAppNamespace]; ns != "" {
		deps := client.MatchingLabels{flotillav1.LabelDependency: "true", flotillav1.LabelMyAppNamespace: ns}
		lists = append(lists,
			liveList{&corev1.ConfigMapList{}, apply.ConfigMapKind, deps},
			liveList{&corev1.SecretList{}, apply.SecretKind, deps},
			liveList{&corev1.ServiceAccountList{}, apply.ServiceAccountKind, deps})
	}
	var out []kclient.Object
	for _, l := range lists {
		if err := reader.List(ctx, l.list, l.sel); err != nil {
			return nil, fmt.Errorf("listing the %ss of Work %s: %w", l.gvk.Kind, work.Name, err)
		}
		items, err := meta.ExtractList(l.list)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			o := it.(kclient.Object)
			// NeedsApply compares kinds; the cache's typed objects carry none.
			o.GetObjectKind().SetGroupVersionKind(l.gvk)
			out = append(out, o)
		}
	}
	return out, nil
}

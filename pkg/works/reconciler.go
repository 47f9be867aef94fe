package works

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
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
				name := d.Annotations[flotillav1.AnnotationWork]
				if name == "" {
					return nil
				}
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
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

// live lists work's Deployments from the cache.
func (r *Reconciler) live(work *flotillav1.Work) ([]client.Object, error) {
	return LiveDeployments(context.Background(), r.Reader, work)
}

// LiveDeployments lists work's Deployments from reader (a cache that holds
// the objects carrying the flotilla.dev/work label), as NeedsApply and
// Store.Reconcile take them.
func LiveDeployments(ctx context.Context, reader client.Reader, work *flotillav1.Work) ([]client.Object, error) {
	var list appsv1.DeploymentList
	if err := reader.List(ctx, &list, client.MatchingLabels{flotillav1.LabelWork: flotillav1.WorkLabelValue(work.Name)}); err != nil {
		return nil, fmt.Errorf("listing the Deployments of Work %s: %w", work.Name, err)
	}
	out := make([]client.Object, 0, len(list.Items))
	for i := range list.Items {
		d := &list.Items[i]
		// NeedsApply compares kinds; the cache's typed objects carry none.
		d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
		out = append(out, d)
	}
	return out, nil
}

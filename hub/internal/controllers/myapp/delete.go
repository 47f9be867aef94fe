package myapp

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// reconcileDelete removes the app's Works, then its finalizer.
func (r *Reconciler) reconcileDelete(ctx context.Context, app *flotillav1.MyApp) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(app, flotillav1.MyAppFinalizer) {
		return reconcile.Result{}, nil
	}
	s, err := r.read(ctx, app)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(s.works) > 0 {
		// Each Work goes once its agent knows its deletion policy (see
		// removeWhenReady).
		var p plan
		for name, w := range s.works {
			if w.DeletionTimestamp.IsZero() {
				p.removeWhenReady(app, w, s.clusters.byName[name])
			}
		}
		if _, err := r.writeWorks(ctx, p, flotillav1.DeletionIntentMyAppDeleted); err != nil {
			return reconcile.Result{}, err
		}
		// Each Work goes once its member confirms (its finalizer), or
		// after the cleanup timeout; the MyApp has no status left to name
		// such a member in, so the event says it.
		expired, due := expiredWorks(s.works, s.now, s.cleanupTimeout)
		if err := r.releaseExpired(ctx, app, expired); err != nil {
			return reconcile.Result{}, err
		}
		// The Works' delete events requeue this MyApp; the poll is a
		// backstop in case the cache misses one.
		return reconcile.Result{RequeueAfter: min(5*time.Second, earliest(earliest(5*time.Second, p.requeueAfter), due))}, nil
	}
	patched := app.DeepCopy()
	controllerutil.RemoveFinalizer(patched, flotillav1.MyAppFinalizer)
	if err := r.Client.Patch(ctx, patched, client.MergeFrom(app)); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("removing the finalizer: %w", err)
	}
	r.clearAppMetrics(app)
	return reconcile.Result{}, nil
}

// deleteWorks deletes the Works of a MyApp that no longer exists, and
// lets those whose member did not confirm within the cleanup timeout go
// (there is no MyApp left to name the member in; the log does).
func (r *Reconciler) deleteWorks(ctx context.Context, namespace, name string) (reconcile.Result, error) {
	works, err := r.works(ctx, namespace, name)
	if err != nil || len(works) == 0 {
		return reconcile.Result{}, err
	}
	var p plan
	for _, w := range works {
		if w.DeletionTimestamp.IsZero() {
			p.remove = append(p.remove, w)
		}
	}
	if _, err := r.writeWorks(ctx, p, flotillav1.DeletionIntentMyAppDeleted); err != nil {
		return reconcile.Result{}, err
	}
	expired, due := expiredWorks(works, r.Clock.Now(), r.cleanupTimeout())
	for _, w := range expired {
		log.FromContext(ctx).Info("a member did not confirm the deletion of a gone MyApp's Work in time; its objects may still run there",
			"work", w.Namespace+"/"+w.Name, "timeout", r.cleanupTimeout())
	}
	if err := r.releaseExpired(ctx, nil, expired); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: due}, nil
}

package myapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/metrics"
	"github.com/flotilla-dev/flotilla/internal/ssa/ssacr"
	"github.com/flotilla-dev/flotilla/pkg/placement"
)

// write makes d so: the finalizer, a Progressive rollout's state, the Works
// and the status, in that order where order matters, in parallel where it
// does not. start is when the reconcile began, for the propagation metric.
func (r *Reconciler) write(ctx context.Context, s *scope, d *desiredState, start time.Time) (reconcile.Result, error) {
	base := s.app
	progressive := d.rollout != nil
	if progressive {
		var err error
		if base, err = r.writeRollout(ctx, base, d); err != nil {
			if apierrors.IsConflict(err) {
				// The cache is behind: the event of the newer MyApp brings
				// a reconcile that sees it.
				log.FromContext(ctx).V(1).Info("rollout computed from a stale MyApp; waiting for the newer one", "error", err.Error())
				return reconcile.Result{}, nil
			}
			return reconcile.Result{}, err
		}
	} else {
		// Not (or no longer) rolled out progressively: no rollout series.
		r.clearRollout(base.Namespace, base.Name)
	}

	// The finalizer is added in parallel with the Work writes rather than
	// before them, to keep API writes off the propagation path in series; a
	// Work written for a MyApp deleted before its finalizer lands is removed
	// when the controller finds the MyApp gone.
	var finalizerErr error
	var finalizerWG sync.WaitGroup
	if !controllerutil.ContainsFinalizer(base, flotillav1.MyAppFinalizer) {
		finalizerWG.Go(func() { _, finalizerErr = r.addFinalizer(ctx, base) })
	}
	wrote, writeErr := r.writeWorks(ctx, d.works, flotillav1.DeletionIntentDescheduled)
	if wrote > 0 {
		metrics.WorksWritten.Observe(time.Since(start).Seconds())
	}
	finalizerWG.Wait()

	if d.scheduled && !placement.SameDecision(s.app.Status.Placement, d.decision) {
		r.recordPlacementChange(s.app, s.app.Status.Placement, d.decision)
	}
	status := d.status
	if writeErr != nil || finalizerErr != nil {
		// Not converged: the status does not claim this generation.
		status.ObservedGeneration = s.app.Status.ObservedGeneration
	}
	r.exportMetrics(s.app)
	requeueAfter := d.requeueAfter
	if d.shift != nil {
		if t := s.app.Spec.Traffic; t != nil && t.HTTPRoute != nil && status.Traffic != nil {
			hr, retry := r.syncHTTPRoute(ctx, s.app, status.Traffic)
			if !hr.Synced && (s.app.Status.Traffic == nil || s.app.Status.Traffic.HTTPRoute == nil || *s.app.Status.Traffic.HTTPRoute != *hr) {
				// Once per new message, not on every retry.
				r.event(s.app, corev1.EventTypeWarning, flotillav1.ReasonHTTPRouteSyncFailed, "HTTPRoute", "%s", hr.Message)
			}
			status.Traffic.HTTPRoute = hr
			if retry {
				requeueAfter = earliest(requeueAfter, httpRouteRetry)
			}
		}
	}
	// A shift is state in the status: written with optimistic locking, so
	// that a reconcile from a cache that has not seen it yet (the Work
	// writes bring one at once) cannot record it a second time; its events
	// and counts follow the write that recorded it.
	shifted := d.shift != nil && len(d.shift.Shifts) > 0
	wroteStatus, statusErr := r.patchStatus(ctx, base, status, progressive || shifted)
	if shifted && wroteStatus {
		r.recordShifts(s.app, d.shift)
	}
	var expiredErr error
	if statusErr == nil && len(d.expired) > 0 {
		// Only once status.orphans names them: a failed status write
		// leaves them to expire again next time.
		expiredErr = r.releaseExpired(ctx, s.app, d.expired)
	}
	if err := errors.Join(writeErr, finalizerErr, statusErr, expiredErr); err != nil {
		return reconcile.Result{}, err
	}
	if requeueAfter > 0 {
		log.FromContext(ctx).V(1).Info("requeue for a time-driven change", "after", requeueAfter)
	}
	return reconcile.Result{RequeueAfter: requeueAfter}, nil
}

// writeRollout records a Progressive rollout's new state before any Work is
// written, so the Works never get ahead of the recorded state and a new hub
// continues from it. The finalizer goes first (the rollout is written with
// optimistic locking, so not in parallel with it). It returns the MyApp as
// written; the rest of the status is patched against it.
func (r *Reconciler) writeRollout(ctx context.Context, app *flotillav1.MyApp, d *desiredState) (*flotillav1.MyApp, error) {
	if !controllerutil.ContainsFinalizer(app, flotillav1.MyAppFinalizer) {
		patched, err := r.addFinalizer(ctx, app)
		if err != nil {
			return nil, err
		}
		app = patched
	}
	if equality.Semantic.DeepEqual(app.Status.Rollout, d.rollout.Status) {
		r.exportRollout(app, app.Status.Rollout)
		return app, nil
	}
	patched := app.DeepCopy()
	patched.Status.Rollout = d.rollout.Status.DeepCopy()
	if err := r.Client.Status().Patch(ctx, patched, client.MergeFromWithOptions(app, client.MergeFromWithOptimisticLock{})); err != nil {
		countStatusWrite(err)
		return nil, fmt.Errorf("recording the rollout of revision %s: %w", d.rollout.Status.TargetRevision, err)
	}
	countStatusWrite(nil)
	r.recordRollout(app, d.rollout)
	r.exportRollout(app, patched.Status.Rollout)
	return patched, nil
}

// addFinalizer adds the MyApp finalizer and returns the patched MyApp.
func (r *Reconciler) addFinalizer(ctx context.Context, app *flotillav1.MyApp) (*flotillav1.MyApp, error) {
	patched := app.DeepCopy()
	controllerutil.AddFinalizer(patched, flotillav1.MyAppFinalizer)
	if err := r.Client.Patch(ctx, patched, client.MergeFrom(app)); err != nil {
		return nil, fmt.Errorf("adding the finalizer: %w", err)
	}
	return patched, nil
}

// writeStatus patches app's status to status when it differs. A
// Progressive rollout's status is patched with optimistic locking: a status
// computed from a stale cache must not overwrite the rollout's state, and
// the newer MyApp's event brings the next reconcile.
func (r *Reconciler) writeStatus(ctx context.Context, app *flotillav1.MyApp, status flotillav1.MyAppStatus, optimistic bool) error {
	_, err := r.patchStatus(ctx, app, status, optimistic)
	return err
}

// patchStatus is writeStatus that also says whether it wrote.
func (r *Reconciler) patchStatus(ctx context.Context, app *flotillav1.MyApp, status flotillav1.MyAppStatus, optimistic bool) (bool, error) {
	if equality.Semantic.DeepEqual(app.Status, status) {
		return false, nil
	}
	patched := app.DeepCopy()
	patched.Status = status
	patch := client.MergeFrom(app)
	if optimistic {
		patch = client.MergeFromWithOptions(app, client.MergeFromWithOptimisticLock{})
	}
	err := r.Client.Status().Patch(ctx, patched, patch)
	if !apierrors.IsNotFound(err) {
		countStatusWrite(err)
	}
	switch {
	case optimistic && apierrors.IsConflict(err):
		log.FromContext(ctx).V(1).Info("status computed from a stale MyApp; waiting for the newer one", "error", err.Error())
		return false, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, fmt.Errorf("patching MyApp status: %w", err)
	}
	return err == nil, nil
}

// writeWorks applies and deletes Works, all in parallel: propagation to N
// clusters costs one round trip, not N. Each Work it deletes is marked
// with why (see deleteWork). It returns how many it wrote.
func (r *Reconciler) writeWorks(ctx context.Context, p plan, why string) (int, error) {
	n := len(p.apply) + len(p.remove)
	if n == 0 {
		return 0, nil
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, w := range p.apply {
		wg.Go(func() { errs[i] = r.applyWork(ctx, w) })
	}
	for i, w := range p.remove {
		wg.Go(func() { errs[len(p.apply)+i] = r.deleteWork(ctx, w, why) })
	}
	wg.Wait()
	return n, errors.Join(errs...)
}

// deleteWork deletes Work w on purpose: it first marks w with the
// annotation flotilla.dev/deletion-intent: why, then deletes it. The sync
// server tells the agent to delete the member objects only for a Work
// whose deletion carried the mark; a Work that vanishes without it only
// orphans them. A Work already gone (the patch or the delete answers
// NotFound) is skipped.
func (r *Reconciler) deleteWork(ctx context.Context, w *flotillav1.Work, why string) error {
	if w.Annotations[flotillav1.AnnotationDeletionIntent] != why {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"annotations": map[string]string{flotillav1.AnnotationDeletionIntent: why},
		}})
		if err != nil {
			return fmt.Errorf("marking Work %s/%s for deletion: %w", w.Namespace, w.Name, err)
		}
		err = r.Client.Patch(ctx, w.DeepCopy(), client.RawPatch(types.MergePatchType, patch))
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("marking Work %s/%s for deletion (%s): %w", w.Namespace, w.Name, why, err)
		}
	}
	// The sync side reads the mark from the Work's last state, which the
	// informer's delete event carries; nothing removes it in between.
	if err := r.Client.Delete(ctx, w); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Work %s/%s: %w", w.Namespace, w.Name, err)
	}
	return nil
}

// applyWork server-side applies w, creating its cluster namespace when the
// MemberCluster controller has not yet.
func (r *Reconciler) applyWork(ctx context.Context, w *flotillav1.Work) error {
	apply := func() error {
		ac, err := ssacr.ApplyConfiguration(w)
		if err != nil {
			return err
		}
		return r.Client.Apply(ctx, ac, client.FieldOwner(flotillav1.FieldOwnerHub), client.ForceOwnership)
	}
	err := apply()
	if apierrors.IsNotFound(err) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.Namespace}}
		if cerr := r.Client.Create(ctx, ns); cerr != nil && !apierrors.IsAlreadyExists(cerr) {
			return fmt.Errorf("creating namespace %s: %w", w.Namespace, cerr)
		}
		err = apply()
	}
	if err != nil {
		return fmt.Errorf("applying Work %s/%s: %w", w.Namespace, w.Name, err)
	}
	return nil
}

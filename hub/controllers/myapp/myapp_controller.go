package myapp

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/metrics"
	"github.com/flotilla-dev/flotilla/hub/render"
	"github.com/flotilla-dev/flotilla/pkg/placement"
)

// FieldOwner is the hub's server-side apply field manager for Works.
const FieldOwner = "flotilla-hub"

// +kubebuilder:rbac:groups=flotilla.dev,resources=myapps,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=flotilla.dev,resources=myapps/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=flotilla.dev,resources=myapps/finalizers,verbs=update
// +kubebuilder:rbac:groups=flotilla.dev,resources=works,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=flotilla.dev,resources=memberclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler reconciles MyApps into Works.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the hub.
	Client client.Client
	// Recorder emits an event on the MyApp for every placement change.
	Recorder events.EventRecorder
	// Clock is the time source (a fake one in tests).
	Clock clock.PassiveClock
	// MaxConcurrentReconciles bounds parallel reconciles (default 4).
	MaxConcurrentReconciles int
}

var _ reconcile.Reconciler = &Reconciler{}

// SetupWithManager registers the controller: MyApps, the Works they own
// (mapped back by label) and MemberCluster changes that matter to placement.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 4
	}
	return ctrl.NewControllerManagedBy(mgr).
		// Every MyApp event, status writes included: the status is patched
		// against the cached MyApp, and a reconcile that ran on a cache
		// that had not yet seen the previous write must be followed by one
		// that has, or a stale status could stay (level-based: the extra
		// reconcile finds nothing to do once the cache has caught up).
		For(&flotillav1.MyApp{}).
		Watches(&flotillav1.Work{}, handler.EnqueueRequestsFromMapFunc(workToMyApp)).
		Watches(&flotillav1.MemberCluster{}, handler.EnqueueRequestsFromMapFunc(r.allMyApps),
			builder.WithPredicates(placementRelevant{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Named("myapp").
		Complete(r)
}

// workToMyApp maps a Work to the MyApp its labels name.
func workToMyApp(_ context.Context, obj client.Object) []reconcile.Request {
	l := obj.GetLabels()
	ns, name := l[flotillav1.LabelMyAppNamespace], l[flotillav1.LabelMyAppName]
	if ns == "" || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
}

// allMyApps enqueues every MyApp: a cluster change may move any of them.
func (r *Reconciler) allMyApps(ctx context.Context, _ client.Object) []reconcile.Request {
	var list flotillav1.MyAppList
	if err := r.Client.List(ctx, &list); err != nil {
		log.FromContext(ctx).Error(err, "listing MyApps for a MemberCluster change")
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// placementRelevant passes MemberCluster events that can change a
// placement: creation, deletion, labels, spec (taints, topology), and the
// Ready condition's status or transition time. Heartbeats and resource
// summaries change every few seconds on every cluster; reacting to them would
// reconcile every MyApp each time, so capacity is read at the next reconcile
// that happens for another reason.
type placementRelevant struct{ predicate.Funcs }

func (placementRelevant) Update(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*flotillav1.MemberCluster)
	n, ok2 := e.ObjectNew.(*flotillav1.MemberCluster)
	if !ok1 || !ok2 {
		return true
	}
	if !equality.Semantic.DeepEqual(o.Labels, n.Labels) || !equality.Semantic.DeepEqual(o.Spec, n.Spec) {
		return true
	}
	oc := meta.FindStatusCondition(o.Status.Conditions, flotillav1.ConditionReady)
	nc := meta.FindStatusCondition(n.Status.Conditions, flotillav1.ConditionReady)
	if (oc == nil) != (nc == nil) {
		return true
	}
	return oc != nil && (oc.Status != nc.Status || !oc.LastTransitionTime.Equal(&nc.LastTransitionTime))
}

// Reconcile converges one MyApp: schedule, write Works, aggregate status.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, retErr error) {
	start := time.Now()
	logger := log.FromContext(ctx)
	app := &flotillav1.MyApp{}
	if err := r.Client.Get(ctx, req.NamespacedName, app); err != nil {
		if apierrors.IsNotFound(err) {
			// The MyApp is gone: remove Works it may have left behind (a
			// Work written before its finalizer was, for example).
			return reconcile.Result{}, r.deleteWorks(ctx, req.Namespace, req.Name)
		}
		return reconcile.Result{}, fmt.Errorf("getting MyApp %s: %w", req, err)
	}
	if !app.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, app)
	}

	clusters, err := r.memberClusters(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	works, err := r.works(ctx, app.Namespace, app.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	now := r.Clock.Now()

	if progressive(app) && !controllerutil.ContainsFinalizer(app, flotillav1.MyAppFinalizer) {
		// A Progressive rollout writes its status with optimistic locking,
		// so the finalizer goes first rather than in parallel.
		patched := app.DeepCopy()
		controllerutil.AddFinalizer(patched, flotillav1.MyAppFinalizer)
		if err := r.Client.Patch(ctx, patched, client.MergeFrom(app)); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
		app = patched
	}

	original := app.DeepCopy()
	// The finalizer is added in parallel with the Work writes rather than
	// before them, to keep API writes off the propagation path in series; a
	// Work written for a MyApp deleted before its finalizer lands is removed
	// by the NotFound branch above.
	var finalizerErr error
	var finalizerWG sync.WaitGroup
	if !controllerutil.ContainsFinalizer(app, flotillav1.MyAppFinalizer) {
		finalizerWG.Add(1)
		go func() {
			defer finalizerWG.Done()
			patched := app.DeepCopy()
			controllerutil.AddFinalizer(patched, flotillav1.MyAppFinalizer)
			finalizerErr = r.Client.Patch(ctx, patched, client.MergeFrom(app))
		}()
	}

	result, schedErr := placement.Schedule(placement.InputFor(app, clusters.list, now))
	reason := ""
	var decision *flotillav1.PlacementDecision
	if schedErr != nil {
		reason = flotillav1.ReasonUnschedulable
		var se *placement.ScheduleError
		if errors.As(schedErr, &se) {
			reason = se.Reason
		}
		// Keep running where the app runs: render the previous decision
		// with the current spec, and say why nothing new could be placed.
		decision = app.Status.Placement
		if decision == nil {
			decision = &flotillav1.PlacementDecision{}
		}
	} else {
		decision = result.Decision(app.Status.Placement, app.Generation, now)
	}

	var rollout *rolloutResult
	if progressive(app) {
		if rollout, err = r.advanceRollout(ctx, app, original, decision, clusters, works, now); err != nil {
			finalizerWG.Wait()
			if apierrors.IsConflict(err) {
				// The cache is behind: the event of the newer MyApp
				// brings a reconcile that sees it.
				logger.V(1).Info("rollout computed from a stale MyApp; waiting for the newer one", "error", err.Error())
				return reconcile.Result{}, nil
			}
			return reconcile.Result{}, err
		}
	} else {
		app.Status.Rollout = nil
	}
	var revisions map[string]*flotillav1.RevisionTemplate
	if rollout != nil {
		revisions = rollout.revisions
	}
	plan, err := r.plan(app, decision, clusters, works, revisions, now)
	if err != nil {
		return reconcile.Result{}, reconcile.TerminalError(err)
	}
	wrote, writeErr := r.writeWorks(ctx, plan)
	if wrote > 0 {
		metrics.WorksWritten.Observe(time.Since(start).Seconds())
	}
	finalizerWG.Wait()

	if schedErr == nil && !placement.SameDecision(original.Status.Placement, decision) {
		r.recordPlacementChange(app, original.Status.Placement, decision)
	}

	// Status: the decision and the aggregated view of the Works. The Works
	// just written are seen through their desired state; their status comes
	// with the agents' reports, which requeue this MyApp.
	app.Status.Placement = decision
	out := computeStatus(statusInput{
		generation:     app.Generation,
		clusters:       plan.views,
		scheduleErr:    schedErr,
		scheduleReason: reason,
		warnings:       result.Warnings,
	})
	app.Status.Clusters = out.clusters
	app.Status.DesiredReplicas = out.desired
	app.Status.ReadyReplicas = out.ready
	app.Status.AvailableReplicas = out.available
	app.Status.UpdatedReplicas = out.updated
	app.Status.ClusterCount = out.used
	for _, c := range out.conditions {
		if rollout != nil && c.Type == flotillav1.ConditionProgressing {
			if rc, ok := rolloutCondition(rollout.status, app.Generation); ok {
				c = rc
			}
		}
		meta.SetStatusCondition(&app.Status.Conditions, c)
	}
	if writeErr == nil && finalizerErr == nil {
		app.Status.ObservedGeneration = app.Generation
	}
	r.exportMetrics(app, out.clusters)
	if !equality.Semantic.DeepEqual(original.Status, app.Status) {
		patch := client.MergeFrom(original)
		if rollout != nil {
			// A status computed from a stale cache must not overwrite
			// the rollout's state: the conflict requeues.
			patch = client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})
		}
		if err := r.Client.Status().Patch(ctx, app, patch); rollout != nil && apierrors.IsConflict(err) {
			// Stale for a Progressive rollout: the newer MyApp's event
			// brings another reconcile.
			logger.V(1).Info("status computed from a stale MyApp; waiting for the newer one", "error", err.Error())
		} else if err != nil && !apierrors.IsNotFound(err) {
			retErr = errors.Join(retErr, fmt.Errorf("patching MyApp status: %w", err))
		}
	}
	if err := errors.Join(writeErr, finalizerErr); err != nil {
		return reconcile.Result{}, errors.Join(err, retErr)
	}
	if retErr != nil {
		return reconcile.Result{}, retErr
	}

	requeue := plan.requeueAfter
	if rollout != nil && rollout.requeueAfter > 0 && (requeue == 0 || rollout.requeueAfter < requeue) {
		requeue = rollout.requeueAfter
	}
	// Also on error: a failback about to complete may make the app
	// schedulable again, and the scheduler says when.
	if result.RequeueAfter > 0 && (requeue == 0 || result.RequeueAfter < requeue) {
		requeue = result.RequeueAfter
	}
	if requeue > 0 {
		logger.V(1).Info("requeue for a time-driven change", "after", requeue)
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// clusterSet is the MemberClusters from the cache, as a list and by name.
type clusterSet struct {
	list   []flotillav1.MemberCluster
	byName map[string]*flotillav1.MemberCluster
}

func (r *Reconciler) memberClusters(ctx context.Context) (clusterSet, error) {
	var list flotillav1.MemberClusterList
	if err := r.Client.List(ctx, &list); err != nil {
		return clusterSet{}, fmt.Errorf("listing MemberClusters: %w", err)
	}
	cs := clusterSet{list: list.Items, byName: make(map[string]*flotillav1.MemberCluster, len(list.Items))}
	for i := range cs.list {
		cs.byName[cs.list[i].Name] = &cs.list[i]
	}
	return cs, nil
}

// works returns the app's Works by cluster name.
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
		cluster := strings.TrimPrefix(w.Namespace, flotillav1.ClusterNamespacePrefix)
		out[cluster] = w
	}
	return out, nil
}

// plan is what one reconcile will write and how it will look.
type plan struct {
	// apply are the Works to create or update.
	apply []*flotillav1.Work
	// remove are the Works to delete.
	remove []*flotillav1.Work
	// views feed the status computation.
	views []clusterView
	// requeueAfter is when a kept evicted Work's grace period ends.
	requeueAfter time.Duration
}

// plan decides which Works to write, keep and delete for decision.
// revisions, set for a Progressive rollout, name the revision each target
// cluster renders; replicas always come from decision and the current spec.
func (r *Reconciler) plan(app *flotillav1.MyApp, decision *flotillav1.PlacementDecision, clusters clusterSet, existing map[string]*flotillav1.Work, revisions map[string]*flotillav1.RevisionTemplate, now time.Time) (plan, error) {
	var p plan
	wanted := map[string]bool{}
	for _, tc := range decision.Clusters {
		mc := clusters.byName[tc.Name]
		src := app
		rt := revisions[tc.Name]
		if rt != nil {
			src = appAt(app, rt)
		}
		desired, replicas, err := render.Work(src, tc.Name, mc, tc.Replicas)
		if err != nil {
			return p, err
		}
		if rt != nil {
			desired.Labels[LabelRevision] = rt.Name
		}
		wanted[tc.Name] = true
		cur := existing[tc.Name]
		view := clusterView{name: tc.Name, assigned: replicas, member: mc, work: cur}
		if cur == nil || !render.SameManifests(cur.Spec.Manifests, desired.Spec.Manifests) || !labelsContain(cur.Labels, desired.Labels) || !cur.DeletionTimestamp.IsZero() {
			p.apply = append(p.apply, desired)
			// The member has not seen this spec yet.
			if cur != nil {
				stale := cur.DeepCopy()
				stale.Generation++
				view.work = stale
			}
		}
		p.views = append(p.views, view)
	}

	// Evicted clusters: keep their Work while the policy says so.
	allAvailable := true
	for _, v := range p.views {
		if clusterStatus(v).Phase != flotillav1.ClusterAppAvailable || v.work == nil || !reported(v.work) {
			allAvailable = false
		}
	}
	cu := clusterUnreachable(app)
	for _, e := range decision.Evicted {
		cur := existing[e.Name]
		if cur == nil || wanted[e.Name] {
			continue
		}
		keep := false
		switch cu.PurgeMode {
		case flotillav1.PurgeNever:
			keep = true
		case flotillav1.PurgeImmediately:
		default: // Graciously
			deadline := e.EvictionTime.Add(time.Duration(ptr.Deref(cu.GracePeriodSeconds, 600)) * time.Second)
			if !allAvailable && now.Before(deadline) {
				keep = true
				if d := deadline.Sub(now); p.requeueAfter == 0 || d < p.requeueAfter {
					p.requeueAfter = d
				}
			}
		}
		if keep {
			wanted[e.Name] = true
			p.views = append(p.views, clusterView{name: e.Name, assigned: e.Replicas, member: clusters.byName[e.Name], work: cur, evicting: true})
		}
	}
	// Evicted clusters without a Work still show, as lost, until they fail
	// back: a reader of the status sees where the replicas went and why.
	for i, e := range decision.Evicted {
		if !wanted[e.Name] {
			p.views = append(p.views, clusterView{name: e.Name, member: clusters.byName[e.Name], evicted: &decision.Evicted[i]})
		}
	}

	for name, w := range existing {
		if !wanted[name] && w.DeletionTimestamp.IsZero() {
			p.remove = append(p.remove, w)
		}
	}
	sort.Slice(p.remove, func(i, j int) bool { return p.remove[i].Namespace < p.remove[j].Namespace })
	return p, nil
}

// clusterUnreachable returns the app's unreachable-cluster policy with the
// CRD's defaults filled in.
func clusterUnreachable(app *flotillav1.MyApp) flotillav1.ClusterFailover {
	out := flotillav1.ClusterFailover{PurgeMode: flotillav1.PurgeGraciously, GracePeriodSeconds: ptr.To[int32](600)}
	if app.Spec.Failover != nil && app.Spec.Failover.ClusterUnreachable != nil {
		in := app.Spec.Failover.ClusterUnreachable
		if in.PurgeMode != "" {
			out.PurgeMode = in.PurgeMode
		}
		if in.GracePeriodSeconds != nil {
			out.GracePeriodSeconds = in.GracePeriodSeconds
		}
	}
	return out
}

func labelsContain(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// writeWorks applies and deletes Works, all in parallel: propagation to N
// clusters costs one round trip, not N. It returns how many it wrote.
func (r *Reconciler) writeWorks(ctx context.Context, p plan) (int, error) {
	n := len(p.apply) + len(p.remove)
	if n == 0 {
		return 0, nil
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, w := range p.apply {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.applyWork(ctx, w)
		}()
	}
	for i, w := range p.remove {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Client.Delete(ctx, w); err != nil && !apierrors.IsNotFound(err) {
				errs[len(p.apply)+i] = fmt.Errorf("deleting Work %s/%s: %w", w.Namespace, w.Name, err)
			}
		}()
	}
	wg.Wait()
	return n, errors.Join(errs...)
}

// applyWork server-side applies w, creating its cluster namespace when the
// MemberCluster controller has not yet.
func (r *Reconciler) applyWork(ctx context.Context, w *flotillav1.Work) error {
	apply := func() error {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(w)
		if err != nil {
			return err
		}
		delete(u, "status")
		if md, ok := u["metadata"].(map[string]any); ok {
			delete(md, "creationTimestamp")
		}
		obj := &unstructured.Unstructured{Object: u}
		return r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(FieldOwner), client.ForceOwnership)
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

// reconcileDelete removes the app's Works, then its finalizer.
func (r *Reconciler) reconcileDelete(ctx context.Context, app *flotillav1.MyApp) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(app, flotillav1.MyAppFinalizer) {
		return reconcile.Result{}, nil
	}
	works, err := r.works(ctx, app.Namespace, app.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(works) > 0 {
		var p plan
		for _, w := range works {
			if w.DeletionTimestamp.IsZero() {
				p.remove = append(p.remove, w)
			}
		}
		if _, err := r.writeWorks(ctx, p); err != nil {
			return reconcile.Result{}, err
		}
		// The Works' delete events requeue this MyApp; the poll is a
		// backstop in case the cache misses one.
		return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
	}
	patched := app.DeepCopy()
	controllerutil.RemoveFinalizer(patched, flotillav1.MyAppFinalizer)
	if err := r.Client.Patch(ctx, patched, client.MergeFrom(app)); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("removing the finalizer: %w", err)
	}
	r.clearMetrics(app)
	return reconcile.Result{}, nil
}

// deleteWorks deletes the Works of a MyApp that no longer exists.
func (r *Reconciler) deleteWorks(ctx context.Context, namespace, name string) error {
	works, err := r.works(ctx, namespace, name)
	if err != nil || len(works) == 0 {
		return err
	}
	var p plan
	for _, w := range works {
		if w.DeletionTimestamp.IsZero() {
			p.remove = append(p.remove, w)
		}
	}
	_, err = r.writeWorks(ctx, p)
	return err
}

// recordPlacementChange emits events and counts the change.
func (r *Reconciler) recordPlacementChange(app *flotillav1.MyApp, before, after *flotillav1.PlacementDecision) {
	metrics.PlacementChanges.WithLabelValues(app.Namespace, app.Name).Inc()
	prevEvicted := map[string]bool{}
	prevTargets := map[string]bool{}
	if before != nil {
		for _, e := range before.Evicted {
			prevEvicted[e.Name] = true
		}
		for _, c := range before.Clusters {
			prevTargets[c.Name] = true
		}
	}
	for _, e := range after.Evicted {
		if !prevEvicted[e.Name] {
			metrics.Evictions.WithLabelValues(e.Name, e.Reason).Inc()
			r.event(app, corev1.EventTypeWarning, flotillav1.ReasonFailedOver, "Evict",
				"moved %d replicas away from cluster %s (%s)", e.Replicas, e.Name, e.Reason)
		}
	}
	for _, c := range after.Clusters {
		if prevEvicted[c.Name] && !prevTargets[c.Name] {
			r.event(app, corev1.EventTypeNormal, "FailedBack", "Failback",
				"cluster %s is Ready again: %d replicas returned", c.Name, c.Replicas)
		}
	}
	parts := make([]string, 0, len(after.Clusters))
	for _, c := range after.Clusters {
		parts = append(parts, fmt.Sprintf("%s=%d", c.Name, c.Replicas))
	}
	r.event(app, corev1.EventTypeNormal, flotillav1.ReasonScheduled, "Schedule", "placed replicas: %s", strings.Join(parts, ", "))
}

func (r *Reconciler) event(app *flotillav1.MyApp, typ, reason, action, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(app, nil, typ, reason, action, format, args...)
	}
}

// exportMetrics publishes the per-cluster replica gauges.
func (r *Reconciler) exportMetrics(app *flotillav1.MyApp, clusters []flotillav1.ClusterAppStatus) {
	r.clearMetrics(app)
	for _, c := range clusters {
		metrics.MyAppReplicas.WithLabelValues(app.Namespace, app.Name, c.Name, "assigned").Set(float64(c.Assigned))
		metrics.MyAppReplicas.WithLabelValues(app.Namespace, app.Name, c.Name, "ready").Set(float64(c.ReadyReplicas))
	}
}

func (r *Reconciler) clearMetrics(app *flotillav1.MyApp) {
	metrics.MyAppReplicas.DeletePartialMatch(map[string]string{"namespace": app.Namespace, "name": app.Name})
}

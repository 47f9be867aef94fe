package myapp

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/nspolicy"
)

// workToMyApp maps a Work to the MyApp its labels name.
func workToMyApp(_ context.Context, obj client.Object) []reconcile.Request {
	l := obj.GetLabels()
	ns, name := l[flotillav1.LabelMyAppNamespace], l[flotillav1.LabelMyAppName]
	if ns == "" || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
}

// workHandler enqueues the MyApp a Work belongs to (workToMyApp), at once,
// or, for an app over many clusters reconciled less than its linger ago,
// at the end of that linger (see linger). Like controller-runtime's own
// handlers it adds a Work of the informer's initial list, or a resync (the
// same resourceVersion), at handler.LowPriority.
type workHandler struct{ r *Reconciler }

var _ handler.TypedEventHandler[client.Object, reconcile.Request] = byEvent{workHandler{}}

// lowEnqueuer enqueues what obj maps to; low says the event changes
// nothing (the informer's initial list, a resync).
type lowEnqueuer interface {
	enqueue(ctx context.Context, obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request], low bool)
}

// byEvent is the event handler of an enqueuer: a Create of the initial
// list and an Update that keeps the resourceVersion (a resync) are low,
// every other event is not.
type byEvent struct{ lowEnqueuer }

func (h byEvent) Create(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueue(ctx, e.Object, q, e.IsInInitialList)
}

func (h byEvent) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	unchanged := e.ObjectOld != nil && e.ObjectNew != nil && e.ObjectOld.GetResourceVersion() == e.ObjectNew.GetResourceVersion()
	h.enqueue(ctx, e.ObjectNew, q, unchanged)
}

func (h byEvent) Delete(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueue(ctx, e.Object, q, false)
}

func (h byEvent) Generic(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueue(ctx, e.Object, q, false)
}

func (h workHandler) enqueue(ctx context.Context, obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request], low bool) {
	if obj == nil {
		return
	}
	for _, req := range workToMyApp(ctx, obj) {
		after := h.r.lingers.wait(req.NamespacedName, h.r.now())
		if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
			opts := priorityqueue.AddOpts{After: after}
			if low {
				opts.Priority = ptr.To(handler.LowPriority)
			}
			pq.AddWithOpts(opts, req)
			continue
		}
		if after > 0 {
			q.AddAfter(req, after)
			continue
		}
		q.Add(req)
	}
}

// memberClusterHandler enqueues every MyApp on a MemberCluster change: any
// of them may move. Those the changed cluster runs or ran replicas of (it
// is in their status) are added at normal priority; every other at
// handler.LowPriority. The work queue serves higher priorities first, so
// when a cluster is lost its apps fail over before the rest of the fleet
// is looked at, and so do their own requeues: a lost cluster's app
// reconciled during its toleration asks to come back when the toleration
// ends (RequeueAfter, at the priority it was served with), and must not
// wait behind thousands of no-op reconciles of apps the cluster never ran.
// At 10,000 MyApps that wait was 28 s (docs/benchmarks.md, Scale). A
// queue without priorities gets them in the same order, first in, first
// out.
type memberClusterHandler struct{ r *Reconciler }

// The initial list (the hub starting) changes nothing, and every MyApp is
// reconciled at start anyway; a resync changes nothing either: both add
// every app at low priority (byEvent), as controller-runtime's own
// handlers do.
var _ lowEnqueuer = memberClusterHandler{}

// enqueue adds every MyApp; allLow puts the apps that use the cluster at
// low priority too.
func (h memberClusterHandler) enqueue(ctx context.Context, obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request], allLow bool) {
	if obj == nil {
		return
	}
	first, rest := h.r.appsOfCluster(ctx, obj.GetName())
	if !allLow {
		for _, req := range first {
			q.Add(req)
		}
		first = nil
	}
	low := append(first, rest...)
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(handler.LowPriority)}, low...)
		return
	}
	for _, req := range low {
		q.Add(req)
	}
}

// appsOfCluster lists every MyApp, split into those that use cluster
// (usesCluster) and the rest.
func (r *Reconciler) appsOfCluster(ctx context.Context, cluster string) (first, rest []reconcile.Request) {
	var list flotillav1.MyAppList
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "listing MyApps for a MemberCluster change", "cluster", cluster)
		return nil, nil
	}
	for i := range list.Items {
		req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
		if usesCluster(&list.Items[i], cluster) {
			first = append(first, req)
		} else {
			rest = append(rest, req)
		}
	}
	return first, rest
}

// usesCluster says whether app's status names cluster: it runs, is losing
// or lost replicas there.
func usesCluster(app *flotillav1.MyApp, cluster string) bool {
	for _, c := range app.Status.Clusters {
		if c.Name == cluster {
			return true
		}
	}
	if p := app.Status.Placement; p != nil {
		for _, c := range p.Clusters {
			if c.Name == cluster {
				return true
			}
		}
		for _, e := range p.Evicted {
			if e.Name == cluster {
				return true
			}
		}
	}
	return false
}

// policyToMyApps enqueues the MyApps of the hub namespaces a
// FleetNamespacePolicy matches: a new, changed or deleted grant may allow
// or deny their target namespace, or change their Pod Security level. On
// an update, controller-runtime maps the old and the new policy, so the
// namespaces a policy stops matching are requeued too.
func (r *Reconciler) policyToMyApps(ctx context.Context, obj client.Object) []reconcile.Request {
	p, ok := obj.(*flotillav1.FleetNamespacePolicy)
	if !ok {
		return nil
	}
	var list flotillav1.MyAppList
	if err := r.Client.List(ctx, &list); err != nil {
		log.FromContext(ctx).Error(err, "listing MyApps for a FleetNamespacePolicy change", "policy", p.Name)
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if nspolicy.MatchAny(p.Spec.HubNamespaces, list.Items[i].Namespace) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// placementRelevant passes MemberCluster events that can change a
// placement: creation, deletion (and its start: a drain), labels, spec (taints, topology), and the
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
	if !equality.Semantic.DeepEqual(o.Labels, n.Labels) || !equality.Semantic.DeepEqual(o.Spec, n.Spec) ||
		o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() {
		return true
	}
	oc := meta.FindStatusCondition(o.Status.Conditions, flotillav1.ConditionReady)
	nc := meta.FindStatusCondition(n.Status.Conditions, flotillav1.ConditionReady)
	if (oc == nil) != (nc == nil) {
		return true
	}
	return oc != nil && (oc.Status != nc.Status || !oc.LastTransitionTime.Equal(&nc.LastTransitionTime))
}

package myapp

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
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

// allMyApps enqueues every MyApp: a cluster change may move any of them.
// Those the changed cluster runs or ran replicas of (it is in their
// status) come first: the work queue is first in, first out, so when a
// cluster is lost its apps fail over before the rest of the fleet's apps
// are looked at. At 10,000 MyApps, in list order, the lost cluster's apps
// waited behind thousands of no-op reconciles (docs/benchmarks.md, Scale).
func (r *Reconciler) allMyApps(ctx context.Context, obj client.Object) []reconcile.Request {
	var list flotillav1.MyAppList
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "listing MyApps for a MemberCluster change")
		return nil
	}
	cluster := obj.GetName()
	first := make([]reconcile.Request, 0, len(list.Items))
	var rest []reconcile.Request
	for i := range list.Items {
		req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
		if usesCluster(&list.Items[i], cluster) {
			first = append(first, req)
		} else {
			rest = append(rest, req)
		}
	}
	return append(first, rest...)
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

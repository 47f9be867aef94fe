package apply

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// maxPods bounds the pod list ReadLive makes for a Deployment that is not
// available: the first problem explains the Deployment, so a page is
// plenty, and a Deployment of thousands of replicas costs no more.
const maxPods = 100

// PodProblemsAfter is how long a Deployment that is not available must
// have gone without progress before its pods are listed for the reason
// (see ReadLive). While the Deployment controller records progress (a
// replica updated, ready or available, within this time) the pods are
// starting, and a problem such as an image that cannot be pulled shows
// only after the kubelet's first attempt; listing them on every status
// change of a rollout put a live list of the member's apiserver in front
// of the report that the rollout finished.
const PodProblemsAfter = 2 * time.Second

// MaxPodRecheck bounds how long the pods of a Deployment that stays
// unavailable without progress go unread (see Live.Recheck). No
// Deployment event follows a pod's problem, so the pods are read again
// after as long as the rollout has stalled so far (at 2 s, 4 s, 8 s, ...
// of the stall), up to this: the Work reconciler's own resync. A member
// with many stuck Deployments thus costs each at most one list per
// resync, not one per fixed interval.
const MaxPodRecheck = 5 * time.Minute

// ReadLive reads the objects the results say were applied: one read per
// object through the reader and, for a Deployment that is not available,
// one list of its pods (see podsDue: not while it is progressing, nor
// before its controller observed its generation). The pods are listed
// through the writer, live, so that no cluster-wide pod informer is
// needed. An object that cannot be read is left out of Live (WorkStatus
// then reports it gone) and its error is returned joined with the others.
// Live.Recheck says when to read again for the pods.
func (a *Applier) ReadLive(ctx context.Context, results []Result) (Live, error) {
	return a.readLiveAt(ctx, results, time.Now())
}

func (a *Applier) readLiveAt(ctx context.Context, results []Result, now time.Time) (Live, error) {
	ctx = quiet(ctx)
	live := Live{
		Objects: map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured{},
		Pods:    map[v1alpha1.ResourceIdentifier][]corev1.Pod{},
	}
	var errs []error
	for _, r := range results {
		if !r.Applied() {
			continue
		}
		id := r.Identifier
		gvk := schema.GroupVersionKind{Group: id.Group, Version: id.Version, Kind: id.Kind}
		obj, err := a.getLive(ctx, gvk, kclient.Key{Namespace: id.Namespace, Name: id.Name})
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w", describe(id), err))
			continue
		}
		if obj == nil {
			continue
		}
		// A cache may still hold the object as it was before this apply:
		// the apply's own answer is newer then (its status not yet
		// observing the new generation).
		if r.Object != nil && obj.GetUID() == r.Object.GetUID() && obj.GetGeneration() < r.Object.GetGeneration() {
			obj = r.Object
		}
		live.Objects[id] = obj
		if gvk.GroupKind() == ServiceKind.GroupKind() {
			eps, err := a.serviceEndpoints(ctx, obj)
			if err != nil {
				errs = append(errs, fmt.Errorf("listing the EndpointSlices of %s: %w", describe(id), err))
				continue
			}
			if live.Endpoints == nil {
				live.Endpoints = map[v1alpha1.ResourceIdentifier]*v1alpha1.EndpointsStatus{}
			}
			live.Endpoints[id] = eps
			continue
		}
		if gvk.GroupKind() != DeploymentKind.GroupKind() {
			continue
		}
		pods, recheck, err := a.unavailablePods(ctx, obj, now)
		live.recheckIn(recheck)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing the pods of %s: %w", describe(id), err))
			continue
		}
		if pods != nil {
			live.Pods[id] = pods
		}
	}
	return live, errors.Join(errs...)
}

// recheckIn makes l.Recheck d when d is sooner (zero: no recheck).
func (l *Live) recheckIn(d time.Duration) {
	if d > 0 && (l.Recheck == 0 || d < l.Recheck) {
		l.Recheck = d
	}
}

// EndpointSliceKind is the kind whose objects count a Service's endpoints.
var EndpointSliceKind = schema.GroupVersionKind{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice"}

// serviceEndpoints counts the endpoints of Service svc from its
// EndpointSlices (label kubernetes.io/service-name), read through the
// reader: the EndpointSlice controller copies the Service's labels onto
// them, so a cache of Flotilla's labelled objects holds them. An endpoint
// is ready unless its ready condition says false (the API's rule for an
// unset one). A dual-stack Service has slices per address family, each
// listing the same pods: the family with the most endpoints counts.
func (a *Applier) serviceEndpoints(ctx context.Context, svc *unstructured.Unstructured) (*v1alpha1.EndpointsStatus, error) {
	var list discoveryv1.EndpointSliceList
	if err := a.reader.List(ctx, &list, kclient.MatchingLabels(svc.GetNamespace(), map[string]string{discoveryv1.LabelServiceName: svc.GetName()})); err != nil {
		return nil, err
	}
	byFamily := map[string]*v1alpha1.EndpointsStatus{}
	for i := range list.Items {
		slice := &list.Items[i]
		c := byFamily[string(slice.AddressType)]
		if c == nil {
			c = &v1alpha1.EndpointsStatus{}
			byFamily[string(slice.AddressType)] = c
		}
		for _, ep := range slice.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				c.Ready++
			} else {
				c.NotReady++
			}
		}
	}
	// Deterministic on a tie (slices caught mid-update): more ready
	// endpoints, then the family name.
	out := &v1alpha1.EndpointsStatus{}
	best := ""
	for _, family := range slices.Sorted(maps.Keys(byFamily)) {
		c := byFamily[family]
		if best == "" || c.Ready+c.NotReady > out.Ready+out.NotReady ||
			(c.Ready+c.NotReady == out.Ready+out.NotReady && c.Ready > out.Ready) {
			out, best = c, family
		}
	}
	return out, nil
}

// unavailablePods lists the pods of Deployment obj when podsDue says they
// are due, and says when to look again (zero: only on the next change).
func (a *Applier) unavailablePods(ctx context.Context, obj *unstructured.Unstructured, now time.Time) ([]corev1.Pod, time.Duration, error) {
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d); err != nil {
		return nil, 0, fmt.Errorf("decoding the Deployment: %w", err)
	}
	due, recheck := podsDue(&d, now)
	if !due || d.Spec.Selector == nil {
		return nil, recheck, nil
	}
	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, 0, fmt.Errorf("parsing the Deployment's selector: %w", err)
	}
	// Typed: the agent's direct client then reads them as protobuf, with
	// no JSON and unstructured copy on the way.
	var list corev1.PodList
	if err := a.writer.List(ctx, &list, kclient.ListOptions{Namespace: d.Namespace, Labels: selector, Limit: maxPods}); err != nil {
		return nil, recheck, err
	}
	return list.Items, recheck, nil
}

// podsDue says whether the pods of Deployment d are worth a live list now,
// and when to ask again:
//
//   - available, or its generation not yet observed by the Deployment
//     controller: no (the pods are not the news, or not yet the new
//     template's), and no recheck (the controller's next status is an
//     event);
//   - its Progressing condition True with a lastUpdateTime less than
//     PodProblemsAfter ago (the controller saw a replica move within it):
//     no, and again when that time has passed, since a stalled rollout
//     brings no further event;
//   - otherwise (stalled, or past its progress deadline): yes, and again
//     after as long as it has stalled so far (at least PodProblemsAfter,
//     at most MaxPodRecheck), since a pod's problem (a failed pull, a
//     crash) changes no Deployment field;
//   - without a Progressing condition (no progress deadline, no
//     controller): yes, and again after MaxPodRecheck.
//
// A lastUpdateTime ahead of now (the controller's clock ahead of this
// one) counts as now.
func podsDue(d *appsv1.Deployment, now time.Time) (due bool, recheck time.Duration) {
	h := evaluateDeployment(d)
	if h.available || !h.observed {
		return false, 0
	}
	for i := range d.Status.Conditions {
		c := &d.Status.Conditions[i]
		if c.Type != appsv1.DeploymentProgressing {
			continue
		}
		stalled := max(now.Sub(c.LastUpdateTime.Time), 0)
		if c.Status == corev1.ConditionTrue && stalled < PodProblemsAfter {
			return false, PodProblemsAfter - stalled
		}
		return true, min(max(stalled, PodProblemsAfter), MaxPodRecheck)
	}
	return true, MaxPodRecheck
}

// Status reads the live state of what results say was applied and computes
// work's status from it (see ReadLive and WorkStatus). A read error is
// returned with the status computed from what could be read.
//
// Without results (nil), for a Work whose drift record a restarted Applier
// restored (see Load) at work's UID and generation, the results are what
// that record proves: every recorded object applied. A caller that skips
// the apply because NeedsApply says false after a restart thus reports
// the Work as applied, not as waiting.
//
// recheck, when not zero, is when to compute the status again although
// nothing changes: a Deployment's pods were not listed yet, or are to be
// listed again (see podsDue).
func (a *Applier) Status(ctx context.Context, work *v1alpha1.Work, results []Result, now time.Time) (st v1alpha1.WorkStatus, recheck time.Duration, err error) {
	if results == nil {
		results = a.resumedResults(work)
	}
	live, err := a.readLiveAt(ctx, results, now)
	return WorkStatus(work, results, live, now), live.Recheck, err
}

// resumedResults is what the drift record proves of work's last Apply: a
// Result with reason Applied per recorded object, in the order of the
// Work's manifests (any object no manifest names last), when the Applier
// tracks work at its UID and generation; otherwise nil.
func (a *Applier) resumedResults(work *v1alpha1.Work) []Result {
	a.tracker.mu.Lock()
	rec, ok := a.tracker.works[work.Name]
	a.tracker.mu.Unlock()
	if !ok || rec.uid != work.UID || rec.generation != work.Generation {
		return nil
	}
	r := a.set.get(work.Name)
	if r == nil || len(r.objects) != len(rec.objects) {
		return nil
	}
	objs := slices.Clone(r.objects)
	out := make([]Result, 0, len(objs))
	take := func(i int) {
		id := objs[i].ResourceIdentifier
		out = append(out, Result{Identifier: id, Reason: v1alpha1.ReasonApplied, Message: describe(id) + " applied"})
		objs = slices.Delete(objs, i, i+1)
	}
	for i := range work.Spec.Manifests {
		obj, err := decode(&work.Spec.Manifests[i])
		if err != nil {
			continue
		}
		gvk := obj.GroupVersionKind()
		// A manifest without a namespace had it defaulted when applied.
		j := slices.IndexFunc(objs, func(o AppliedObject) bool {
			return o.Group == gvk.Group && o.Version == gvk.Version && o.Kind == gvk.Kind && o.Name == obj.GetName() &&
				(obj.GetNamespace() == "" || o.Namespace == obj.GetNamespace())
		})
		if j >= 0 {
			take(j)
		}
	}
	for len(objs) > 0 {
		take(0)
	}
	return out
}

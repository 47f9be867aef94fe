package myapp

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// A MemberCluster change enqueues every MyApp: those whose status names
// the cluster (running, evicted, or placed there) at normal priority, the
// others at low priority, whatever the list order. A lost cluster's app
// that comes back later (RequeueAfter at the end of its toleration, at
// normal priority) is served before the low-priority rest still waiting:
// it fails over before thousands of others are looked at. A queue without
// priorities gets the same order, first in, first out.
func TestMemberClusterChangeEnqueuesItsAppsFirst(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := flotillav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var objs []client.Object
	uses := map[string]bool{}
	for i := range 40 {
		app := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: fmt.Sprintf("app-%02d", i)}}
		switch i % 10 {
		case 3:
			app.Status.Clusters = []flotillav1.ClusterAppStatus{{Name: "other"}, {Name: "lost"}}
			uses[app.Name] = true
		case 7:
			app.Status.Placement = &flotillav1.PlacementDecision{Evicted: []flotillav1.EvictedCluster{{Name: "lost"}}}
			uses[app.Name] = true
		case 9:
			app.Status.Placement = &flotillav1.PlacementDecision{Clusters: []flotillav1.TargetCluster{{Name: "lost", Replicas: 1}}}
			uses[app.Name] = true
		default:
			app.Status.Clusters = []flotillav1.ClusterAppStatus{{Name: "other"}}
		}
		objs = append(objs, app)
	}
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()}
	h := byEvent{memberClusterHandler{r}}
	lost := &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "lost", ResourceVersion: "1"}}
	// The change: the cluster tainted, say (a new resourceVersion).
	changed := lost.DeepCopy()
	changed.ResourceVersion = "2"
	ctx := context.Background()

	t.Run("priority queue", func(t *testing.T) {
		q := priorityqueue.New[reconcile.Request]("test")
		defer q.ShutDown()
		h.Update(ctx, event.UpdateEvent{ObjectOld: lost, ObjectNew: changed}, q)
		// Serve the apps that use the cluster; the first one comes back
		// at normal priority, as a RequeueAfter does, while the others
		// still wait.
		var served []string
		var back reconcile.Request
		for range len(uses) {
			req, prio, _ := q.GetWithPriority()
			if !uses[req.Name] || prio != 0 {
				t.Fatalf("served %s at priority %d while apps of the lost cluster wait: they must come first, at priority 0", req.Name, prio)
			}
			if back.Name == "" {
				back = req
			}
			served = append(served, req.Name)
			q.Done(req)
		}
		q.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(0)}, back)
		if req, prio, _ := q.GetWithPriority(); req != back || prio != 0 {
			t.Fatalf("after the cluster's apps, served %s at priority %d; want %s, which came back at priority 0, before the low-priority rest", req.Name, prio, back.Name)
		} else {
			q.Done(req)
		}
		for range 40 - len(uses) {
			req, prio, _ := q.GetWithPriority()
			if uses[req.Name] || prio != handler.LowPriority {
				t.Fatalf("served %s at priority %d; want only the apps that do not use the cluster, at low priority (%d)", req.Name, prio, handler.LowPriority)
			}
			q.Done(req)
		}
		if n := q.Len(); n != 0 {
			t.Fatalf("%d requests left after every MyApp was served once (served first: %v)", n, served)
		}
	})

	t.Run("initial list and resync", func(t *testing.T) {
		// The hub starting (the informer's initial list) and a resync
		// (same resourceVersion) change nothing: every app at low
		// priority.
		for name, send := range map[string]func(q workqueue.TypedRateLimitingInterface[reconcile.Request]){
			"initial list": func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				h.Create(ctx, event.CreateEvent{Object: lost, IsInInitialList: true}, q)
			},
			"resync": func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				h.Update(ctx, event.UpdateEvent{ObjectOld: lost, ObjectNew: lost}, q)
			},
		} {
			q := priorityqueue.New[reconcile.Request]("test")
			send(q)
			for range 40 {
				req, prio, _ := q.GetWithPriority()
				if prio != handler.LowPriority {
					t.Errorf("%s: %s at priority %d, want every app at low priority (%d)", name, req.Name, prio, handler.LowPriority)
				}
				q.Done(req)
			}
			q.ShutDown()
		}
	})

	t.Run("plain queue", func(t *testing.T) {
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		defer q.ShutDown()
		h.Update(ctx, event.UpdateEvent{ObjectOld: lost, ObjectNew: changed}, q)
		if n := q.Len(); n != 40 {
			t.Fatalf("%d requests, want every one of the 40 MyApps", n)
		}
		for i := range 40 {
			req, _ := q.Get()
			if want := i < len(uses); uses[req.Name] != want {
				t.Fatalf("request %d is %s (uses the cluster: %v); the %d apps that use it must come first", i, req.Name, uses[req.Name], len(uses))
			}
			q.Done(req)
		}
	})
}

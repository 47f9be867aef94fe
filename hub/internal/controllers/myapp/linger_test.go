package myapp

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func TestLingerGrowsWithClustersUpToItsCap(t *testing.T) {
	for _, c := range []struct {
		clusters int
		want     time.Duration
	}{
		{0, 0}, {3, 0}, {lingerMinClusters - 1, 0},
		{lingerMinClusters, 100 * time.Millisecond},
		{200, time.Second},
		{1000, maxLinger},
		{100000, maxLinger},
	} {
		if got := linger(c.clusters); got != c.want {
			t.Errorf("linger(%d) = %v, want %v", c.clusters, got, c.want)
		}
	}
}

// The wait of an app's Work events counts from its last reconcile: none
// for an app over few clusters, the rest of its linger for one over many,
// none once the linger is over, none once the app is forgotten, and none
// once the app shrank below lingerMinClusters.
func TestLingersWaitFromTheLastReconcile(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	big := types.NamespacedName{Namespace: "team", Name: "everywhere"}
	small := types.NamespacedName{Namespace: "team", Name: "three"}
	var l lingers
	l.reconciled(big, 1000, t0)
	l.reconciled(small, 3, t0)
	if got := l.wait(big, t0.Add(time.Second)); got != 4*time.Second {
		t.Errorf("1 s after the reconcile of an app over 1,000 clusters its Work events wait %v, want the rest of its 5 s linger, 4s", got)
	}
	if got := l.wait(small, t0.Add(time.Millisecond)); got != 0 {
		t.Errorf("an app over 3 clusters: its Work events wait %v, want 0", got)
	}
	if got := l.wait(big, t0.Add(6*time.Second)); got != 0 {
		t.Errorf("after its linger: wait %v, want 0", got)
	}
	if got := l.wait(types.NamespacedName{Namespace: "team", Name: "never-reconciled"}, t0); got != 0 {
		t.Errorf("an app never reconciled: wait %v, want 0", got)
	}
	// A newer reconcile moves the window.
	l.reconciled(big, 1000, t0.Add(10*time.Second))
	if got := l.wait(big, t0.Add(11*time.Second)); got != 4*time.Second {
		t.Errorf("1 s after a newer reconcile: wait %v, want 4s", got)
	}
	// Fewer clusters now: no linger.
	l.reconciled(big, 5, t0.Add(12*time.Second))
	if got := l.wait(big, t0.Add(12*time.Second)); got != 0 {
		t.Errorf("after shrinking to 5 clusters: wait %v, want 0", got)
	}
	l.reconciled(big, 1000, t0.Add(20*time.Second))
	l.forget(big)
	if got := l.wait(big, t0.Add(20*time.Second)); got != 0 {
		t.Errorf("a deleted app: wait %v, want 0", got)
	}
}

func workOf(app types.NamespacedName, cluster, rv string) *flotillav1.Work {
	return &flotillav1.Work{ObjectMeta: metav1.ObjectMeta{
		Namespace: "flotilla-cluster-" + cluster, Name: app.Namespace + "-" + app.Name, ResourceVersion: rv,
		Labels: map[string]string{flotillav1.LabelMyAppNamespace: app.Namespace, flotillav1.LabelMyAppName: app.Name},
	}}
}

// Work events of an app over few clusters enqueue it at once; those of an
// app over many, reconciled just now, are held until its linger ends and
// then served as one reconcile; a Work with no MyApp labels enqueues
// nothing. Checked with the priority queue the controller uses and with a
// plain rate-limiting queue.
func TestWorkEventsOfAnAppOverManyClustersLinger(t *testing.T) {
	big := types.NamespacedName{Namespace: "team", Name: "everywhere"}
	small := types.NamespacedName{Namespace: "team", Name: "three"}
	// A linger of 2 s: the events below must all be handled before it
	// ends, even on a loaded machine under the race detector.
	const clusters = 400
	queues := map[string]func() workqueue.TypedRateLimitingInterface[reconcile.Request]{
		"priority queue": func() workqueue.TypedRateLimitingInterface[reconcile.Request] {
			return priorityqueue.New[reconcile.Request]("test")
		},
		"plain queue": func() workqueue.TypedRateLimitingInterface[reconcile.Request] {
			return workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		},
	}
	for name, newQueue := range queues {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			q := newQueue()
			defer q.ShutDown()
			r := &Reconciler{}
			h := byEvent{workHandler{r}}
			r.lingers.reconciled(big, clusters, time.Now())
			r.lingers.reconciled(small, 3, time.Now())

			h.Update(ctx, event.UpdateEvent{ObjectOld: workOf(small, "a", "1"), ObjectNew: workOf(small, "a", "2")}, q)
			h.Create(ctx, event.CreateEvent{Object: &flotillav1.Work{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "unlabelled"}}}, q)
			for i := range clusters {
				c := fmt.Sprintf("m%03d", i)
				h.Update(ctx, event.UpdateEvent{ObjectOld: workOf(big, c, "1"), ObjectNew: workOf(big, c, "2")}, q)
			}
			if n := q.Len(); n != 1 {
				t.Fatalf("right after the events %d requests are ready, want 1 (the app over 3 clusters; the other lingers)", n)
			}
			if req, _ := q.Get(); req.NamespacedName != small {
				t.Fatalf("served %s first, want %s", req, small)
			} else {
				q.Done(req)
			}
			deadline := time.Now().Add(10 * time.Second)
			for q.Len() == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the app over %d clusters was not enqueued within 10 s of its Work events (its linger is %v)", clusters, linger(clusters))
				}
				time.Sleep(10 * time.Millisecond)
			}
			if req, _ := q.Get(); req.NamespacedName != big {
				t.Fatalf("after the linger served %s, want %s", req, big)
			} else {
				q.Done(req)
			}
			// The events were one request.
			time.Sleep(2 * linger(clusters))
			if n := q.Len(); n != 0 {
				t.Fatalf("%d more requests after the one that served the app's %d Work events, want 0: they are coalesced", n, clusters)
			}
			// Its linger over, the next event is served at once.
			r.lingers.reconciled(big, clusters, time.Now().Add(-linger(clusters)))
			h.Delete(ctx, event.DeleteEvent{Object: workOf(big, "m000", "3")}, q)
			if n := q.Len(); n != 1 {
				t.Fatalf("an event after the linger: %d requests ready, want 1 at once", n)
			}
		})
	}
}

// A Work of the informer's initial list, or a resync, enqueues its app at
// low priority, as controller-runtime's own handlers do; a change at the
// default priority.
func TestWorkEventsKeepControllerRuntimePriorities(t *testing.T) {
	app := types.NamespacedName{Namespace: "team", Name: "three"}
	ctx := context.Background()
	r := &Reconciler{Clock: clocktesting.NewFakePassiveClock(time.Now())}
	h := byEvent{workHandler{r}}
	for _, c := range []struct {
		name string
		send func(q workqueue.TypedRateLimitingInterface[reconcile.Request])
		want int
	}{
		{"initial list", func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Create(ctx, event.CreateEvent{Object: workOf(app, "a", "1"), IsInInitialList: true}, q)
		}, handler.LowPriority},
		{"resync", func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(ctx, event.UpdateEvent{ObjectOld: workOf(app, "a", "1"), ObjectNew: workOf(app, "a", "1")}, q)
		}, handler.LowPriority},
		{"new Work", func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Create(ctx, event.CreateEvent{Object: workOf(app, "a", "1")}, q)
		}, 0},
		{"change", func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(ctx, event.UpdateEvent{ObjectOld: workOf(app, "a", "1"), ObjectNew: workOf(app, "a", "2")}, q)
		}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := priorityqueue.New[reconcile.Request]("test")
			defer q.ShutDown()
			c.send(q)
			req, prio, _ := q.GetWithPriority()
			if req.NamespacedName != app || prio != c.want {
				t.Fatalf("enqueued %s at priority %d, want %s at %d", req, prio, app, c.want)
			}
		})
	}
}

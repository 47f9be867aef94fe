package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/fleet"
)

// observer keeps the latest state of everything the benchmark watches (the
// Deployments in each member's bench namespace; the bench MyApps, their
// Works and the MemberClusters on the hub), fed by informers started before
// anything is created. A waiter registered before an action is stamped with
// the time of the watch event that first made its condition true, so the
// figures come from watch events, not from polling.
type observer struct {
	mu sync.Mutex
	// deploys: member -> Deployment name -> latest.
	deploys map[string]map[string]*appsv1.Deployment
	// deploySeen: "member/name" -> when the Deployment was first seen.
	deploySeen map[string]time.Time
	// works: member -> Work name -> latest.
	works map[string]map[string]*flotillav1.Work
	// workSeen: "member/name" -> when the Work was first seen.
	workSeen map[string]time.Time
	// apps: MyApp name -> latest (bench namespace only).
	apps map[string]*flotillav1.MyApp
	// clusters: MemberCluster name -> latest.
	clusters map[string]*flotillav1.MemberCluster
	waiters  map[*waiter]struct{}

	// memberStop cancels one member's informers (see watchMember).
	memberStop map[string]context.CancelFunc
}

func newObserver() *observer {
	return &observer{
		deploys:    map[string]map[string]*appsv1.Deployment{},
		deploySeen: map[string]time.Time{},
		works:      map[string]map[string]*flotillav1.Work{},
		workSeen:   map[string]time.Time{},
		apps:       map[string]*flotillav1.MyApp{},
		clusters:   map[string]*flotillav1.MemberCluster{},
		waiters:    map[*waiter]struct{}{},
		memberStop: map[string]context.CancelFunc{},
	}
}

// waiter is a condition over the observer's state and the time of the
// event that made it true.
type waiter struct {
	o    *observer
	cond func(o *observer) bool
	done chan time.Time
	// then, when set, runs in a goroutine of its own as the condition
	// becomes true, with the event's time.
	then func(at time.Time)
}

// expect registers cond. Register before the action it times: a condition
// already true is stamped with the time of registration.
func (o *observer) expect(cond func(o *observer) bool) *waiter {
	return o.expectThen(cond, nil)
}

// expectThen is expect, and runs then (when not nil) in a goroutine of its
// own the moment cond becomes true: an action timed from a watch event,
// not from the waiter's return.
func (o *observer) expectThen(cond func(o *observer) bool, then func(at time.Time)) *waiter {
	w := &waiter{o: o, cond: cond, done: make(chan time.Time, 1), then: then}
	o.mu.Lock()
	defer o.mu.Unlock()
	if cond(o) {
		w.fire(time.Now())
	} else {
		o.waiters[w] = struct{}{}
	}
	return w
}

// fire stamps w with at and starts its then.
func (w *waiter) fire(at time.Time) {
	w.done <- at
	if w.then != nil {
		go w.then(at)
	}
}

// wait returns the time the condition became true.
func (w *waiter) wait(ctx context.Context, timeout time.Duration, what string) (time.Time, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case at := <-w.done:
		return at, nil
	case <-ctx.Done():
		w.cancel()
		return time.Time{}, ctx.Err()
	case <-t.C:
		w.cancel()
		return time.Time{}, fmt.Errorf("timed out after %s waiting for %s", timeout, what)
	}
}

func (w *waiter) cancel() {
	w.o.mu.Lock()
	delete(w.o.waiters, w)
	w.o.mu.Unlock()
}

// update applies f to the state under the lock, then stamps every waiter
// whose condition became true with now, the time the event arrived.
func (o *observer) update(now time.Time, f func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f()
	for w := range o.waiters {
		if w.cond(o) {
			w.fire(now)
			delete(o.waiters, w)
		}
	}
}

// read runs f under the lock.
func (o *observer) read(f func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f()
}

// handlers returns informer event handlers that time-stamp each event on
// arrival and pass the object (nil on delete) to set.
func (o *observer) handlers(set func(now time.Time, obj client.Object, deleted bool)) toolscache.ResourceEventHandlerFuncs {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			now := time.Now()
			if c, ok := obj.(client.Object); ok {
				o.update(now, func() { set(now, c, false) })
			}
		},
		UpdateFunc: func(_, obj any) {
			now := time.Now()
			if c, ok := obj.(client.Object); ok {
				o.update(now, func() { set(now, c, false) })
			}
		},
		DeleteFunc: func(obj any) {
			now := time.Now()
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if c, ok := obj.(client.Object); ok {
				o.update(now, func() { set(now, c, true) })
			}
		},
	}
}

// watchMember starts an informer on the Deployments of member's bench
// namespace and waits until it has synced. stopMember ends it; a member
// that is about to be stopped has its informer stopped first, so its
// reflector does not retry against a dead apiserver with growing backoff.
func (o *observer) watchMember(ctx context.Context, member string, cfg *rest.Config) error {
	ctx, cancel := context.WithCancel(ctx)
	c, err := cache.New(cfg, cache.Options{
		Scheme:            fleet.Scheme(),
		DefaultNamespaces: map[string]cache.Config{benchNamespace: {}},
	})
	if err != nil {
		cancel()
		return err
	}
	inf, err := c.GetInformer(ctx, &appsv1.Deployment{})
	if err != nil {
		cancel()
		return err
	}
	if _, err := inf.AddEventHandler(o.handlers(func(now time.Time, obj client.Object, deleted bool) {
		d, ok := obj.(*appsv1.Deployment)
		if !ok {
			return
		}
		m := o.deploys[member]
		if m == nil {
			m = map[string]*appsv1.Deployment{}
			o.deploys[member] = m
		}
		if deleted {
			delete(m, d.Name)
			return
		}
		m[d.Name] = d
		key := member + "/" + d.Name
		if _, ok := o.deploySeen[key]; !ok {
			o.deploySeen[key] = now
		}
	})); err != nil {
		cancel()
		return err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		cancel()
		return fmt.Errorf("the Deployment informer of %s did not sync", member)
	}
	o.mu.Lock()
	o.memberStop[member] = cancel
	o.mu.Unlock()
	return nil
}

// stopMember ends member's informer and forgets what it saw.
func (o *observer) stopMember(member string) {
	o.mu.Lock()
	cancel := o.memberStop[member]
	delete(o.memberStop, member)
	delete(o.deploys, member)
	o.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// watchHub starts informers on the bench MyApps, their Works and the
// MemberClusters, and waits until they have synced.
func (o *observer) watchHub(ctx context.Context, cfg *rest.Config) error {
	c, err := cache.New(cfg, cache.Options{
		Scheme: fleet.Scheme(),
		ByObject: map[client.Object]cache.ByObject{
			&flotillav1.MyApp{}: {Namespaces: map[string]cache.Config{benchNamespace: {}}},
			&flotillav1.Work{}:  {Label: labels.SelectorFromSet(labels.Set{flotillav1.LabelMyAppNamespace: benchNamespace})},
		},
	})
	if err != nil {
		return err
	}
	apps, err := c.GetInformer(ctx, &flotillav1.MyApp{})
	if err != nil {
		return err
	}
	if _, err := apps.AddEventHandler(o.handlers(func(_ time.Time, obj client.Object, deleted bool) {
		a, ok := obj.(*flotillav1.MyApp)
		if !ok {
			return
		}
		if deleted {
			delete(o.apps, a.Name)
			return
		}
		o.apps[a.Name] = a
	})); err != nil {
		return err
	}
	works, err := c.GetInformer(ctx, &flotillav1.Work{})
	if err != nil {
		return err
	}
	if _, err := works.AddEventHandler(o.handlers(func(now time.Time, obj client.Object, deleted bool) {
		w, ok := obj.(*flotillav1.Work)
		if !ok {
			return
		}
		member := w.Labels[flotillav1.LabelCluster]
		m := o.works[member]
		if m == nil {
			m = map[string]*flotillav1.Work{}
			o.works[member] = m
		}
		if deleted {
			delete(m, w.Name)
			return
		}
		m[w.Name] = w
		key := member + "/" + w.Name
		if _, ok := o.workSeen[key]; !ok {
			o.workSeen[key] = now
		}
	})); err != nil {
		return err
	}
	clusters, err := c.GetInformer(ctx, &flotillav1.MemberCluster{})
	if err != nil {
		return err
	}
	if _, err := clusters.AddEventHandler(o.handlers(func(_ time.Time, obj client.Object, deleted bool) {
		mc, ok := obj.(*flotillav1.MemberCluster)
		if !ok {
			return
		}
		if deleted {
			delete(o.clusters, mc.Name)
			return
		}
		o.clusters[mc.Name] = mc
	})); err != nil {
		return err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("the hub informers did not sync")
	}
	return nil
}
